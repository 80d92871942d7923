#!/usr/bin/env python3
"""Retention under full load: does pruning keep the database flat without
slowing leases down?

    .venv/bin/python bench/retention.py                      # 2 x 10 minutes
    .venv/bin/python bench/retention.py --duration 60 --horizon 20   # a smoke run

Runs Leasehold as `make run` does (granian, two workers, SQLite,
synchronous=FULL) twice on fresh databases, each time with 16 clients
cycling acquire -> renew -> release at full speed (bench/loadgen.py):
first without retention, then with every event kept only ``--horizon``
seconds (LEASEHOLD_RETENTION_RENEWALS and _EVENTS), the server's own
background pruner deleting behind it. Every ``--sample`` seconds it records
the database's size (main file and WAL) and the events kept; at the end it
prints, per run, lease p50/p99 and requests/s, and the size over time. Done
when the pruned run's size stops growing after the first minutes and its p99
is within 10% of the unpruned run's.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen  # noqa: E402
import servers  # noqa: E402
from run import ACCOUNT, CONTAINER, KEY, cycle_blob, pct, setup_server  # noqa: E402


def db_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())


def events_kept(db: Path) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute("SELECT count(*) FROM leases_leaseevent").fetchone()[0]
    finally:
        con.close()


def run(label: str, args, workdir: Path, extra_env: dict) -> dict:
    server = servers.Leasehold(args.port, workdir, extra_env=extra_env)
    server.prepare()
    server.start()
    try:
        blobs = [cycle_blob(i) for i in range(args.clients)]
        setup_server(server, blobs)
        signer = loadgen.Signer(ACCOUNT, KEY)
        recs = [loadgen.Recorder() for _ in range(args.clients)]
        t0 = time.perf_counter()
        stop_at = t0 + args.duration
        threads = [threading.Thread(target=loadgen.cycle_worker, daemon=True, args=(
            "127.0.0.1", args.port, [loadgen.LeaseRequests(signer, server.host, f"/{ACCOUNT}/{CONTAINER}/{b}")],
            stop_at, rec)) for b, rec in zip(blobs, recs)]
        for t in threads:
            t.start()
        samples = []
        while time.perf_counter() < stop_at:
            time.sleep(min(args.sample, max(0.0, stop_at - time.perf_counter())))
            samples.append((time.perf_counter() - t0, db_bytes(server.db), events_kept(server.db)))
        for t in threads:
            t.join(timeout=loadgen.SOCKET_TIMEOUT * 4 + 5)
    finally:
        server.stop()
    lats = sorted(lat for rec in recs for _, _, _, lat in rec.records)
    errors = sum(1 for rec in recs for _, _, status, _ in rec.records if status >= 500)
    failures = sum(len(rec.failures) for rec in recs)
    return {"label": label, "p50": pct(lats, 0.5) * 1e3, "p99": pct(lats, 0.99) * 1e3,
            "rps": len(lats) / args.duration, "5xx": errors, "failures": failures, "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600, help="seconds of load per run (default 600)")
    parser.add_argument("--horizon", type=float, default=60, help="seconds events are kept in the pruned run")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--sample", type=float, default=10, help="seconds between size samples")
    parser.add_argument("--port", type=int, default=10600)
    parser.add_argument("--only-pruned", action="store_true", help="skip the run without pruning")
    parser.add_argument("--batch", type=int, default=None,
                        help="LEASEHOLD_RETENTION_BATCH of the pruned run (default: the server's)")
    args = parser.parse_args()

    results = []
    configs = [("no pruning", {}), (f"pruned, {args.horizon:g} s kept", {
        "LEASEHOLD_RETENTION_RENEWALS": f"{args.horizon:g}s", "LEASEHOLD_RETENTION_EVENTS": f"{args.horizon:g}s",
        "LEASEHOLD_RETENTION_IDLE": "1",
        **({"LEASEHOLD_RETENTION_BATCH": str(args.batch)} if args.batch else {})})]
    for label, env in configs[1:] if args.only_pruned else configs:
        with tempfile.TemporaryDirectory(prefix="leasehold-retention-") as tmp:
            servers.log(f"{label}: {args.duration:g} s, {args.clients} clients")
            results.append(run(label, args, Path(tmp), env))

    print(f"\n{'run':<24} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'5xx':>5} {'no answer':>9}")
    for r in results:
        print(f"{r['label']:<24} {r['rps']:>8.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} {r['5xx']:>5} {r['failures']:>9}")
    if len(results) == 2:
        print(f"p99 pruned / unpruned: {results[1]['p99'] / results[0]['p99']:.3f}")
    for r in results:
        print(f"\n{r['label']}: database size (file + WAL) and events kept over time")
        for at, size, kept in r["samples"]:
            print(f"  {at:7.0f} s {size / 2**20:9.1f} MiB {kept:>10,} events")
        tail = [s for s in r["samples"] if s[0] >= min(180, args.duration / 2)]
        if len(tail) >= 2:
            print(f"  growth from {tail[0][0]:.0f} s to the end: {(tail[-1][1] - tail[0][1]) / 2**20:+.1f} MiB")


if __name__ == "__main__":
    main()
