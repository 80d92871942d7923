"""Auditor reads of the lease history on a big SQLite file: every filter of the events API (each alone,
a page as the API serves it, serialized, newest first, and the cursor's next page) and the admin's
history (the LeaseEvent change list: a search as an operator types it, its list filters and its date
drill-down), each through the real request path: Django's test client, a superuser logged in. Prints
each read's median and slowest of ROUNDS (three for a read of seconds), its median in SQL, the load
average beside it, and the query plan of the slowest statement of every read over ``--slow`` ms.

    .venv/bin/python bench/tenure_reads.py --events 10000000 --database FILE   # generates FILE once
    .venv/bin/python bench/event_reads.py --database FILE [--rounds 10] [--only api|admin] [--slow 500]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

from tenure_reads import START, STEP  # the generated history's shape

SLOW_ROUNDS_MS = 2000  # a read whose first three rounds' median is slower is timed three times only


def api_reads(tenures: int, blobs: int) -> dict[str, dict[str, str]]:
    """Each events API filter alone, with a value that matches as auditors ask (a resource, a lease,
    a request) and, for the filters of a column most events share, a value that matches none."""
    span = (tenures // blobs) * STEP
    at = (START + timedelta(seconds=span // 2)).isoformat()
    hour = (START + timedelta(seconds=span // 2 + 3600)).isoformat()
    old = (START + timedelta(seconds=3600)).isoformat()
    middle = tenures // 2
    return {
        "no filter": {},
        "oldest first (ordering=id)": {"ordering": "id"},
        "resource (a blob)": {"resource": "devstoreaccount1/jobs/workers/queue-00042/lock"},
        "resource (a container itself)": {"resource": "devstoreaccount1/jobs"},
        "account": {"account": "devstoreaccount1"},
        "account (none)": {"account": "otheraccount"},
        "container": {"container": "jobs"},
        "container (none)": {"container": "other"},
        "blob": {"blob": "workers/queue-00042/lock"},
        "resource_type=blob": {"resource_type": "blob"},
        "resource_type=container (none)": {"resource_type": "container"},
        "lease_fingerprint": {"lease_fingerprint": f"{middle:012x}"},
        "lease_fingerprint (after a change)": {"lease_fingerprint": f"{(middle // 1000) * 1000 + 7 + 2 ** 48:012x}"},
        "lease_id": {"lease_id": "8b0a7c2e-1f3d-4e5a-9b6c-7d8e9f0a1b2c"},
        "action=acquire": {"action": "acquire"},
        "action=break": {"action": "break"},
        "action=change": {"action": "change"},
        "action=break,change": {"action": "break,change"},
        "action (none)": {"action": "ended-by-delete"},
        "outcome=success": {"outcome": "success"},
        "outcome=refused": {"outcome": "refused"},
        "actor": {"actor": "account:app07"},
        "actor (none)": {"actor": "user:alice"},
        "via=azure": {"via": "azure"},
        "via=admin (none)": {"via": "admin"},
        "via=cli (none)": {"via": "cli"},
        "actor + action=break": {"actor": "account:app07", "action": "break"},
        "error_code (none)": {"error_code": "LeaseIdMismatchWithLeaseOperation"},
        "request_id (none)": {"request_id": "0123456789abcdef0123456789abcdef"},
        "client_request_id": {"client_request_id": f"req-{middle}"},
        "occurred_at_after (half)": {"occurred_at_after": at},
        "occurred_at_before (half)": {"occurred_at_before": at},
        "occurred_at (an hour)": {"occurred_at_after": at, "occurred_at_before": hour},
        "occurred_at_before (first hour)": {"occurred_at_before": old},
        "occurred_at_before (half), by time": {"occurred_at_before": at, "ordering": "-occurred_at"},
        "occurred_at (an hour), by time": {"occurred_at_after": at, "occurred_at_before": hour,
                                           "ordering": "-occurred_at"},
        "occurred_at (an hour), by time, oldest first": {"occurred_at_after": at, "occurred_at_before": hour,
                                                         "ordering": "occurred_at"},
        "occurred_at_before (first hour), by time": {"occurred_at_before": old, "ordering": "-occurred_at"},
        "action=break (an hour), by time": {"action": "break", "occurred_at_after": at, "occurred_at_before": hour,
                                            "ordering": "-occurred_at"},
    }


def admin_reads(tenures: int, blobs: int) -> dict[str, dict[str, str]]:
    """The history change list: a search typed a character at a time (the last one names a blob),
    the exact terms an operator pastes, the sidebar's filters and the date drill-down."""
    middle = tenures // 2
    reads: dict[str, dict[str, str]] = {"no filter": {}}
    for typed in ("q", "que", "queue-0", "queue-0004", "queue-00042", "workers/queue-00042/lock"):
        reads[f"q={typed}"] = {"q": typed}
    reads |= {
        "q=app07 (an actor's part)": {"q": "app07"},
        "q=account:app07 (an actor)": {"q": "account:app07"},
        "q=two words": {"q": "queue-00042 app07"},
        "q=nothing matches": {"q": "zzzz"},
        "q=a fingerprint": {"q": f"{middle:012x}"},
        "q=a lease id": {"q": "8b0a7c2e-1f3d-4e5a-9b6c-7d8e9f0a1b2c"},
        "q=a client request id": {"q": f"req-{middle}"},
        "q=a resource path": {"q": "devstoreaccount1/jobs/workers/queue-00042/lock"},
        "q=jobs (a container)": {"q": "jobs"},
        "action=acquire": {"action": "acquire"},
        "action=break": {"action": "break"},
        "action=change": {"action": "change"},
        "outcome=success": {"outcome": "success"},
        "outcome=refused": {"outcome": "refused"},
        "actor": {"actor": "account:app07"},
        "account": {"account": "devstoreaccount1"},
        "account+container": {"account": "devstoreaccount1", "container": "jobs"},
        "blob (the 'only this' link)": {"account": "devstoreaccount1", "container": "jobs",
                                        "blob": "workers/queue-00042/lock"},
        "year": {"occurred_at__year": str(START.year)},
        "month": {"occurred_at__year": str(START.year), "occurred_at__month": str(START.month)},
        "day": {"occurred_at__year": str(START.year), "occurred_at__month": str(START.month),
                "occurred_at__day": "10"},
        "day + q=queue-00042": {"occurred_at__year": str(START.year), "occurred_at__month": str(START.month),
                                "occurred_at__day": "10", "q": "queue-00042"},
        "day + action=break": {"occurred_at__year": str(START.year), "occurred_at__month": str(START.month),
                               "occurred_at__day": "10", "action": "break"},
        "action=break + actor": {"action": "break", "actor": "account:app07"},
        "action=change + actor": {"action": "change", "actor": "account:app07"},
        "action=break + actor (none)": {"action": "break", "actor": "user:alice"},
        "actor + account (none)": {"actor": "account:app07", "account": "otheraccount"},
        "action=break + account (none)": {"action": "break", "account": "otheraccount"},
        "actor + page 2": {"actor": "account:app07", "p": "2"},
        "page 2": {"p": "2"},
    }
    return reads


