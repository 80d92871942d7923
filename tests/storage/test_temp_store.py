"""SQLite's temporary files (statement journals, sorters) stay in memory on the server's
connections (``PRAGMA temp_store=MEMORY`` in config/settings.py): otherwise a statement that may
have to be undone halfway inside a larger transaction, as a history insert with its trigger is,
spills its journal to a new file in /var/tmp, created and unlinked under the writer lock."""

import os
import sqlite3

import pytest
from django.conf import settings

SERVER_OPTIONS = settings.DATABASES["default"].get("OPTIONS", {})
pytestmark = pytest.mark.skipif("init_command" not in SERVER_OPTIONS, reason="the SQLite engine's connection set-up")


def _temporary_files() -> list[str]:
    """This process's open files that SQLite created as temporary (opened, then unlinked)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "etilqs_" in target:
            found.append(target)
    return found


def _spilled(path, init_command: str) -> list[str]:
    """The temporary files open while a transaction's second statement,
    a large indexed UPDATE, may still have to be undone on its own."""
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for pragma in filter(None, (part.strip() for part in init_command.split(";"))):
            con.execute(pragma)
        con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        con.execute("CREATE INDEX t_v ON t (v)")
        con.executemany("INSERT INTO t (v) VALUES (hex(randomblob(40)))", [()] * 3000)
        con.execute("BEGIN IMMEDIATE")
        con.execute("UPDATE t SET v = hex(randomblob(40)) WHERE id < 100")
        con.execute("UPDATE t SET v = hex(randomblob(40))")
        files = _temporary_files()
        con.execute("ROLLBACK")
        return files
    finally:
        con.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
def test_a_statement_journal_stays_in_memory(tmp_path):
    assert _spilled(tmp_path / "server.sqlite3", SERVER_OPTIONS["init_command"]) == []


def _files_by_default() -> bool:
    """Whether this SQLite keeps temporary files in files unless told (its
    build's TEMP_STORE is 0 or 1; 2 and 3 mean memory already)."""
    options = {row[0] for row in sqlite3.connect(":memory:").execute("PRAGMA compile_options")}
    return not ({"TEMP_STORE=2", "TEMP_STORE=3"} & options)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd")
@pytest.mark.skipif(not _files_by_default(), reason="this SQLite keeps temporary files in memory by itself")
def test_without_it_the_same_statement_spills_to_a_file(tmp_path):
    """The check above can fail: SQLite's default makes a file here."""
    default = SERVER_OPTIONS["init_command"].replace("PRAGMA temp_store=MEMORY;", "")
    assert default != SERVER_OPTIONS["init_command"]
    assert _spilled(tmp_path / "default.sqlite3", default) != []


@pytest.mark.django_db
def test_migrate_keeps_its_sorts_in_files(monkeypatch):
    """A migration that builds an index sorts the whole table: while migrate
    runs, the connection's temporary files are files (in memory, CREATE INDEX
    over 1,500,000 rows took the process from 57 to 197 MB: docs/decisions/0037);
    after it, as the server set them."""
    from django.core.management import call_command
    from django.core.management.commands.migrate import Command as DjangoMigrate
    from django.db import connection

    def temp_store() -> int:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA temp_store")
            return cursor.fetchone()[0]

    during = []
    handle = DjangoMigrate.handle

    def observed(self, *args, **kwargs):
        during.append(temp_store())
        return handle(self, *args, **kwargs)

    monkeypatch.setattr(DjangoMigrate, "handle", observed)
    assert temp_store() == 2  # MEMORY, as the server's connections
    call_command("migrate", interactive=False, verbosity=0)
    assert during == [1]  # FILE
    assert temp_store() == 2
