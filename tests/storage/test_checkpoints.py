"""WAL checkpoints off the request path (engines.sqlite.Checkpointer):
a thread copies the WAL back into the database file, so that commits,
which hold the writer lock, do not do it themselves."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from django.db import connection

from engines.sqlite.base import Checkpointer, checkpointers
from tests.storage import lock_is_free


def _main_file_rows(path) -> int | None:
    """Rows of table t in the database file itself, ignoring the WAL."""
    con = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        return con.execute("SELECT count(*) FROM t").fetchone()[0]
    except sqlite3.OperationalError:  # no such table: not checkpointed yet
        return None
    finally:
        con.close()


def _wait_for(predicate, timeout=60.0):
    # waits for a thread to act, not for lease time to pass (the timeout only
    # turns a hang into a failure)
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


def _rounds_after_now(thread) -> bool:
    """Wait until a whole round began after this call and ended (the one
    under way may have started before): then the main file holds what was
    committed before the call, and reading it (immutable, without locks)
    races no copy, for the WAL has nothing new to copy."""
    seen = thread.checkpoints
    return _wait_for(lambda: thread.checkpoints >= seen + 2)


def test_the_thread_copies_committed_transactions_into_the_database_file(tmp_path):
    path = str(tmp_path / "db.sqlite3")
    writer = _wal_database(path)
    assert _main_file_rows(path) is None  # everything is still only in the WAL
    thread = Checkpointer(path, 0.01, "FULL")
    thread.start()
    assert _rounds_after_now(thread)
    assert _main_file_rows(path) == 50
    writer.execute("INSERT INTO t VALUES (50)")  # and keeps doing so
    assert _rounds_after_now(thread)
    assert _main_file_rows(path) == 51
    thread.stop()
    writer.close()


def test_a_round_leaves_the_wal_fully_copied_though_a_writer_committed_during_it(tmp_path):
    # Only a WAL copied to its last frame is started over by the next writer;
    # one whose checkpoints always lag a commit behind grows for as long as
    # writers keep writing. So a round ends with a pass under the writer lock.
    path = str(tmp_path / "db.sqlite3")
    writer = _wal_database(path)  # 50 transactions in the WAL

    class WriterCommitsDuringFirstPass:
        """The round's connection; a writer's transaction spans its first
        pass, as under load one always does."""

        def __init__(self, con):
            self.con, self.passes = con, 0

        def execute(self, sql):
            self.passes += 1
            if self.passes == 1:
                writer.execute("BEGIN IMMEDIATE")
            row = self.con.execute(sql).fetchone()
            if self.passes == 1:
                writer.execute("INSERT INTO t VALUES (-1)")
                writer.execute("COMMIT")
            return SimpleNamespace(fetchone=lambda: row)

    con = sqlite3.connect(path, isolation_level=None)
    round_ = Checkpointer(path, 60, "FULL")  # not started: one round, by hand
    round_.checkpoint(WriterCommitsDuringFirstPass(con))
    writer.execute("INSERT INTO t VALUES (50)")
    _, frames, _ = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert frames <= 3  # the WAL was started over: it holds only that last transaction
    assert _main_file_rows(path) == 52
    con.close()
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
    assert _rounds_after_now(thread)
    assert _main_file_rows(path) == 50
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
    thread = checkpointers[(os.getpid(), str(connection.settings_dict["NAME"]))]
    assert thread.is_alive() and thread.interval == 0.1


def test_the_pass_under_the_writer_lock_copies_at_most_a_bounded_number_of_frames(tmp_path):
    # Large writes (an upload's 1 MiB chunks) committed during the pass beside
    # the writers: copying all of them under the writer lock held every lease
    # commit back for as long. The round looks first and leaves them to the
    # passes beside the writers.
    from engines.sqlite.checkpoints import LOCKED_FRAMES, frames_to_copy

    path = str(tmp_path / "db.sqlite3")
    writer = _wal_database(path)
    locked_copies: list[int | None] = []

    class BigCommitsBesideEachPass:
        """The round's connection; during every pass beside the writers, a
        writer commits ~1 MiB (about 256 pages), as a stream of uploads does."""

        def __init__(self, con):
            self.con = con

        def execute(self, sql):
            locked = not lock_is_free(path + ".writer-lock")
            if locked:
                locked_copies.append(frames_to_copy(path))
            row = self.con.execute(sql).fetchone()
            if not locked:
                writer.execute("INSERT INTO t VALUES (?)", (os.urandom(1 << 20),))
            return SimpleNamespace(fetchone=lambda: row)

    con = sqlite3.connect(path, isolation_level=None)
    round_ = Checkpointer(path, 60, "FULL")  # not started: one round, by hand
    round_.checkpoint(BigCommitsBesideEachPass(con))
    assert all(left is not None and left <= LOCKED_FRAMES for left in locked_copies)
    left = frames_to_copy(path)
    assert left is not None and left > LOCKED_FRAMES  # left for later, not copied under the lock
    writer.execute("INSERT INTO t VALUES (1)")  # a quiet moment: the next round copies the rest
    round_.checkpoint(con)
    assert frames_to_copy(path) == 0
    con.close()
    writer.close()


# SQLite's lock on the WAL index that says "in use" (byte 128 of the -shm
# file: WALINDEX_LOCK_OFFSET 120 + 8 locks), as another process's first
# connection tries it.
_PROBE = ("import fcntl, os, sys\n"
          "fd = os.open(sys.argv[1] + '-shm', os.O_RDWR)\n"
          "try:\n"
          "    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)\n"
          "    print('free')\n"
          "except OSError:\n"
          "    print('held')\n")


def _index_in_use_seen_from_another_process(path) -> bool:
    out = subprocess.run([sys.executable, "-c", _PROBE, path], capture_output=True, text=True, timeout=60)
    return {"held": True, "free": False}[out.stdout.strip()]


def test_reading_the_wal_index_keeps_this_processs_locks_on_it(tmp_path):
    # A process's POSIX locks on a file go when any of its descriptors of
    # that file is closed. Reading the index by opening and closing the
    # -shm file dropped the connections' locks: the next process to connect
    # took itself for the first, truncated the index under everybody's
    # memory maps, and both server workers died of SIGBUS.
    from engines.sqlite.checkpoints import frames_to_copy

    path = str(tmp_path / "db.sqlite3")
    con = _wal_database(path)
    assert _index_in_use_seen_from_another_process(path)
    for _ in range(3):
        assert frames_to_copy(path) is not None
    assert _index_in_use_seen_from_another_process(path)
    con.close()


def test_a_database_switched_to_wal_after_the_thread_connected_is_checkpointed(tmp_path):
    """The thread may open a new database file before its creator switches
    it to WAL (a test database made again under the same name): its
    connection then reports no WAL until it reads, and was never
    checkpointed (the test above failed that way, rarely)."""
    path = str(tmp_path / "db.sqlite3")
    creator = sqlite3.connect(path, isolation_level=None)  # the file exists, empty, not yet WAL
    thread = Checkpointer(path, 0.01, "FULL")
    thread.start()
    assert _wait_for(lambda: thread.checkpoints >= 2)  # connected, to a database not in WAL mode
    creator.close()
    writer = _wal_database(path)
    assert _rounds_after_now(thread)
    assert _main_file_rows(path) == 50
    thread.stop()
    writer.close()


EMFILE_CHILD = """
import os, resource, sqlite3, sys, time
sys.path.insert(0, os.getcwd())
from engines.sqlite.checkpoints import Checkpointer
path = sys.argv[1]
con = sqlite3.connect(path, isolation_level=None)
con.execute("PRAGMA journal_mode=WAL")
con.execute("PRAGMA wal_autocheckpoint=0")
con.execute("CREATE TABLE t (x)")
thread = Checkpointer(path, 0.01, "FULL")
thread.start()

def wait_for(predicate):
    deadline = time.monotonic() + 60
    while not predicate():
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.005)

wait_for(lambda: thread.checkpoints >= 1)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
# Something to copy only now (the connection's files are open): else a round
# could checkpoint it before the limit is reached, and later rounds open nothing.
con.execute("INSERT INTO t VALUES (1)")  # the round takes the writer lock (a new descriptor)
wait_for(lambda: thread.failures >= 3 or not thread.is_alive())  # rounds failed at the open-file limit ...
for fd in held:
    os.close(fd)
done = thread.checkpoints
wait_for(lambda: thread.checkpoints >= done + 2 or not thread.is_alive())  # ... and it checkpoints again once descriptors are free
con.execute("INSERT INTO t VALUES (2)")
print("alive" if thread.is_alive() else "dead", getattr(thread, "failures", 0) >= 3)
"""


def test_the_checkpointer_survives_the_open_file_limit(tmp_path):
    """At the open-file limit (EMFILE) a round fails; the thread goes on and
    checkpoints again once descriptors are free (it died of the OSError)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", EMFILE_CHILD, str(tmp_path / "db.sqlite3")], cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["alive", "True"], (done.stdout, done.stderr[-2000:])
