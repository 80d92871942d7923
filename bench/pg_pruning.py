#!/usr/bin/env python3
"""Pruning on PostgreSQL under full-speed lease traffic: does the pruner
delete events faster than the traffic inserts them?

    .venv/bin/python bench/pg_pruning.py                 # 3 rounds of 15 s per arm
    .venv/bin/python bench/pg_pruning.py --rounds 1 --window 5   # a smoke run

One Leasehold server (serving.server, two workers) on a throwaway PostgreSQL
cluster (tests/pg_cluster.py, but durable: fsync, full-page writes and
synchronous commits on, as in production), 16 clients cycling acquire -> renew ->
release at full speed (bench/loadgen.py): every lease request appends one
event, so requests/s is the insert rate. Beside it, in a process of its own,
the pruner (leases.operations.retention.prune, paced as the server's) works off a
backlog of old events, refilled before every window, with one of three arms:

* ``none``: no pruning (the traffic's own pace);
* ``2ms``: SQLite's pruner on PostgreSQL (batches aimed at
  retention.HOLD_TARGET, at most 100 rows: the SQLite writer lock's budget;
  every batch's scan from the oldest event);
* ``pg``: PostgreSQL's pruner (retention.PG_HOLD_TARGET, MOST_ROWS, each
  batch starting where the previous one stopped).

The arms alternate round by round in one run (the machine is shared). Per
arm: lease requests/s, lease p99, events pruned/s, and the batch sizes the
pruner settled on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

ARMS = ("none", "2ms", "pg")
BACKLOG_COLUMNS = ("occurred_at, action, outcome, resource_type, account, container, blob, lease_fingerprint, "
                   "duration, state_before, state_after, generation, status_code, error_code, actor, via, reason, "
                   "request_id, client_request_id, remote_addr, user_agent")


def prune_for(arm: str, seconds: float) -> None:
    """In the pruner's own process: prune with ``arm``'s pacing for ``seconds``; a JSON line."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from datetime import timedelta

    from leases.operations import retention

    if arm == "2ms":
        retention.PG_HOLD_TARGET = retention.HOLD_TARGET
        retention.MOST_ROWS = {**retention.MOST_ROWS, "postgresql": 100}
    sizes = []
    real = retention._prune_batch

    def batch(policy, now, limit, floors=None):
        sizes.append(limit)
        return real(policy, now, limit, None if arm == "2ms" else floors)

    retention._prune_batch = batch
    stop = threading.Event()
    policy = retention.Policy(renewals=timedelta(days=1), events=timedelta(days=1))
    print("ready", flush=True)
    sys.stdin.readline()  # the load has started
    threading.Timer(seconds, stop.set).start()
    started = time.perf_counter()
    deleted = retention.prune(policy, stop=stop)
    elapsed = time.perf_counter() - started
    print(json.dumps({"deleted": deleted, "seconds": elapsed, "sizes": sizes[len(sizes) // 2:]}), flush=True)


def refill(url: str, rows: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO leases_leaseevent ({BACKLOG_COLUMNS}) SELECT now() - interval '3 days' - g * interval "
            "'1 ms', CASE WHEN g %% 3 = 0 THEN 'acquire' ELSE 'renew' END, 'success', 'blob', 'devstoreaccount1', "
            "'old', 'b-' || (g %% 64), left(md5(random()::text), 12), 15, 'available', 'leased', g, 200, '', "
            "'account:devstoreaccount1', 'azure', '', md5(g::text), '', '127.0.0.1', 'bench' "
            "FROM generate_series(1, %s) g", [rows])
        conn.execute("ANALYZE leases_leaseevent")


def backlog(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        [(count,)] = conn.execute("SELECT count(*) FROM leases_leaseevent WHERE container = 'old'").fetchall()
        return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=15.0, help="seconds of load per arm and round")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--backlog", type=int, default=150_000, help="old events kept ahead of the pruner")
    parser.add_argument("--port", type=int, default=10650)
    parser.add_argument("--prune-for", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--arm", choices=ARMS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.prune_for is not None:
        prune_for(args.arm, args.prune_for)
        return

    import servers
    from run import cycle_blob, setup_server
    from tests import pg_cluster

    blobs = [cycle_blob(i) for i in range(args.clients)]
    results: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    with pg_cluster.cluster(production={}) as pg, tempfile.TemporaryDirectory(prefix="leasehold-pgprune-") as tmp:
        url = pg.url()
        server = servers.Leasehold(args.port, Path(tmp), extra_env={"LEASEHOLD_DATABASE": url})
        server.prepare()
        server.start()
        try:
            setup_server(server, blobs)
            for r in range(args.rounds):
                order = ARMS if r % 2 == 0 else ARMS[::-1]
                for arm in order:
                    short = args.backlog - backlog(url)
                    if short > 0:
                        refill(url, short)
                    results[arm].append(one_window(server, url, arm, args, blobs))
                    got = results[arm][-1]
                    servers.log(f"round {r + 1}/{args.rounds} {arm:>4}: {got['rps']:.0f} req/s, p99 "
                                f"{got['p99']:.1f} ms, pruned {got['pruned']:.0f}/s, batch ~{got['batch']}")
        finally:
            server.stop()
    print(f"\n{'arm':<6} {'req/s':>8} {'p99 ms':>8} {'pruned/s':>9} {'batch':>6}  (medians of {args.rounds} rounds)")
    for arm in ARMS:
        rows = results[arm]
        med = {k: statistics.median(row[k] for row in rows) for k in ("rps", "p99", "pruned", "batch")}
        print(f"{arm:<6} {med['rps']:>8.0f} {med['p99']:>8.1f} {med['pruned']:>9.0f} {med['batch']:>6.0f}")
    for arm in ("2ms", "pg"):
        ratios = [p["pruned"] / p["rps"] for p in results[arm]]
        print(f"{arm}: pruned/s over inserted/s, per round: {', '.join(f'{x:.2f}' for x in ratios)}")
    p99 = [p["p99"] / n["p99"] for p, n in zip(results["pg"], results["none"])]
    print(f"pg: lease p99 with pruning / without, per round: {', '.join(f'{x:.2f}' for x in p99)}")


def one_window(server, url, arm, args, blobs) -> dict:
    """The clients on the server for one window, the arm's pruner beside them."""
    from retention import one_window as load_window, summary  # bench/retention.py: the same load

    pruner = None
    if arm != "none":
        env = {**server.env, "LEASEHOLD_DATABASE": url}
        pruner = subprocess.Popen([sys.executable, __file__, "--prune-for", str(args.window), "--arm", arm],
                                  cwd=BENCH.parent, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert pruner.stdin is not None and pruner.stdout is not None  # spawned with pipes
        assert pruner.stdout.readline().strip() == "ready"
        pruner.stdin.write("go\n")
        pruner.stdin.flush()
    recs = load_window(server, args, blobs)
    pruned, batch = 0.0, 0
    if pruner:
        out = json.loads(pruner.communicate(timeout=60)[0])  # its one last line, then it exits
        pruned = out["deleted"] / out["seconds"]
        batch = statistics.median(out["sizes"]) if out["sizes"] else 0
    return {**summary(recs, args.window), "pruned": pruned, "batch": batch}


if __name__ == "__main__":
    main()
