"""WAL checkpoints off the request path (leases.sqlite_backend.Checkpointer):
a thread copies the WAL back into the database file, so commits -- which
hold the writer lock -- no longer do it themselves."""

from __future__ import annotations

import os
import sqlite3
import time

import pytest
from django.db import connection

from leases.sqlite_backend.base import Checkpointer, _checkpointers, _writer_lock, writer_lock_path


def _main_file_rows(path) -> int | None:
    """Rows of table t in the database file itself, ignoring the WAL."""
    con = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        return con.execute("SELECT count(*) FROM t").fetchone()[0]
    except sqlite3.OperationalError:  # no such table: not checkpointed yet
        return None
    finally:
        con.close()


def _wait_for(predicate, timeout=10.0):
    # waits for a thread to act, not for lease time to pass
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _wal_database(path):
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")  # only the thread may checkpoint
    con.execute("CREATE TABLE t (x)")
    for i in range(50):
        con.execute("INSERT INTO t VALUES (?)", (i,))
    return con


def test_the_thread_copies_committed_transactions_into_the_database_file(tmp_path):
    path = str(tmp_path / "db.sqlite3")
    writer = _wal_database(path)
    assert _main_file_rows(path) is None  # everything is still only in the WAL
    thread = Checkpointer(path, 0.01, "FULL")
    thread.start()
    assert _wait_for(lambda: _main_file_rows(path) == 50)
    writer.execute("INSERT INTO t VALUES (50)")  # and keeps doing so
    assert _wait_for(lambda: _main_file_rows(path) == 51)
    assert thread.checkpoints >= 2
    thread.stop()
    writer.close()


def test_the_wal_is_started_over_rather_than_grown_while_writers_keep_writing(tmp_path):
    # Every checkpoint copies the WAL while writers append to it; only one
    # that finishes with them held off lets the next writer start it over.
    path = str(tmp_path / "db.sqlite3")
    writer = _wal_database(path)
    writer.execute("PRAGMA synchronous=OFF")  # fast: many checkpoint rounds' worth of writes
    thread = Checkpointer(path, 0.005, "OFF")
    thread.start()
    page = b"x" * 4000
    for i in range(3000):  # ~6,000 frames, 24 MB written to the WAL in all
        with _writer_lock(writer_lock_path(path)):  # as every writer of leases.sqlite_backend
            writer.execute("BEGIN IMMEDIATE")
            writer.execute("INSERT INTO t VALUES (?)", (page,))
            writer.execute("COMMIT")
    written = 3000 * 4000
    assert thread.checkpoints >= 3
    assert os.path.getsize(path + "-wal") < written / 3
    thread.stop()
    writer.close()


def test_the_thread_outlives_its_database_file(tmp_path):
    path = str(tmp_path / "db.sqlite3")
    _wal_database(path).close()
    thread = Checkpointer(path, 0.01, "FULL")
    thread.start()
    assert _wait_for(lambda: thread.checkpoints >= 1)
    for suffix in ("", "-wal", "-shm"):  # as when a test database is dropped
        if os.path.exists(path + suffix):
            os.unlink(path + suffix)
    rounds = thread.rounds
    assert _wait_for(lambda: thread.rounds >= rounds + 5)
    assert thread.is_alive()
    writer = _wal_database(path)  # a new database under the same name is checkpointed too
    assert _wait_for(lambda: _main_file_rows(path) == 50)
    thread.stop()
    writer.close()


@pytest.mark.django_db
def test_request_connections_leave_checkpoints_to_one_thread_per_process():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's WAL")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_autocheckpoint")
        # a bound should the thread fall behind, far above its interval's worth
        assert cursor.fetchone()[0] == 10000
    thread = _checkpointers[(os.getpid(), str(connection.settings_dict["NAME"]))]
    assert thread.is_alive() and thread.interval == 0.1
