#!/usr/bin/env python3
"""System calls per lone lease request: ``strace -f -c`` of ``appbench.py --batch 1`` run twice, with
``--cycles LOW`` and ``--cycles HIGH``, the difference divided by the requests between them (3 a
cycle), so that Django's start and the warm-up cancel out; the checkpoint thread off
(LEASEHOLD_SQLITE_CHECKPOINT_INTERVAL=0: its timing would move the counts; SQLite's automatic
checkpoints stay). A count the machine's load does not move (decision 0047), in this checkout and,
with ``--compare-tree DIR``, in another one, alternating.

    .venv/bin/python bench/syscalls.py [--low 100] [--high 300] [--rounds 1] [--compare-tree DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHOWN = ("fcntl", "pwrite64", "pread64", "fdatasync", "flock", "futex", "openat", "close", "lseek")
ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")


def counts(tree: Path, cycles: int) -> dict[str, int]:
    """Calls by name, appbench --batch 1 --cycles ``cycles`` under strace -f -c."""
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "strace.txt"
        env = {**os.environ, "PYTHONHASHSEED": "0", "LEASEHOLD_SQLITE_CHECKPOINT_INTERVAL": "0"}
        subprocess.run(["strace", "-f", "-c", "-o", str(out), str(tree / ".venv/bin/python"),
                        str(tree / "bench/appbench.py"), "--batch", "1", "--cycles", str(cycles)],
                       cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
        found = {}
        for line in out.read_text().splitlines():
            match = ROW.match(line)
            if match:
                found[match.group(2)] = int(match.group(1))
        return found


def per_request(tree: Path, low: int, high: int) -> dict[str, float]:
    a, b = counts(tree, low), counts(tree, high)
    requests = 3 * (high - low)
    return {name: (b.get(name, 0) - a.get(name, 0)) / requests for name in sorted(set(a) | set(b))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--low", type=int, default=100)
    ap.add_argument("--high", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--compare-tree", type=Path, default=None)
    args = ap.parse_args()
    trees = [("this", REPO)] + ([("other", args.compare_tree.resolve())] if args.compare_tree else [])
    print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    print("tree  round  " + "  ".join(f"{name:>9}" for name in SHOWN))
    for r in range(args.rounds):
        for label, tree in trees:
            calls = per_request(tree, args.low, args.high)
            print(f"{label:5} {r:5}  " + "  ".join(f"{calls.get(name, 0.0):9.2f}" for name in SHOWN), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
