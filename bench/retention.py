#!/usr/bin/env python3
"""Retention under full load: does pruning keep the database flat without
slowing leases down?

    .venv/bin/python bench/retention.py                      # 10 minutes of load per server
    .venv/bin/python bench/retention.py --duration 120 --horizon 20 --window 10   # a smoke run

Two Leasehold servers run side by side as `make run` runs one (uvicorn, two
workers, SQLite, synchronous=FULL), each on a fresh database: one keeps
every event, the other keeps events only ``--horizon`` seconds
(LEASEHOLD_RETENTION_RENEWALS and _EVENTS), its own background pruner
deleting behind the load. 16 clients cycle acquire -> renew -> release at full
speed (bench/loadgen.py), on one server at a time, switching every
``--window`` seconds, so the two are compared in paired, alternating rounds
of one run: the machine's noise (it is shared) falls on both alike. With
the default window of half the horizon, the events of one pruned window
pass the horizon during that server's next window: the pruner deletes while
the load runs, at the rate the load inserts.

Every window records the database sizes (main file and WAL) and events kept;
at the end it prints per server lease p50/p99 and requests/s over all its
windows, the median of the per-round p99 ratios (pruned / kept), and the
size over time. Done when the pruned server's size stops growing after the
first minutes and its p99 is within 10% of the unpruned one's.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
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


def one_window(server: servers.Server, args, blobs: list[str]) -> list[loadgen.Recorder]:
    """All clients on one server for one window; their records."""
    signer = loadgen.Signer(ACCOUNT, KEY)
    recs = [loadgen.Recorder() for _ in blobs]
    stop_at = time.perf_counter() + args.window
    threads = [threading.Thread(target=loadgen.cycle_worker, daemon=True, args=(
        "127.0.0.1", server.port, [loadgen.LeaseRequests(signer, server.host, f"/{ACCOUNT}/{CONTAINER}/{b}")],
        stop_at, rec)) for b, rec in zip(blobs, recs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=args.window + loadgen.SOCKET_TIMEOUT * 4 + 5)
    return recs


def summary(recs: list[loadgen.Recorder], seconds: float) -> dict:
    lats = sorted(lat for rec in recs for _, _, _, lat in rec.records)
    return {"p50": pct(lats, 0.5) * 1e3, "p99": pct(lats, 0.99) * 1e3, "rps": len(lats) / seconds,
            "5xx": sum(1 for rec in recs for _, _, status, _ in rec.records if status >= 500),
            "failures": sum(len(rec.failures) for rec in recs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600, help="seconds of load per server (default 600)")
    parser.add_argument("--horizon", type=float, default=60, help="seconds events are kept by the pruned server")
    parser.add_argument("--window", type=float, default=None,
                        help="seconds of load on one server before switching (default: horizon / 2)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--port", type=int, default=10600, help="this port and the next")
    parser.add_argument("--batch", type=int, default=None,
                        help="LEASEHOLD_RETENTION_BATCH of the pruned server (default: the server's)")
    parser.add_argument("--pause", type=float, default=None,
                        help="LEASEHOLD_RETENTION_PAUSE of the pruned server (default: the server's)")
    args = parser.parse_args()
    args.window = args.window or args.horizon / 2
    rounds = max(1, round(args.duration / args.window))

    pruning = {"LEASEHOLD_RETENTION_RENEWALS": f"{args.horizon:g}s", "LEASEHOLD_RETENTION_EVENTS": f"{args.horizon:g}s",
               "LEASEHOLD_RETENTION_IDLE": "1",
               **({"LEASEHOLD_RETENTION_BATCH": str(args.batch)} if args.batch else {}),
               **({"LEASEHOLD_RETENTION_PAUSE": str(args.pause)} if args.pause is not None else {})}
    labels = ("kept", f"pruned ({args.horizon:g} s)")
    blobs = [cycle_blob(i) for i in range(args.clients)]
    with tempfile.TemporaryDirectory(prefix="leasehold-retention-") as tmp:
        both = []
        for i, env in enumerate(({}, pruning)):
            workdir = Path(tmp, str(i))
            workdir.mkdir()
            server = servers.Leasehold(args.port + i, workdir, extra_env=env)
            server.prepare()
            server.start()
            both.append(server)
        try:
            for server in both:
                setup_server(server, blobs)
            servers.log(f"{rounds} rounds of {args.window:g} s on each server, {args.clients} clients, "
                        f"{args.horizon:g} s horizon on the pruned one")
            records: tuple[list[loadgen.Recorder], ...] = ([], [])
            per_round: tuple[list[dict[str, float]], ...] = ([], [])
            samples: tuple[list[tuple[float, int, int]], ...] = ([], [])
            t0 = time.perf_counter()
            for r in range(rounds):
                # Alternate which server goes first, so neither always follows the other's load.
                for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                    recs = one_window(both[i], args, blobs)
                    records[i].extend(recs)
                    per_round[i].append(summary(recs, args.window))
                    samples[i].append((time.perf_counter() - t0, db_bytes(both[i].db), events_kept(both[i].db)))
                servers.log(f"round {r + 1}/{rounds}: p99 kept {per_round[0][-1]['p99']:.1f} ms, "
                            f"pruned {per_round[1][-1]['p99']:.1f} ms; pruned db "
                            f"{samples[1][-1][1] / 2**20:.1f} MiB, {samples[1][-1][2]:,} events")
        finally:
            for server in both:
                server.stop()

    print(f"\n{'server':<16} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'5xx':>5} {'no answer':>9}")
    for i, label in enumerate(labels):
        s = summary(records[i], rounds * args.window)
        print(f"{label:<16} {s['rps']:>8.0f} {s['p50']:>8.2f} {s['p99']:>8.2f} {s['5xx']:>5} {s['failures']:>9}")
    ratios = [p["p99"] / k["p99"] for k, p in zip(*per_round)]
    overall = summary(records[1], 1)["p99"] / summary(records[0], 1)["p99"]
    spread = ""
    if len(ratios) >= 2:
        q = statistics.quantiles(ratios, n=4)
        spread = f", quartiles {q[0]:.3f}-{q[2]:.3f}"
    print(f"p99 pruned / kept: median of {len(ratios)} paired rounds {statistics.median(ratios):.3f}{spread}; "
          f"over all requests {overall:.3f}")
    for i, label in enumerate(labels):
        print(f"\n{label}: database size (file + WAL) and events kept, after each of its windows")
        for at, size, kept in samples[i]:
            print(f"  {at:7.0f} s {size / 2**20:9.1f} MiB {kept:>10,} events")
        tail = [s for s in samples[i] if s[0] >= min(360, rounds * args.window)]
        if len(tail) >= 2:
            print(f"  growth from {tail[0][0]:.0f} s to the end: {(tail[-1][1] - tail[0][1]) / 2**20:+.1f} MiB")


if __name__ == "__main__":
    main()
