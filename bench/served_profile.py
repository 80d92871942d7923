#!/usr/bin/env python3
"""Where a *served* lease request's CPU goes: a production server (as `make run`, fresh SQLite file)
under the cycle scenario of bench/run.py, sampled by py-spy across its master and workers (only the
thread holding the GIL: Python's own work, not waits), and, in a second run, its system calls
counted by ``strace -c -f``. With ``--compare-tree DIR`` the same for another checkout, alternating
(py-spy's sampling slows both alike: read the ratios, not the rates). Prints, per tree, the requests
answered, server CPU a request, the share of samples by module prefix (inclusive), the samples a
request by function and by file against the other tree, and the system calls a request.

    .venv/bin/python bench/served_profile.py [--clients 16] [--seconds 8] [--rounds 2] [--compare-tree DIR]
        [--keep DIR] [--no-strace]

py-spy (pip install py-spy) and strace must be on PATH or in the venv.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loadgen  # noqa: E402
import run  # noqa: E402
import servers  # noqa: E402

FILE = re.compile(r"\(([^():]+):\d+\)$")
LINE = re.compile(r":\d+\)$")
BUCKETS = ("uvicorn/", "h11", "httptools", "asyncio/", "serving/", "leases/azure/", "leases/api/",
           "leases/services/", "leases/storage/", "leases/domain/", "leases/ledger", "django/db/",
           "django/", "sqlite3", "threading.py", "selectors.py")


def load(server: servers.Leasehold, clients: int, seconds: float) -> tuple[int, float]:
    recs = [loadgen.Recorder() for _ in range(clients)]
    stop_at = time.perf_counter() + seconds
    threads = [threading.Thread(target=loadgen.cycle_worker, daemon=True,
                                args=("127.0.0.1", server.port,
                                      [run.lease_requests(server, "azure", run.cycle_blob(i))], stop_at, recs[i]))
               for i in range(clients)]
    pids = server.pids()
    s0 = servers.cpu_seconds(pids)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s1 = servers.cpu_seconds(pids)
    answered = sum(len(r.records) for r in recs)
    return answered, s1 - s0


def pyspy(server: servers.Leasehold, seconds: float, out: Path) -> subprocess.Popen:
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen([exe, "record", "--pid", str(server.pid), "--subprocesses", "--gil",
                             "--rate", "200", "--format", "raw", "--duration", str(int(seconds)),
                             "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def shares(raw: Path) -> tuple[int, dict[str, float], list[tuple[str, int]], collections.Counter, collections.Counter]:
    total = 0
    incl: collections.Counter = collections.Counter()
    leaf: collections.Counter = collections.Counter()
    funcs: collections.Counter = collections.Counter()
    files: collections.Counter = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        count = int(n)
        frames = stack.split(";")
        top = frames[-1]
        total += count
        seen = set()
        for frame in frames:
            for b in BUCKETS:
                if b in frame and b not in seen:
                    seen.add(b)
                    incl[b] += count
        leaf[LINE.sub(")", top)] += count
        where = FILE.search(top)
        files[where.group(1) if where else top] += count
        for name in {LINE.sub(")", f) for f in frames}:
            funcs[name] += count
    return total, {b: incl[b] / total for b in BUCKETS if total}, leaf.most_common(25), funcs, files


def strace_counts(server: servers.Leasehold, clients: int, seconds: float, work: Path) -> tuple[int, dict]:
    out = work / "strace.txt"
    procs = [subprocess.Popen(["strace", "-c", "-f", "-o", f"{out}.{pid}", "-p", str(pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in server.pids()]
    time.sleep(1.0)
    answered, _ = load(server, clients, seconds)
    for p in procs:
        p.send_signal(2)
    for p in procs:
        p.wait(timeout=30)
    calls: collections.Counter = collections.Counter()
    for f in work.glob("strace.txt.*"):
        for line in f.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1].isidentifier() and parts[-1] != "total":
                calls[parts[-1]] += int(parts[3])
        f.unlink()
    return answered, {k: v / answered for k, v in calls.most_common(14)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--compare-tree", default=None)
    ap.add_argument("--keep", default=None, metavar="DIR", help="copy py-spy's raw stacks here")
    ap.add_argument("--no-strace", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="served-", dir=servers.BENCH / "var"))
    trees = [("this", None)] + ([("other", args.compare_tree)] if args.compare_tree else [])
    started = []
    try:
        for i, (label, tree) in enumerate(trees):
            s = servers.Leasehold(10121 + 2 * i, work / label, tree=tree)
            (work / label).mkdir()
            s.prepare()
            s.start()
            started.append((label, s))
            run.setup_server(s, [run.cycle_blob(c) for c in range(args.clients)])
            load(s, args.clients, 2.0)  # warm
        inclusive: dict = {}
        selfs: dict = {}
        print(f"# load average {os.getloadavg()[0]:.1f}, {args.clients} clients, {args.seconds:.0f} s a run")
        for r in range(args.rounds):
            for label, s in started:
                raw = work / f"{label}-{r}.txt"
                spy = pyspy(s, args.seconds + 1, raw)
                time.sleep(0.5)
                answered, cpu = load(s, args.clients, args.seconds)
                spy.wait(timeout=60)
                total, share, leaves, funcs, files = shares(raw)
                per_req = {k: v / answered for k, v in funcs.items()}
                acc = inclusive.setdefault(label, collections.Counter())
                acc.update(per_req)
                own = selfs.setdefault(label, collections.Counter())
                own.update({k: v / answered for k, v in files.items()})
                print(f"\n## {label} round {r}: {answered / args.seconds:.0f} req/s, "
                      f"{1e3 * cpu / answered:.3f} ms server CPU a request, {total} busy samples")
                print("  " + "  ".join(f"{b}{100 * v:.0f}%" for b, v in share.items()))
                if r == args.rounds - 1:
                    for name, n in leaves[:18]:
                        print(f"    {100 * n / total:5.1f}%  {name}")
        if len(inclusive) == 2:
            a, b = inclusive["this"], inclusive["other"]
            diff = sorted(set(a) | set(b), key=lambda k: -(a[k] - b[k]))
            print("\n## samples a request, this minus other (inclusive, by function; 200 a second)")
            for k in diff[:25]:
                print(f"  {(a[k] - b[k]) / args.rounds:+.4f}  this {a[k] / args.rounds:.4f}  {k}")
            print("  ...")
            a, b = selfs["this"], selfs["other"]
            print("\n## own samples a request by file, this and other")
            for k in sorted(set(a) | set(b), key=lambda k: -(a[k] + b[k]))[:40]:
                print(f"  {a[k] / args.rounds:.4f}  {b[k] / args.rounds:.4f}  {(a[k] - b[k]) / args.rounds:+.4f}  {k}")
            for k in diff[-10:]:
                print(f"  {(a[k] - b[k]) / args.rounds:+.4f}  this {a[k] / args.rounds:.4f}  {k}")
        if not args.no_strace and shutil.which("strace"):
            for label, s in started:
                answered, calls = strace_counts(s, args.clients, args.seconds / 2, work)
                print(f"\n## {label}: system calls a request (strace -c -f, {answered} requests)")
                print("  " + "  ".join(f"{k} {v:.2f}" for k, v in calls.items()))
    finally:
        for _, s in started:
            s.stop()
        if args.keep:
            for raw in work.glob("*-*.txt"):
                shutil.copy(raw, args.keep)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
