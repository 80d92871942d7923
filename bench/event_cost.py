"""What one lease history event costs on disk: bytes per event (table and
each index, from SQLite's dbstat) and WAL pages per lease commit.

Runs real lease renewals through the services (the hot path's compiled
INSERT) against a fresh SQLite file in a temporary directory, with an
SDK-like actor (user agent, client request id, address), then prints
figures. Timing-free: the numbers depend only on the schema.

    .venv/bin/python bench/event_cost.py [--events N] [--commits N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path

USER_AGENT = "azsdk-python-storage-blob/12.24.0 Python/3.11.2 (Linux-6.1.0-27-amd64-x86_64-with-glibc2.36)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000, help="renewals for the bytes per event")
    parser.add_argument("--commits", type=int, default=100, help="renewals for the WAL pages per commit")
    parser.add_argument("--blobs", type=int, default=100, help="leased blobs the renewals cycle over")
    parser.add_argument("--sql", action="append", default=[], help="SQL to run after migrating, to try another "
                        "schema (e.g. an index); repeatable")
    args = parser.parse_args()

    workdir = tempfile.TemporaryDirectory(prefix="leasehold-event-cost-")
    path = Path(workdir.name) / "events.sqlite3"
    os.environ["LEASEHOLD_DATABASE"] = str(path)
    os.environ["LEASEHOLD_VAR_DIR"] = workdir.name
    # Checkpoints only when SQLite's own threshold (1000 pages) is reached,
    # so the WAL holds every page the measured commits wrote.
    os.environ["LEASEHOLD_SQLITE_CHECKPOINT_INTERVAL"] = "0"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from leases import services
    from leases.services import Actor, ResourceRef

    call_command("migrate", verbosity=0)
    with connection.cursor() as cur:
        for sql in args.sql:
            cur.execute(sql)
    services.account_ensure(name="devstoreaccount1", key1="a2V5")
    services.container_create(account="devstoreaccount1", name="jobs")
    leases = []
    for i in range(args.blobs):
        ref = ResourceRef("devstoreaccount1", "jobs", f"workers/queue-{i:04d}/lock")
        services.blob_put(ref=ref, actor=Actor(name="cli", via="cli"), content=b"")
        leases.append((ref, services.lease_acquire(ref=ref, actor=Actor(name="cli"), duration=-1).lease_id))

    def renew(n: int) -> None:
        for i in range(n):
            ref, lease_id = leases[i % len(leases)]
            actor = Actor(name="account:devstoreaccount1", via="azure", client_request_id=str(uuid.uuid4()),
                          remote_addr="10.0.3.17", user_agent=USER_AGENT)
            services.lease_renew(ref=ref, actor=actor, lease_id=lease_id)

    def sizes() -> dict[str, int]:
        with connection.cursor() as cur:
            cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            cur.fetchall()
            cur.execute("SELECT name, SUM(pgsize) FROM dbstat WHERE name LIKE 'event%%' OR name = "
                        "'leases_leaseevent' OR name LIKE 'leases_leaseevent_%%' GROUP BY name")
            return dict(cur.fetchall())

    before = sizes()
    renew(args.events)
    after = sizes()
    total = 0
    print(f"{args.events} events through lease_renew:")
    for name in sorted(after, key=lambda n: (n != "leases_leaseevent", n)):
        per = (after[name] - before.get(name, 0)) / args.events
        total += per
        print(f"  {name:45s} {per:7.1f} bytes/event")
    print(f"  {'total':45s} {total:7.1f} bytes/event  ({total * 1e6 / 2**30:.2f} GiB per million events)")

    with connection.cursor() as cur:
        cur.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        cur.fetchall()  # an unread result would hold a read transaction open
        cur.execute("PRAGMA wal_autocheckpoint=0")  # the WAL keeps every frame of the measured commits
    renew(args.commits)
    with connection.cursor() as cur:
        cur.execute("PRAGMA wal_checkpoint(PASSIVE)")
        _, frames, _ = cur.fetchone()
        cur.execute("PRAGMA page_size")
        page = cur.fetchone()[0]
    print(f"WAL: {frames / args.commits:.2f} pages ({page} bytes each) per renew commit")


if __name__ == "__main__":
    main()
