"""manage.py leasehold_backup PATH: a consistent copy of the SQLite database while the server runs,
through SQLite's online backup API (what the sqlite3 shell's ``.backup`` does). The copy is one read
transaction on a WAL snapshot: lease writers are not blocked (WAL readers never block writers), and
the copy holds every transaction committed before it began. It is written beside PATH, checked
(PRAGMA quick_check) and renamed into place, so PATH is never a half copy. PostgreSQL: use pg_dump
or your provider's backups."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from engines import postgres


class Command(BaseCommand):
    help = "Copy the SQLite database to PATH while the server runs (SQLite's online backup)."

    def add_arguments(self, parser):
        parser.add_argument("path", help="the backup file to write (replaced if it exists)")

    def handle(self, *args, path, **options):
        if postgres.in_use():
            raise CommandError("leasehold_backup copies SQLite databases; on PostgreSQL use pg_dump")
        source = str(connection.settings_dict["NAME"])
        if not Path(source).exists():
            raise CommandError(f"no database at {source}")
        target = Path(path).resolve()
        if target == Path(source).resolve():
            raise CommandError("the backup must not overwrite the database itself")
        if not target.parent.is_dir():
            raise CommandError(f"directory {target.parent} does not exist")
        partial = target.with_name(f".{target.name}.partial")
        partial.unlink(missing_ok=True)
        started = time.monotonic()
        src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
        dst = sqlite3.connect(partial)
        try:
            src.backup(dst)  # all pages in one step: one consistent snapshot
            dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            check = dst.execute("PRAGMA quick_check").fetchone()[0]
            events = dst.execute("SELECT count(*) FROM leases_leaseevent").fetchone()[0]
        except sqlite3.Error as err:
            partial.unlink(missing_ok=True)
            raise CommandError(f"backup failed: {err}") from None
        finally:
            dst.close()
            src.close()
        if check != "ok":
            partial.unlink(missing_ok=True)
            raise CommandError(f"the copy failed its integrity check: {check}")
        os.replace(partial, target)
        self.stdout.write(f"Backed up {source} to {target} ({target.stat().st_size / 2**20:.1f} MiB, "
                          f"{events} lease events) in {time.monotonic() - started:.1f} s.")
