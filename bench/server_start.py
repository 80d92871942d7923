"""How long the production server takes to start, and the CPU its start costs.

    .venv/bin/python bench/server_start.py [--rounds 10] [--workers 2] [--compare-tree DIR]

Starts Leasehold as ``make run`` serves it (serving/server.py, ``--workers``
workers) on a fresh, migrated SQLite file, ``--rounds`` times, and measures
from the start: until the server says it is ready (every worker serves), and
the CPU its processes (supervisor and workers) had used by then. With
``--compare-tree`` (a checkout of other code, with its own .venv), the two
are started in alternating rounds and the ratios printed. Loopback only; the
machine's load is printed, as other work on it moves every figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers  # noqa: E402

READY = b"Leasehold ready on"


def one_start(server: servers.Leasehold) -> tuple[float, float]:
    """(seconds until ready, CPU seconds of the server's processes by then)."""
    server.logfile.write_bytes(b"")
    started = time.monotonic()
    proc = server._spawn([server.python, "-m", "serving.server"], env=server.env, cwd=server.repo)
    deadline = started + 60
    while READY not in server.logfile.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{server.name} did not start: {server.logfile.read_text()[-2000:]}")
        time.sleep(0.005)
    ready = time.monotonic() - started
    cpu = servers.cpu_seconds(server.pids())
    server.stop()
    return ready, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--compare-tree", help="a checkout of other code (with its own .venv) to start alongside")
    parser.add_argument("--port", type=int, default=18600)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="leasehold-start-"))
    env = {"LEASEHOLD_WORKERS": str(args.workers), "LEASEHOLD_LOG_LEVEL": "warning"}
    contenders = [servers.Leasehold(args.port, work / "this", extra_env=env)]
    if args.compare_tree:
        contenders.append(servers.Leasehold(args.port + 1, work / "other", extra_env=env, tree=args.compare_tree))
    for server in contenders:
        server.workdir.mkdir(parents=True)
        server.prepare()
    figures: dict[str, list[tuple[float, float]]] = {s.name: [] for s in contenders}
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.workers} workers, {args.rounds} rounds")
    for round_ in range(args.rounds):
        order = contenders if round_ % 2 == 0 else contenders[::-1]
        for server in order:
            figures[server.name].append(one_start(server))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    for server in contenders:
        ready = [r for r, _ in figures[server.name]]
        cpu = [c for _, c in figures[server.name]]
        print(f"{server.name} ({server.repo}): ready median {statistics.median(ready):.3f} s "
              f"(min {min(ready):.3f}, max {max(ready):.3f}); CPU median {statistics.median(cpu):.3f} s "
              f"(min {min(cpu):.3f}, max {max(cpu):.3f})")
    if len(contenders) == 2:
        ours, other = (figures[s.name] for s in contenders)
        ready = [a[0] / b[0] for a, b in zip(ours, other)]
        cpu = [a[1] / b[1] for a, b in zip(ours, other)]
        print(f"this / other, paired by round: ready median {statistics.median(ready):.2f}x, "
              f"CPU median {statistics.median(cpu):.2f}x")


if __name__ == "__main__":
    main()
