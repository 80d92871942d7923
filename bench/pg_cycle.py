#!/usr/bin/env python3
"""Leasehold on SQLite against Leasehold on PostgreSQL, one and two instances.

    .venv/bin/python bench/pg_cycle.py [--rounds 3] [--duration 8] [--clients 16]

cycle-16 (each client cycles acquire -> renew -> release on its own blob),
on this machine, durable everywhere: SQLite with synchronous=FULL, and a
throwaway PostgreSQL cluster (tests/pg_cluster.py) with fsync, full-page
writes and synchronous commit on, as in production. Configurations, run in
alternating order over several rounds:

* ``sqlite``: one instance (two workers, as `make run`);
* ``pg-1``: one instance on PostgreSQL (its defaults: 4 lease threads per worker);
* ``pg-1-t1``: the same with LEASEHOLD_THREADS=1 (what the 4 threads earn);
* ``pg-1-plain``: the same with LEASEHOLD_PG_PREPARE=off (what prepared statements earn);
* ``pg-1-alone``: the same with LEASEHOLD_LEASE_BATCH=0, a transaction a request (what the batch earns);
* ``pg-1-bare``: pg-1 on a database without the history's secondary indexes and the blob's lease
  indexes (an experiment: what index maintenance costs a lease request; the admin needs them);
* ``pg-2``: two instances on one PostgreSQL database, the clients split between them.

With ``--compare-tree DIR`` (a checkout of other code with its own .venv), ``sqlite`` and ``pg-1``
also run from DIR, as ``sqlite-other`` and ``pg-1-other`` (on a database of their own), in the same
alternating rounds: whether PostgreSQL's ratio to SQLite moved with the code or with the machine.

Printed per configuration: requests/s (median of the rounds, and the
median of each round's ratio to SQLite), p50/p99 per action, and per
lease request: Leasehold CPU, PostgreSQL CPU, statements (round trips;
pg_stat_statements), commits, WAL bytes and records, WAL fsyncs. Then the
projection to 35,000 lease requests/s from the measured costs.
bench/README.md ('What does PostgreSQL cost against SQLite?') has the figures;
docs/decisions/0020 how to read them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import loadgen  # noqa: E402
import servers  # noqa: E402
from loadgen import ACQUIRE, ACTION_NAMES, RELEASE, RENEW  # noqa: E402
from run import ACCOUNT, CONTAINER, KEY, cycle_blob, pct, setup_server  # noqa: E402

from tests import pg_cluster  # noqa: E402

TARGET = 35_000  # lease requests/s: etcd's published figure on 3 x 16 vCPU
PG_SETTINGS = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all",
               "max_wal_size": "4GB", "checkpoint_timeout": "30min"}


class Config:
    def __init__(self, name: str, instances: list[servers.Leasehold], database: str | None):
        self.name, self.instances, self.database = name, instances, database

    def pids(self) -> list[int]:
        return [pid for server in self.instances for pid in server.pids()]


def drop_lease_indexes(url: str, tables: set[str]) -> None:
    """pg-1-bare: drop the history's indexes but its primary key (``history``
    in ``tables``), and the indexes on the blob's lease columns (``blob``: a
    lease write then updates its row in place)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        names = [name for name, in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE (%s AND tablename = 'leases_leaseevent' "
            "AND indexname NOT LIKE '%%pkey') OR (%s AND indexname IN "
            "('blob_lease_idx', 'blob_expiry_idx', 'blob_break_idx', 'blob_lease_id_idx'))",
            ["history" in tables, "blob" in tables])]
        for name in names:
            conn.execute(f'DROP INDEX "{name}"')
    print(f"pg-1-bare: dropped {len(names)} indexes", file=sys.stderr, flush=True)


