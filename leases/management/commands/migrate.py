"""manage.py migrate, which on PostgreSQL never lets a schema change hold up lease requests for
long. An ALTER TABLE needs its table to itself. While it waits for a long reader (pg_dump, an
export) to finish, every lease request on that table queues behind it, for as long as the reader
runs. So here each statement of a migration waits for a lock at most a quarter of
LEASEHOLD_WRITE_WAIT (at most 0.5 s: PostgreSQL's lock_timeout); then the migration, rolled back
whole (each runs in a transaction of its own), is tried again after a pause, until
``--lock-retry-for`` seconds have passed (a migration that cannot run in a transaction, as one
building an index CONCURRENTLY, is written to run again from the top). Lease requests wait at most
that quarter, never the reader's whole time. SQLite has nothing to wait for: its writer lock is
shared with lease writes as any transaction's; there migrate only keeps its sorts in files."""

from __future__ import annotations

import time

from django.core.management.base import CommandError
from django.core.management.commands.migrate import Command as DjangoMigrate
from django.db import OperationalError, connections

from engines import postgres
from leases import conf

LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for lock_timeout
PAUSE = 1.0  # seconds between tries: lease requests run meanwhile


def lock_wait() -> float:
    """Seconds a migration's statement may wait for a table's lock."""
    return max(0.05, min(0.5, conf.current().write_wait / 4))


class Command(DjangoMigrate):
    help = DjangoMigrate.help + " On PostgreSQL, a migration waiting for a table in use gives way and is retried."

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--lock-retry-for", type=float, default=600, metavar="SECONDS",
                            help="on PostgreSQL, keep retrying a migration that waits for a table in use for "
                                 "this long (default 600)")

    def handle(self, *args, **options):
        conn = connections[options["database"]]
        if not postgres.in_use(conn):
            return self._with_temporary_files(conn, *args, **options)
        wait = lock_wait()
        give_up = time.monotonic() + options["lock_retry_for"]
        while True:
            conn.ensure_connection()
            with conn.cursor() as cursor:
                cursor.execute(f"SET lock_timeout = '{int(wait * 1000)}ms'")
            try:
                return super().handle(*args, **options)
            except OperationalError as exc:
                if getattr(exc.__cause__, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                    raise
                if time.monotonic() > give_up:
                    raise CommandError(f"gave up after --lock-retry-for {options['lock_retry_for']:g} s: a table "
                                       f"is still in use by another session (a long query or pg_dump?) and each "
                                       f"try waited {wait:g} s for its lock ({exc}); nothing of the migration "
                                       f"was applied (of one that cannot run in a transaction, only steps that "
                                       f"running it again repeats). Run migrate again once that session ends, "
                                       f"or give it longer.") from None
                self.stderr.write(f"A table is in use by another session (a long query or pg_dump?): waited "
                                  f"{wait:g} s for its lock and gave way to lease requests; retrying in {PAUSE:g} s.")
                time.sleep(PAUSE)

    def _with_temporary_files(self, conn, *args, **options):
        """The server keeps SQLite's temporary files in memory (config/settings.py); a migration
        that builds an index sorts the whole table, which belongs in files: so while it runs."""
        conn.ensure_connection()
        with conn.cursor() as cursor:
            cursor.execute("PRAGMA temp_store")
            (before,) = cursor.fetchone()
            cursor.execute("PRAGMA temp_store=FILE")
        try:
            return super().handle(*args, **options)
        finally:
            if conn.connection is not None:
                with conn.cursor() as cursor:
                    cursor.execute(f"PRAGMA temp_store={int(before)}")
