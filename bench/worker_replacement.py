"""How long a worker killed with SIGKILL under load takes to be replaced.

    .venv/bin/python bench/worker_replacement.py [--kills 10] [--holders 16]

Starts Leasehold as ``make run`` serves it (two workers, bench/servers.py) on a
fresh SQLite file; 16 holders renew their own 15-s leases as fast as they can
(reconnecting when their worker dies). Then, ``--kills`` times, SIGKILLs one
worker and measures, from the kill: the replacement's process appearing, and
the replacement listening (uvicorn listens once the app's start-up is done,
so that is when it serves). Prints each kill and the median and maximum, the
holders' renewals refused or failed, and their p99 latency. Loopback only;
the machine's load is printed, as other work on it moves every figure.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers  # noqa: E402
from hostile import ACCOUNT, CONTAINER, KEY, pct, setup_blobs  # noqa: E402
from loadgen import Connection, LeaseRequests, Signer  # noqa: E402


def _listening_inodes(port: int) -> set[str]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            next(fh)
            for line in fh:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    found.add(fields[9])
    return found


def _sockets(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def workers(server) -> tuple[list[int], list[int]]:
    """The supervisor's children, and those of them listening on the port."""
    children = [p for p in servers.tree_pids(server.pid) if p != server.pid]
    listening = _listening_inodes(server.port)
    return children, [p for p in children if _sockets(p) & listening]


def holder(server: servers.Leasehold, signer: Signer, name: str, stop: threading.Event,
           out: list[tuple[float, int | str]]) -> None:
    reqs = LeaseRequests(signer, server.host, f"/{ACCOUNT}/{CONTAINER}/{name}")
    lease_id = str(uuid.uuid4())
    conn = Connection("127.0.0.1", server.port)
    status, _, _ = conn.request(reqs.acquire(lease_id, 15))
    assert status == 201, status
    while not stop.is_set():
        t0 = time.monotonic()
        outcome: int | str
        try:
            outcome, _, _ = conn.request(reqs.renew(lease_id))
        except OSError:  # its worker was killed: the connection is gone, reconnect
            conn.close()
            conn = Connection("127.0.0.1", server.port)
            outcome = "cut"
        out.append((time.monotonic() - t0, outcome))
        time.sleep(0.05)
    conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--holders", type=int, default=16)
    ap.add_argument("--port", type=int, default=10131)
    args = ap.parse_args()
    servers.BENCH.joinpath("var").mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="replace-", dir=servers.BENCH / "var"))
    server = servers.Leasehold(args.port, workdir)
    server.prepare()
    server.start()
    stop = threading.Event()
    renewals: list[tuple[float, int | str]] = []
    try:
        signer = Signer(ACCOUNT, KEY)
        names = [f"holder-{i:02d}" for i in range(args.holders)]
        setup_blobs(server, names)
        threads = [threading.Thread(target=holder, args=(server, signer, n, stop, renewals)) for n in names]
        for t in threads:
            t.start()
        print(f"# Leasehold ({server.settings_summary()}), {args.holders} holders renewing, "
              f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        spawned: list[float] = []
        serving: list[float] = []
        for k in range(args.kills):
            time.sleep(2.0)  # load runs on both workers between kills
            before, listening = workers(server)
            victim = listening[0]
            killed = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            seen_process = None
            while time.monotonic() - killed < 60:
                children, listening = workers(server)
                new = [p for p in children if p not in before]
                if new and seen_process is None:
                    seen_process = time.monotonic() - killed
                if new and any(p in listening for p in new):
                    break
                time.sleep(0.005)
            else:
                raise SystemExit(f"kill {k + 1}: worker {victim} not replaced within 60 s")
            assert seen_process is not None  # set once the replacement appeared, before it listened
            spawned.append(seen_process)
            serving.append(time.monotonic() - killed)
            print(f"kill {k + 1}: worker {victim}: replacement started after {spawned[-1]:.3f} s, "
                  f"serving after {serving[-1]:.3f} s (load {os.getloadavg()[0]:.1f})", flush=True)
        stop.set()
        for t in threads:
            t.join(30)
        lat = [t for t, s in renewals if s == 200]
        print(f"replacement started: median {statistics.median(spawned):.3f} s, max {max(spawned):.3f} s; "
              f"serving: median {statistics.median(serving):.3f} s, max {max(serving):.3f} s")
        print(f"renewals: {len(renewals)}, 200: {len(lat)}, cut with their worker: "
              f"{sum(1 for _, s in renewals if s == 'cut')}, other: "
              f"{sum(1 for _, s in renewals if s not in (200, 'cut'))}; p99 {pct(lat, .99) * 1e3:.1f} ms")
    finally:
        stop.set()
        server.stop()
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
