#!/usr/bin/env python3
"""Instructions per lease request, counted by valgrind's callgrind: ``appbench.py --batch N``'s
measured rounds only (the warm-up and Django's start run uninstrumented), in this checkout and, with
``--compare-tree DIR``, in another one, alternating. An instruction count does not move with the
machine's load as CPU time does (a 2-core machine shared with other work: CPU a request varied 2x
between rounds), so it can tell a few percent; it does not count the kernel's work (syscalls,
fsync) nor cache misses: read it beside ``appbench.py``'s CPU times and ``run.py``'s paired rounds.

    .venv/bin/python bench/instructions.py [--cycles 60] [--batch 1] [--rounds 2] [--compare-tree DIR]

Needs valgrind, its headers (valgrind/callgrind.h) and a C compiler; about 30 s of CPU a run.
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
HELPER_C = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT("measured"); }
"""
# Run inside valgrind: appbench's --profile hooks start and stop the counting instead of cProfile.
DRIVER = """import ctypes, sys, cProfile, pstats
lib = ctypes.CDLL(sys.argv.pop(1))
sys.path[:0] = [sys.argv[1] + "/bench", sys.argv[1]]
class Counting:
    def __init__(self, *a): pass
    def enable(self): lib.cg_start()
    def disable(self): lib.cg_stop()
class NoStats:
    stats: dict = {}
    def __init__(self, *a): pass
    def sort_stats(self, *a): return self
    def print_stats(self, *a): pass
    def print_callees(self, *a): pass
cProfile.Profile, pstats.Stats = Counting, NoStats
import appbench
sys.argv = ["appbench.py", "--profile"] + sys.argv[2:]
appbench.main()
"""


def count(tree: Path, work: Path, helper: Path, cycles: int, batch: int) -> float:
    """Instructions a request of appbench's measured rounds, run in ``tree`` with its own .venv."""
    out = work / "callgrind.out"
    for old in work.glob("callgrind.out*"):
        old.unlink()
    driver = work / "driver.py"
    driver.write_text(DRIVER)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                    str(tree / ".venv/bin/python"), str(driver), str(helper), str(tree),
                    "--cycles", str(cycles), "--batch", str(batch)],
                   cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    totals = [int(m.group(1)) for path in work.glob("callgrind.out*")
              for m in re.finditer(r"^totals: (\d+)", path.read_text(errors="replace"), re.M)]
    return max(totals) / (cycles // batch * 3 * batch)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=60)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--compare-tree", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="instructions-") as name:
        work = Path(name)
        (work / "helper.c").write_text(HELPER_C)
        helper = work / "libcgctl.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(helper), str(work / "helper.c")], check=True)
        trees = [REPO] + ([args.compare_tree.resolve()] if args.compare_tree else [])
        figures: dict[Path, list[float]] = {tree: [] for tree in trees}
        for r in range(args.rounds):
            for tree in trees:
                figures[tree].append(count(tree, work, helper, args.cycles, args.batch))
                print(f"round {r + 1} {tree}: {figures[tree][-1]:,.0f} instructions a request", flush=True)
    for tree, values in figures.items():
        print(f"{tree}: median {sorted(values)[len(values) // 2]:,.0f} instructions a request "
              f"(batches of {args.batch}, {args.cycles} cycles a round)")
    if args.compare_tree:
        ratios = sorted(a / b for a, b in zip(figures[REPO], figures[trees[1]]))
        print(f"this / compared: {ratios[len(ratios) // 2]:.3f} (median of the rounds' ratios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
