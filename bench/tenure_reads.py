"""Auditor reads of tenures on a big SQLite history: "who held R at T" (selectors.holder_at, as the
API, the admin and leasehold_lease show ask it) and the tenure list's queries (leases.api.tenures'
filters, a page of 100 newest first, serialized), on EVENTS lease events and their tenures (a third
as many: acquire, renew, release each) over BLOBS blobs, generated straight in SQL as the lease
writes leave them. Prints each read's median and slowest of ROUNDS.

    .venv/bin/python bench/tenure_reads.py [--events 10000000] [--blobs 10000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

START = datetime(2026, 1, 1, tzinfo=UTC)
STEP = 60  # seconds between a blob's tenures; each held 30 s, renewed at 15 s


def generate(cursor, *, tenures: int, blobs: int) -> None:
    """``tenures`` tenures over ``blobs`` blobs, a round of one per blob every STEP seconds, and their
    three events each (acquire, renew, then the release, break or a second renewal of one left to
    expire), as the lease writes leave them: one in 50 broken, one in 10 expired (settled by the next
    acquire), one in 1,000 changed its lease, the newest round held (infinite). The secondary indexes
    are dropped and made again after the inserts (far faster than keeping them on the way)."""
    cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
                   "AND tbl_name IN ('leases_leaseevent', 'leases_tenure')")
    indexes = cursor.fetchall()
    for name, _ in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    begin = f"strftime('%Y-%m-%d %H:%M:%S', '{START:%Y-%m-%d %H:%M:%S}', '+' || ((i / {blobs}) * {STEP} + {{o}}) || ' seconds')"
    blob = f"printf('workers/queue-%05d/lock', i % {blobs})"
    gen = f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {tenures})"
    held = f"i >= {tenures - blobs}"
    end = f"CASE WHEN {held} THEN '' WHEN i % 50 = 0 THEN 'broken' WHEN i % 10 = 1 THEN 'expired' ELSE 'released' END"
    cursor.execute(f"""{gen} INSERT INTO leases_tenure (resource_type, account, container, blob, generation,
        lease_fingerprint, fingerprints, holder, holder_address, client_request_id, via, began_by, began_at,
        deadline, breaking_since, ended_at, "end", ended_by, settled_by)
        SELECT 'blob', 'devstoreaccount1', 'jobs', {blob}, i / {blobs} + 1, printf('%012x', i),
            printf('%012x', i) || CASE WHEN i % 1000 = 7 THEN printf(' %012x@', i + 281474976710656)
                                        || {begin.format(o=20)} ELSE '' END,
            printf('account:app%02d', i % 37), '10.1.2.3', lower(hex(randomblob(16))), 'azure', 'acquire',
            {begin.format(o=0)}, CASE WHEN {held} THEN NULL ELSE {begin.format(o=45)} END,
            CASE WHEN i % 50 = 0 AND NOT {held} THEN {begin.format(o=30)} END,
            CASE WHEN {held} THEN NULL WHEN i % 10 = 1 THEN {begin.format(o=45)} ELSE {begin.format(o=30)} END,
            {end}, CASE WHEN {held} OR i % 10 = 1 THEN '' ELSE printf('account:app%02d', i % 37) END,
            CASE WHEN {held} THEN '' WHEN i % 50 = 0 THEN 'break' WHEN i % 10 = 1 THEN 'acquire' ELSE 'release' END
        FROM n""")
    third = "CASE WHEN i % 50 = 0 THEN 'break' WHEN i % 10 = 1 THEN 'renew' ELSE 'release' END"
    for action, offset, before, after in (("'acquire'", 0, "'available'", "'leased'"),
                                          ("'renew'", 15, "'leased'", "'leased'"),
                                          (third, 30, "'leased'", "CASE WHEN i % 10 = 1 THEN 'leased' "
                                                                  "ELSE 'available' END")):
        cursor.execute(f"""{gen} INSERT INTO leases_leaseevent (occurred_at, action, outcome, resource_type, account,
            container, blob, lease_fingerprint, duration, expires_at, state_before, state_after, generation,
            status_code, error_code, actor, via, reason, request_id, client_request_id, remote_addr, user_agent)
            SELECT {begin.format(o=offset)}, {action}, 'success', 'blob', 'devstoreaccount1', 'jobs', {blob},
                printf('%012x', i), 30, {begin.format(o=offset + 30)}, {before}, {after}, i / {blobs} + 1, 200,
                '', printf('account:app%02d', i % 37), 'azure', '', lower(hex(randomblob(16))),
                lower(hex(randomblob(16))), '10.1.2.3', 'azsdk-python-storage-blob/12.24.0 Python/3.11.2' FROM n""")
    for _, sql in indexes:
        cursor.execute(sql)


def timed(fn, rounds: int) -> tuple[float, float]:
    took = []
    for _ in range(rounds):
        began = time.perf_counter()
        fn()
        took.append((time.perf_counter() - began) * 1000)
    return statistics.median(took), max(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--blobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--database", help="keep the database at this path (generated once, reused after)")
    args = parser.parse_args()
    workdir = tempfile.TemporaryDirectory(prefix="leasehold-tenure-reads-")
    database = Path(args.database) if args.database else Path(workdir.name) / "reads.sqlite3"
    reuse = database.exists()
    os.environ.update(LEASEHOLD_DATABASE=str(database), LEASEHOLD_VAR_DIR=workdir.name)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from leases.api.tenures import TenureFilter, TenureSerializer
    from leases.models import Tenure
    from leases.services.selectors import holder_at

    call_command("migrate", verbosity=0)
    tenures = args.events // 3
    began = time.monotonic()
    if not reuse:
        with connection.cursor() as cursor:  # a throwaway file: no syncs
            cursor.execute("PRAGMA synchronous = OFF")
            cursor.execute("PRAGMA cache_size = -1000000")
        with transaction.atomic(), connection.cursor() as cursor:
            generate(cursor, tenures=tenures, blobs=args.blobs)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    span = (tenures // args.blobs) * STEP
    print(f"{tenures * 3:,} events, {tenures:,} tenures over {args.blobs:,} blobs generated in "
          f"{time.monotonic() - began:.0f} s")
    rng = random.Random(49)

    def a_holder():
        blob = f"workers/queue-{rng.randrange(args.blobs):05d}/lock"
        when = START + timedelta(seconds=rng.uniform(0, span))
        holder_at(account="devstoreaccount1", container="jobs", blob=blob, when=when)

    def page(query: dict):
        def read():
            qs = TenureFilter(query, queryset=Tenure.objects.all()).qs.order_by("-id")[:101]
            TenureSerializer(list(qs), many=True, context={"now": START + timedelta(seconds=span)}).data
        return read

    mid = (START + timedelta(seconds=span / 2)).isoformat()
    reads = {
        "holder_at (random blob and time)": a_holder,
        "list, no filter": page({}),
        "list, resource": page({"resource": "devstoreaccount1/jobs/workers/queue-00042/lock"}),
        "list, account": page({"account": "devstoreaccount1"}),
        "list, holder": page({"holder": "account:app07"}),
        "list, lease_fingerprint": page({"lease_fingerprint": f"{tenures // 2:012x}"}),
        "list, end=held": page({"end": "held"}),
        "list, held_at": page({"held_at": mid}),
        "list, began_at range": page({"began_at_after": mid}),
        "list, generation": page({"generation": "7"}),
    }
    for name, read in reads.items():
        median, worst = timed(read, args.rounds)
        print(f"{name:40s} median {median:8.1f} ms  slowest {worst:8.1f} ms")


if __name__ == "__main__":
    main()