def pg_counters(admin_url: str, database: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        [(commits,)] = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                                    [database]).fetchall()
        [(lsn,)] = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchall()
        [(records, syncs)] = conn.execute("SELECT wal_records, wal_sync FROM pg_stat_wal").fetchall()
        [(calls,)] = conn.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d "
                                  "ON d.oid = s.dbid WHERE d.datname = %s", [database]).fetchall()
        texts = {query: int(n) for query, n in conn.execute(
            "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 110), sum(calls) "
            "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = %s GROUP BY 1", [database])}
    return {"commits": int(commits), "wal_bytes": int(lsn), "wal_records": int(records), "fsyncs": int(syncs),
            "statements": int(calls), "texts": texts}


def other_instances_releasing(url: str, per_second: int, stop: threading.Event) -> None:
    """What other instances' releases cost this one: ``per_second`` NOTIFYs
    on the wake-up channel (leases/services/wakeups.py), as a fleet's releases and
    breaks send them, from a session of its own, in batches every 10 ms
    (each with its own payload: PostgreSQL folds equal ones in a transaction)."""
    import psycopg

    batch = max(1, per_second // 100)
    with psycopg.connect(url, autocommit=True) as conn:
        next_at = time.perf_counter()
        while not stop.is_set():
            conn.execute("SELECT pg_notify('leasehold_wake', md5(random()::text || g::text)) "
                         "FROM generate_series(1, %s) AS g", [batch])
            next_at += 0.01
            time.sleep(max(0.0, next_at - time.perf_counter()))


def run_round(config: Config, clients: int, warmup: float, duration: float, pg: pg_cluster.Cluster,
              admin_url: str, fleet_releases: int = 0) -> dict[str, Any]:
    signer = loadgen.Signer(ACCOUNT, KEY)
    recs = [loadgen.Recorder() for _ in range(clients)]
    start = time.perf_counter()
    stop_at = start + warmup + duration
    threads = []
    for i in range(clients):
        server = config.instances[i % len(config.instances)]
        reqs = [loadgen.LeaseRequests(signer, server.host, f"/{ACCOUNT}/{CONTAINER}/{cycle_blob(i)}")]
        threads.append(threading.Thread(target=loadgen.cycle_worker,
                                        args=("127.0.0.1", server.port, reqs, stop_at, recs[i]), daemon=True))
    stop_notifying = threading.Event()
    if fleet_releases and config.database:
        threads.append(threading.Thread(target=other_instances_releasing, daemon=True,
                                        args=(pg.url(config.database), fleet_releases, stop_notifying)))
    for thread in threads:
        thread.start()
    time.sleep(max(0.0, start + warmup - time.perf_counter()))
    pids, pg_pids = config.pids(), pg.processes()
    before = pg_counters(admin_url, config.database) if config.database else None
    c0, p0, m0 = servers.cpu_seconds(pids), servers.cpu_seconds(pg_pids), time.perf_counter()
    time.sleep(max(0.0, stop_at - time.perf_counter()))
    c1, p1, m1 = servers.cpu_seconds(pids), servers.cpu_seconds(pg.processes()), time.perf_counter()
    after = pg_counters(admin_url, config.database) if config.database else None
    stop_notifying.set()
    for thread in threads:
        thread.join(timeout=loadgen.SOCKET_TIMEOUT * 4 + 5)
    lats: dict[int, list[float]] = {a: [] for a in (ACQUIRE, RENEW, RELEASE)}
    count = errors = 0
    for rec in recs:
        errors += len(rec.failures)
        for t_end, action, status, lat in rec.records:
            if status >= 300:
                errors += 1
            if m0 <= t_end <= m1:
                count += 1
                lats.setdefault(action, []).append(lat)
    window = m1 - m0
    out = {"rps": count / window, "errors": errors, "lh_cpu_ms": (c1 - c0) * 1000 / max(count, 1),
           "pg_cpu_ms": (p1 - p0) * 1000 / max(count, 1) if config.database else 0.0,
           "lat": {a: (pct(sorted(v), 0.5) * 1000, pct(sorted(v), 0.99) * 1000) for a, v in lats.items() if v}}
    if before is not None and after is not None:
        texts = {q: (n - before["texts"].get(q, 0)) / max(count, 1) for q, n in after.pop("texts").items()}
        before.pop("texts")
        out.update({k: (after[k] - before[k]) / max(count, 1) for k in before})
        out["texts"] = {q: n for q, n in texts.items() if n >= 0.01}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--fleet-releases", type=int, default=0, metavar="N",
                        help="N NOTIFYs/s on the wake-up channel during PostgreSQL rounds: other instances' "
                        "releases (what a worker that listens pays for them)")
    parser.add_argument("--statements", action="store_true", help="print each statement's calls per request")
    parser.add_argument("--only", default="sqlite,pg-1,pg-1-plain,pg-2", help="configurations, comma-separated "
                        "(also pg-1-t1, pg-1-alone, pg-1-bare)")
    parser.add_argument("--bare", default="blob,history", help="pg-1-bare drops the indexes of these: blob "
                        "(its lease columns), history (all but the primary key)")
    parser.add_argument("--compare-tree", metavar="DIR", help="also run sqlite and pg-1 from this checkout")
    args = parser.parse_args()
    wanted = args.only.split(",")

    with pg_cluster.cluster(production=PG_SETTINGS) as pg, tempfile.TemporaryDirectory(prefix="pgcycle-") as tmp:
        admin_url = pg.url("postgres")
        import psycopg

        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        configs = []

        def leasehold(name: str, database: str | None, tree: str | None = None, **env) -> servers.Leasehold:
            work = Path(tmp) / name
            work.mkdir()
            extra = {"LEASEHOLD_DATABASE": database, **env} if database else dict(env)
            server = servers.Leasehold(pg_cluster._free_port(), work, extra_env=extra, tree=tree)
            server.name = f"Leasehold-{name}"
            return server

        if "sqlite" in wanted:
            configs.append(Config("sqlite", [leasehold("sqlite", None)], None))
        if {"pg-1", "pg-1-t1", "pg-1-plain", "pg-1-alone"} & set(wanted):
            url = pg.create_database("one")
            if "pg-1" in wanted:
                configs.append(Config("pg-1", [leasehold("pg-1", url)], "one"))
            if "pg-1-plain" in wanted:
                configs.append(Config("pg-1-plain", [leasehold("pg-1-plain", url, LEASEHOLD_PG_PREPARE="off")], "one"))
            if "pg-1-alone" in wanted:
                configs.append(Config("pg-1-alone", [leasehold("pg-1-alone", url, LEASEHOLD_LEASE_BATCH="0")], "one"))
            if "pg-1-t1" in wanted:
                configs.append(Config("pg-1-t1", [leasehold("pg-1-t1", url, LEASEHOLD_THREADS="1")], "one"))
        if "pg-1-bare" in wanted:
            configs.append(Config("pg-1-bare", [leasehold("pg-1-bare", pg.create_database("bare"))], "bare"))
        if args.compare_tree:
            configs.append(Config("sqlite-other", [leasehold("sqlite-other", None, tree=args.compare_tree)], None))
            configs.append(Config("pg-1-other", [leasehold("pg-1-other", pg.create_database("other"),
                                                            tree=args.compare_tree)], "other"))
        if "pg-2" in wanted:
            url = pg.create_database("two")
            configs.append(Config("pg-2", [leasehold("pg-2a", url), leasehold("pg-2b", url)], "two"))
        blobs = [cycle_blob(i) for i in range(args.clients)]
        prepared = set()
        for config in configs:
            for server in config.instances:
                key = server.env.get("LEASEHOLD_DATABASE")
                if key not in prepared:
                    server.prepare()
                    prepared.add(key)
            if config.name == "pg-1-bare" and config.database is not None:  # it has one
                drop_lease_indexes(pg.url(config.database), set(args.bare.split(",")))
        results: dict[str, list[dict]] = {c.name: [] for c in configs}
        for round_no in range(args.rounds):
            order = configs[round_no % len(configs):] + configs[:round_no % len(configs)]
            for config in order:
                for server in config.instances:
                    server.start()
                try:
                    setup_server(config.instances[0], blobs)
                    result = run_round(config, args.clients, args.warmup, args.duration, pg, admin_url,
                                       args.fleet_releases)
                finally:
                    for server in config.instances:
                        server.stop()
                results[config.name].append(result)
                print(f"round {round_no + 1} {config.name}: {result['rps']:.0f} req/s, {result['errors']} errors",
                      file=sys.stderr, flush=True)
        report(results, args)
    return 0