def timed_get(client, url: str, rounds: int, *, slow_ms: float, follow_next: bool = False):
    """Median and slowest ms of ``rounds`` GETs (after one warm-up), the median ms in SQL, the load
    average when done, the next page's URL (an API page's ``next``), the slowest SQL statement of the
    slowest request, and the rounds timed."""
    from django.db import connection

    took, in_sql, worst_sql = [], [], ("", (), 0.0)
    next_url = None
    for run in range(rounds + 1):
        statements: list[tuple[str, tuple, float]] = []

        def wrapper(execute, sql, params, many, context, statements=statements):
            began = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                statements.append((sql, params, (time.perf_counter() - began) * 1000))

        with connection.execute_wrapper(wrapper):
            began = time.perf_counter()
            response = client.get(url)
            body = response.content
            elapsed = (time.perf_counter() - began) * 1000
        if response.status_code != 200:  # the admin's 503 for a list stopped at its read bound
            print(f"    {url}: HTTP {response.status_code} after {elapsed:.0f} ms, {len(body):,} bytes", flush=True)
            return elapsed, elapsed, 0.0, os.getloadavg()[0], None, ("", (), 0.0), 0
        if follow_next and next_url is None:
            next_url = response.json().get("next")
        if run:
            took.append(elapsed)
            in_sql.append(sum(s[2] for s in statements))
            if run == 3 and statistics.median(took) > SLOW_ROUNDS_MS:
                break  # a read of seconds: three rounds say so (the line shows how many)
            slowest = max(statements, key=lambda s: s[2])
            if elapsed >= max(took) and slowest[2] >= slow_ms / 2:
                worst_sql = slowest
    return (statistics.median(took), max(took), statistics.median(in_sql), os.getloadavg()[0], next_url, worst_sql,
            len(took))


