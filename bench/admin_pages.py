"""Time the operators' admin pages on a big estate.

Builds a SQLite database in a temporary directory (100,000 blobs and
1,000,000 lease events by default), logs a superuser in with Django's test
client, and prints each page's query count and median time, in all and in
SQL: first as the load leaves the database, then after ANALYZE has given
SQLite's query planner its statistics (without them it sorts some filtered
lists instead of walking an index in order).

    .venv/bin/python bench/admin_pages.py [--blobs N] [--events N] [--runs N] [--db PATH]

``--db PATH`` keeps the database there and reuses it on the next run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blobs", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5, help="timed requests per page (the median is shown)")
    parser.add_argument("--db", type=Path, help="database file to build or reuse (default: a temporary one)")
    args = parser.parse_args()

    workdir = tempfile.TemporaryDirectory(prefix="leasehold-bench-")
    os.environ["LEASEHOLD_DATABASE"] = str(args.db or Path(workdir.name) / "bench.sqlite3")
    os.environ.setdefault("LEASEHOLD_ALLOWED_HOSTS", "testserver")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from leases.domain import clock
    from leases.models import LeaseEvent
    from tests.admin.helpers import load_scale_data, scale_pages

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS sqlite_stat1")  # a reused database starts without statistics too
    connection.close()  # so that no connection keeps statistics it loaded
    if not LeaseEvent.objects.exists():
        started = time.perf_counter()
        load_scale_data(blobs=args.blobs, events=args.events, now=clock.now())
        print(f"loaded {args.blobs:,} blobs and {args.events:,} events in {time.perf_counter() - started:.1f} s")
    # Judge the leases at the instant the estate was loaded for (its last
    # event), however long ago that was: every state keeps its share.
    clock.freeze(LeaseEvent.objects.order_by("-occurred_at").values_list("occurred_at", flat=True).first())
    user, _ = get_user_model().objects.get_or_create(
        username="bench", defaults={"is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)

    pages = scale_pages()
    fresh = {label: _time(client, url, args.runs) for label, url in pages}
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    analyzed = {label: _time(client, url, args.runs) for label, url in pages}

    print(f"\n{'':<32} {'':>7} {'fresh database':>20} {'after ANALYZE':>20}")
    print(f"{'page':<32} {'queries':>7} {'total ms':>10} {'SQL ms':>9} {'total ms':>10} {'SQL ms':>9}")
    for label, _ in pages:
        (total, sql, queries), (total_a, sql_a, _) = fresh[label], analyzed[label]
        print(f"{label:<32} {queries:>7} {total:>10.1f} {sql:>9.1f} {total_a:>10.1f} {sql_a:>9.1f}")
    workdir.cleanup()


def _time(client, url: str, runs: int) -> tuple[float, float, int]:
    """Median milliseconds of ``runs`` requests after one warm-up, the
    median of those spent in SQL, and the number of queries one request runs."""
    from django.db import connection

    totals, sql_times = [], []
    for run in range(runs + 1):
        in_sql: list[float] = []

        def timed(execute, sql, params, many, context, in_sql=in_sql):
            started = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                in_sql.append(time.perf_counter() - started)

        with connection.execute_wrapper(timed):
            started = time.perf_counter()
            response = client.get(url)
            body = b"".join(response.streaming_content) if response.streaming else response.content
            elapsed = time.perf_counter() - started
        if response.status_code != 200:
            raise SystemExit(f"{url}: HTTP {response.status_code}\n{body[:500]!r}")
        if run:
            totals.append(elapsed * 1000)
            sql_times.append(sum(in_sql) * 1000)
    return statistics.median(totals), statistics.median(sql_times), len(in_sql)


if __name__ == "__main__":
    main()