def report(results: dict[str, list[dict]], args) -> None:
    print(f"\ncycle-{args.clients}, {args.rounds} rounds of {args.duration:.0f} s, configurations alternating")
    base = results.get("sqlite")
    print(f"{'config':<9} {'req/s':>7} {'x sqlite':>8}  " + "  ".join(
        f"{ACTION_NAMES[a] + ' p50/p99 ms':>20}" for a in (ACQUIRE, RENEW, RELEASE)) + f"  {'errors':>6}")
    for name, rounds in results.items():
        own = results.get("sqlite-other") if name.endswith("-other") else base  # each tree against its own SQLite
        rps = statistics.median(r["rps"] for r in rounds)
        ratio = statistics.median(r["rps"] / b["rps"] for r, b in zip(rounds, own)) if own else float("nan")
        lat = "  ".join(f"{statistics.median(r['lat'][a][0] for r in rounds):>9.1f}/"
                        f"{statistics.median(r['lat'][a][1] for r in rounds):<10.1f}" for a in (ACQUIRE, RENEW, RELEASE))
        print(f"{name:<9} {rps:>7.0f} {ratio:>8.2f}  {lat}  {sum(r['errors'] for r in rounds):>6}")
    print("\nper lease request (medians of the rounds)")
    keys = ["lh_cpu_ms", "pg_cpu_ms", "statements", "commits", "wal_bytes", "wal_records", "fsyncs"]
    print(f"{'config':<9} " + " ".join(f"{k:>11}" for k in keys))
    for name, rounds in results.items():
        print(f"{name:<9} " + " ".join(
            f"{statistics.median(r.get(k, 0.0) for r in rounds):>11.3f}" for k in keys))
    if args.statements:
        for name, rounds in results.items():
            if "texts" in rounds[-1]:
                print(f"\n{name}: statements per lease request (last round)")
                for text, n in sorted(rounds[-1]["texts"].items(), key=lambda kv: -kv[1]):
                    print(f"  {n:6.3f}  {text}")
    one = results.get("pg-1")
    if one:
        lh = statistics.median(r["lh_cpu_ms"] for r in one)
        db = statistics.median(r["pg_cpu_ms"] for r in one)
        fsyncs = statistics.median(r["fsyncs"] for r in one)
        print(f"\nprojection to {TARGET:,} lease requests/s from pg-1's costs "
              f"({lh:.2f} ms Leasehold CPU, {db:.2f} ms PostgreSQL CPU, {fsyncs:.2f} WAL fsyncs per request):")
        lh_cores, db_cores = TARGET * lh / 1000, TARGET * db / 1000
        print(f"  Leasehold: {lh_cores:.0f} cores busy -> {lh_cores / 2 / 0.7:.0f} two-core instances at 70% CPU")
        print(f"  PostgreSQL: {db_cores:.0f} cores busy -> a {max(16, int(db_cores / 0.7) + 1)}-core server "
              f"at 70% CPU; {TARGET * fsyncs:,.0f} WAL fsyncs/s at this commit grouping")


if __name__ == "__main__":
    sys.exit(main())
