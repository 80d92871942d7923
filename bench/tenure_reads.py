"""Auditor reads of tenures on a big SQLite history: "who held R at T" (selectors.holder_at, as the
API, the admin and leasehold_lease show ask it) and the tenure list's queries (leases.api.tenures'
filters, a page of 100 newest first, serialized), on EVENTS lease events and their tenures (a third
as many: acquire, renew, release each) over BLOBS blobs, generated straight in SQL as the lease
writes leave them. Prints each read's median and slowest of ROUNDS.

    .venv/bin/python bench/tenure_reads.py [--events 10000000] [--blobs 10000] [--rounds 20] [--database FILE]

``--database FILE`` keeps the file: generated if missing, reused as it is otherwise
(bench/event_reads.py times the events API and the admin's history on it).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

START = datetime(2026, 1, 1, tzinfo=UTC)
STEP = 60  # seconds between a blob's tenures; each held 30 s, renewed at 15 s


def generate(path: Path, *, tenures: int, blobs: int) -> None:
    """``tenures`` tenures over ``blobs`` blobs, a round of one per blob every STEP seconds, and their
    three events each (acquire, renew, then the release, break or a second renewal of one left to
    expire), as the lease writes leave them: one in 50 broken, one in 10 expired (settled by the next
    acquire), one in 1,000 changed its lease (and its change event), the newest round held (infinite),
    each tenure what its events make of it (so verify's tenure check passes), the events in time order
    (ids as a real history's: the newest last, the actions interleaved). Written on a connection
    of its own, as a throwaway file is: no journal, no syncs, one transaction, the triggers and secondary
    indexes dropped for the inserts and made again after (``migrate`` re-creates the triggers)."""
    import sqlite3

    db = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode = OFF", "synchronous = OFF", "locking_mode = EXCLUSIVE", "temp_store = MEMORY",
                   "cache_size = -1000000"):
        db.execute(f"PRAGMA {pragma}")
    db.execute("BEGIN")
    cursor = db.cursor()
    cursor.execute("SELECT name, sql FROM sqlite_master WHERE type IN ('index', 'trigger') AND sql IS NOT NULL "
                   "AND tbl_name IN ('leases_leaseevent', 'leases_tenure')")
    made = cursor.fetchall()
    for name, sql in made:
        cursor.execute(f'DROP {"TRIGGER" if sql.upper().startswith("CREATE TRIGGER") else "INDEX"} "{name}"')
    begin = f"strftime('%Y-%m-%d %H:%M:%S', '{START:%Y-%m-%d %H:%M:%S}', '+' || ((i / {blobs}) * {STEP} + {{o}}) || ' seconds')"
    blob = f"printf('workers/queue-%05d/lock', i % {blobs})"
    gen = f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {tenures})"
    held = f"i >= {tenures - blobs}"
    end = f"CASE WHEN {held} THEN '' WHEN i % 50 = 0 THEN 'broken' WHEN i % 10 = 1 THEN 'expired' ELSE 'released' END"
    steps = [f"""{gen} INSERT INTO leases_tenure (resource_type, account, container, blob, generation,
        lease_fingerprint, fingerprints, holder, holder_address, client_request_id, via, began_by, began_at,
        deadline, breaking_since, ended_at, "end", ended_by, settled_by, length_class)
        SELECT 'blob', 'devstoreaccount1', 'jobs', {blob}, i / {blobs} + 1, printf('%012x', i),
            printf('%012x', i) || CASE WHEN i % 1000 = 7 THEN printf(' %012x@', i + 281474976710656)
                || {begin.replace("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S+00:00").format(o=20)} ELSE '' END,
            printf('account:app%02d', i % 37), '10.1.2.3', printf('req-%d', i), 'azure', 'acquire',
            {begin.format(o=0)}, CASE WHEN {held} THEN NULL ELSE {begin.format(o=45)} END,
            CASE WHEN i % 50 = 0 AND NOT {held} THEN {begin.format(o=30)} END,
            CASE WHEN {held} THEN NULL WHEN i % 10 = 1 THEN {begin.format(o=45)} ELSE {begin.format(o=30)} END,
            {end}, CASE WHEN {held} OR i % 10 = 1 THEN '' ELSE printf('account:app%02d', i % 37) END,
            CASE WHEN {held} THEN '' WHEN i % 50 = 0 THEN 'break' WHEN i % 10 = 1 THEN 'acquire' ELSE 'release' END,
            CASE WHEN {held} THEN NULL ELSE 3 END  -- held 30 or 45 s: at most 4**3
        FROM n"""]
    # The events in the order the lease writes append them (ids follow time, the actions interleaved,
    # as in a real history): position e of a round's four blocks of ``blobs`` slots (acquire at 0 s,
    # renew at 15, change at 20 for the changed ones only, the end at 30), tenure i = its round and
    # blob. Inserted in that order without ids, so the ids are e's order, dense.
    slot = f"((e / {blobs}) % 4)"
    i_of_e = f"((e / {4 * blobs}) * {blobs} + e % {blobs})"
    offset = f"CASE {slot} WHEN 0 THEN 0 WHEN 1 THEN 15 WHEN 2 THEN 20 ELSE 30 END"
    action = (f"CASE {slot} WHEN 0 THEN 'acquire' WHEN 1 THEN 'renew' WHEN 2 THEN 'change' "
              "WHEN 3 THEN CASE WHEN i % 50 = 0 THEN 'break' WHEN i % 10 = 1 THEN 'renew' ELSE 'release' END END")
    found = f"CASE WHEN i >= {blobs} AND (i - {blobs}) % 10 = 1 THEN 'expired' ELSE 'available' END"
    before = f"CASE {slot} WHEN 0 THEN {found} ELSE 'leased' END"
    after = f"CASE WHEN {slot} = 3 AND i % 10 != 1 THEN 'available' ELSE 'leased' END"
    positions = 4 * blobs * -(-tenures // blobs)  # the last round's four blocks, whole
    steps.append(f"""WITH RECURSIVE n(e) AS (SELECT 0 UNION ALL SELECT e + 1 FROM n WHERE e + 1 < {positions}),
        m(e, i) AS (SELECT e, {i_of_e} FROM n)
        INSERT INTO leases_leaseevent (occurred_at, action, outcome, resource_type, account,
        container, blob, lease_fingerprint, proposed_lease_fingerprint, duration, expires_at, state_before, state_after, generation,
        status_code, error_code, actor, via, reason, request_id, client_request_id, remote_addr, user_agent)
        SELECT {begin.format(o=offset)}, {action}, 'success', 'blob', 'devstoreaccount1', 'jobs', {blob},
            printf('%012x', i), CASE WHEN {slot} = 2 THEN printf('%012x', i + 281474976710656) END, 30,
            {begin.format(o=f"({offset}) + 30")}, {before}, {after}, i / {blobs} + 1, 200,
            '', printf('account:app%02d', i % 37), 'azure', '', lower(hex(randomblob(16))),
            printf('req-%d', i), '10.1.2.3', 'azsdk-python-storage-blob/12.24.0 Python/3.11.2'
        FROM m WHERE i < {tenures} AND ({slot} != 2 OR i % 1000 = 7)""")
    steps += [sql for _, sql in made if not sql.upper().startswith("CREATE TRIGGER")]
    began = time.monotonic()
    for n, sql in enumerate(steps, 1):
        cursor.execute(sql)
        print(f"  step {n}/{len(steps)} done at {time.monotonic() - began:.0f} s, load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
    db.execute("COMMIT")
    db.execute("PRAGMA journal_mode = WAL")
    db.close()


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
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    tenures = args.events // 3
    began = time.monotonic()
    if not reuse:  # the schema in a process of its own, whose connections (and checkpointer) are gone after
        subprocess.run([sys.executable, str(root / "manage.py"), "migrate", "--verbosity", "0"], check=True)
        generate(database, tenures=tenures, blobs=args.blobs)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from leases.api.tenures import TenureFilter, TenureSerializer
    from leases.models import Tenure
    from leases.services.selectors import holder_at

    call_command("migrate", verbosity=0)  # the triggers again (and the schema of a kept file)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    span = (tenures // args.blobs) * STEP
    print(f"{tenures * 3 + len(range(7, tenures, 1000)):,} events, {tenures:,} tenures over {args.blobs:,} blobs generated in "
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