def plan(sql: str, params) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return "\n".join("      " + row[-1] for row in cursor.fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", required=True, type=Path, help="a file bench/tenure_reads.py generated")
    parser.add_argument("--events", type=int, default=10_000_000, help="as the file was generated with")
    parser.add_argument("--blobs", type=int, default=10_000, help="as the file was generated with")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--only", choices=("api", "admin"))
    parser.add_argument("--match", default="", help="only the reads whose name contains this")
    parser.add_argument("--slow", type=float, default=500, help="print the plan of reads slower than this (ms)")
    args = parser.parse_args()
    if not args.database.exists():
        raise SystemExit(f"{args.database}: no such file (bench/tenure_reads.py --database makes it)")
    workdir = tempfile.TemporaryDirectory(prefix="leasehold-event-reads-")
    os.environ.update(LEASEHOLD_DATABASE=str(args.database), LEASEHOLD_VAR_DIR=workdir.name)
    os.environ.setdefault("LEASEHOLD_ALLOWED_HOSTS", "testserver")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client

    from leases.domain import clock

    call_command("migrate", verbosity=0)
    tenures = args.events // 3
    clock.freeze(START + timedelta(seconds=(tenures // args.blobs) * STEP))
    user, _ = get_user_model().objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)

    groups = []
    if args.only in (None, "api"):
        groups.append(("events API (/api/v1/events/, a page of 100 serialized)", "/api/v1/events/",
                       api_reads(tenures, args.blobs), True))
    if args.only in (None, "admin"):
        groups.append(("admin history (/admin/leases/leaseevent/, rendered)", "/admin/leases/leaseevent/",
                       admin_reads(tenures, args.blobs), False))
    print(f"{args.database} ({args.database.stat().st_size / 1e9:.1f} GB), medians of {args.rounds} "
          f"(slowest), load average at each")
    for title, base, reads, paged in groups:
        print(f"\n{title}")
        for name, query in reads.items():
            if args.match not in name:
                continue
            url = base + ("?" + urlencode(query) if query else "")
            median, worst, sql_ms, load, next_url, sql, rounds = timed_get(client, url, args.rounds, slow_ms=args.slow,
                                                           follow_next=paged)
            line = f"  {name:38s} {median:8.1f} ms ({worst:7.1f}) SQL {sql_ms:7.1f}  load {load:4.1f}" + (
                f" [{rounds} rounds]" if rounds < args.rounds else "")
            if next_url:
                n_median, n_worst, _, _, _, n_sql, _ = timed_get(client, next_url, args.rounds, slow_ms=args.slow)
                line += f"   next page {n_median:8.1f} ms ({n_worst:7.1f})"
                if n_worst > worst:
                    worst, sql = n_worst, n_sql
            print(line, flush=True)
            if worst > args.slow and sql[0]:
                print(f"    slowest statement {sql[2]:.0f} ms: {sql[0][:300]}\n{plan(sql[0], sql[1])}", flush=True)
    workdir.cleanup()


if __name__ == "__main__":
    main()
