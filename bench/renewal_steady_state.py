"""The database's size at steady state with the default retention (successful renewals kept
LEASEHOLD_RETENTION_RENEWALS, a day; everything else for ever): HOLDERS leases renewed every
INTERVAL seconds. Time is compressed: the leases are acquired through the services (so their
tenures exist), then the renewal events HOURS of that traffic produce are written straight in SQL,
each as the hot path writes a renewal (same columns, an SDK-like user agent, request ids), ending
now (request ids time-ordered as the server's UUIDv7 are; client request ids random as the SDKs'); the
pruner then runs once as a server's would have all along (retention.prune with the default policy).
Size grows in proportion to the events kept, so fewer holders (--holders 200) give the 1,000's figure
times five in a fifth of the time; the script prints that scaled figure too. Printed: the file's size and the live bytes before and after pruning, and after one more
hour written and pruned (freed pages reused: the file does not grow).

    .venv/bin/python bench/renewal_steady_state.py [--holders 1000] [--interval 15] [--hours 25]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

USER_AGENT = "azsdk-python-storage-blob/12.24.0 Python/3.11.2 (Linux-6.1.0-27-amd64-x86_64-with-glibc2.36)"


def sizes(cursor) -> tuple[int, int]:
    """(file bytes, live bytes: pages in use)."""
    page = cursor.execute("PRAGMA page_size").fetchone()[0]
    count = cursor.execute("PRAGMA page_count").fetchone()[0]
    free = cursor.execute("PRAGMA freelist_count").fetchone()[0]
    return count * page, (count - free) * page


def write_renewals(cursor, *, holders: int, interval: int, start, seconds: int) -> int:
    """Every holder's renewals from ``start`` for ``seconds``, as the hot path writes them."""
    ticks = seconds // interval
    cursor.execute(
        """
        WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
        INSERT INTO leases_leaseevent (occurred_at, action, outcome, resource_type, account, container, blob,
            lease_fingerprint, proposed_lease_fingerprint, duration, break_period, lease_time, expires_at,
            state_before, state_after, generation, status_code, error_code, actor, via, reason, request_id,
            client_request_id, remote_addr, user_agent)
        SELECT strftime('%Y-%m-%d %H:%M:%f', ?, '+' || ((i / ?) * ? + (i % ?) * ? / ?) || ' seconds'),
            'renew', 'success', 'blob', 'devstoreaccount1', 'jobs', printf('workers/queue-%04d/lock', i % ?),
            substr(lower(hex(randomblob(6))), 1, 12), NULL, 60, NULL, NULL,
            strftime('%Y-%m-%d %H:%M:%f', ?, '+' || ((i / ?) * ? + (i % ?) * ? / ? + 60) || ' seconds'),
            'leased', 'leased', 1, 200, '', 'account:devstoreaccount1', 'azure', '',
            printf('%012x', i) || lower(hex(randomblob(10))), lower(hex(randomblob(16))), '10.1.2.3', ?
        FROM n""",
        [ticks * holders, start, holders, interval, holders, interval, holders, holders,
         start, holders, interval, holders, interval, holders, USER_AGENT])
    # What each renewal's lease write also did: the row's and the open tenure's deadline.
    last = ("(SELECT max(e.expires_at) FROM leases_leaseevent e WHERE e.blob = {t}.{c} "
            "AND e.container = 'jobs' AND e.account = 'devstoreaccount1')")
    cursor.execute(f"UPDATE leases_tenure SET deadline = {last.format(t='leases_tenure', c='blob')} "
                   "WHERE ended_at IS NULL")
    cursor.execute(f"UPDATE leases_blob SET lease_expires_at = {last.format(t='leases_blob', c='name')} "
                   "WHERE lease_state = 'leased'")
    return ticks * holders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--holders", type=int, default=1000)
    parser.add_argument("--interval", type=int, default=15, help="seconds between a holder's renewals")
    parser.add_argument("--hours", type=float, default=25, help="hours of renewals written before pruning")
    args = parser.parse_args()
    workdir = tempfile.TemporaryDirectory(prefix="leasehold-steady-")
    path = Path(workdir.name) / "steady.sqlite3"
    os.environ.update(LEASEHOLD_DATABASE=str(path), LEASEHOLD_VAR_DIR=workdir.name)
    os.environ.pop("LEASEHOLD_RETENTION_RENEWALS", None)
    os.environ.pop("LEASEHOLD_RETENTION_EVENTS", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from leases import conf, services
    from leases.domain import clock
    from leases.models import LeaseEvent, Tenure
    from leases.operations import retention
    from leases.services import Actor, ResourceRef

    call_command("migrate", verbosity=0)
    policy = retention.Policy.from_settings(conf.current())
    print(f"default policy: renewals kept {policy.renewals}, other events kept {policy.events or 'for ever'}")
    end = clock.freeze()
    start = end - timedelta(hours=args.hours)
    clock.freeze(start)
    actor = Actor(name="account:devstoreaccount1", via="azure", user_agent=USER_AGENT, remote_addr="10.1.2.3")
    services.account_ensure(name="devstoreaccount1", key1="a2V5")
    services.container_create(account="devstoreaccount1", name="jobs")
    for i in range(args.holders):
        ref = ResourceRef("devstoreaccount1", "jobs", f"workers/queue-{i:04d}/lock")
        services.blob_put(ref=ref, actor=actor, content=b"")
        services.lease_acquire(ref=ref, actor=actor, duration=60)
    began = time.monotonic()
    with transaction.atomic(), connection.cursor() as cursor:
        written = write_renewals(cursor, holders=args.holders, interval=args.interval,
                                 start=start.strftime("%Y-%m-%d %H:%M:%S"), seconds=int(args.hours * 3600))
    clock.freeze(end)
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = sizes(cursor)
    print(f"{args.holders} holders renewing every {args.interval} s: {written:,} renewals written for "
          f"{args.hours:g} h in {time.monotonic() - began:.0f} s; {LeaseEvent.objects.count():,} events, "
          f"{Tenure.objects.count():,} tenures")
    print(f"before pruning: file {before[0] / 2**30:.2f} GiB, live {before[1] / 2**30:.2f} GiB, "
          f"{before[1] / max(1, written):.0f} bytes an event")
    began = time.monotonic()
    pruned = retention.prune(policy, now=end, pace=False)
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        after = sizes(cursor)
    kept = LeaseEvent.objects.count()
    print(f"pruned {pruned:,} events in {time.monotonic() - began:.0f} s; {kept:,} kept")
    print(f"after pruning (steady state: a day of renewals): file {after[0] / 2**30:.2f} GiB, "
          f"live {after[1] / 2**30:.2f} GiB")
    # One more hour of traffic, pruned as the server's pruner does: the freed pages take it.
    with transaction.atomic(), connection.cursor() as cursor:
        write_renewals(cursor, holders=args.holders, interval=args.interval,
                       start=end.strftime("%Y-%m-%d %H:%M:%S"), seconds=3600)
    later = end + timedelta(hours=1)
    clock.freeze(later)
    retention.prune(policy, now=later, pace=False)
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        again = sizes(cursor)
    print(f"an hour later, pruned again: file {again[0] / 2**30:.2f} GiB, live {again[1] / 2**30:.2f} GiB")
    if args.holders != 1000:
        scale = 1000 / args.holders
        print(f"scaled to 1,000 holders (events kept x{scale:g}): file about {again[0] * scale / 2**30:.1f} GiB")
    held = services.selectors.holder_at(account="devstoreaccount1", container="jobs",
                                        blob="workers/queue-0000/lock", when=start + timedelta(hours=2))
    print(f"who held workers/queue-0000/lock {args.hours - 1:g} h ago, its renewals pruned: "
          f"{held['holder'] if held else None}")


if __name__ == "__main__":
    main()
