"""The WAL fsync taken after the writer lock (engines.sqlite,
``sync_outside_lock``): a write transaction is committed at
synchronous=NORMAL under the lock, then the connection fsyncs the WAL itself
before the commit returns, so nobody is answered before their transaction is
on disk while the next writer already runs.

os.fdatasync is observed (and still called) to see when and on what the
fsync happens; everything else is the real database."""

import os
import sqlite3

import pytest
from django.db import DatabaseError, connection, transaction

from leases import services
from leases.models import Account
from leases.services import Actor, ResourceRef
from tests.storage import lock_is_free

pytestmark = [pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's write-ahead log"),
              pytest.mark.usefixtures("no_background_checkpoints")]

ACCOUNT = "devstoreaccount1"
REF = ResourceRef(ACCOUNT, "sync", "b.txt")
ACTOR = Actor(name="cli", via="cli")


@pytest.fixture
def blob(make_blob):
    return make_blob(REF, ACTOR)


def _db_path() -> str:
    return str(connection.settings_dict["NAME"])


def _committed_lease_state() -> str | None:
    """Read on a connection of its own: what other processes can see."""
    con = sqlite3.connect(_db_path())
    try:
        row = con.execute("SELECT lease_state FROM leases_blob WHERE name = ?", (REF.blob,)).fetchone()
        return row and row[0]
    finally:
        con.close()


@pytest.fixture
def fsyncs(blob):
    """Every os.fdatasync during the test: the file, whether the writer lock
    was free, and the blob's committed lease state at that moment."""
    seen = []
    real = os.fdatasync

    def observed(fd):
        seen.append((os.readlink(f"/proc/self/fd/{fd}"), lock_is_free(_db_path() + ".writer-lock"), _committed_lease_state()))
        return real(fd)

    os.fdatasync = observed
    yield seen
    os.fdatasync = real


def _synchronous() -> int:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous")
        return cursor.fetchone()[0]


def test_the_wal_is_fsynced_after_the_lock_is_released_and_before_the_commit_returns(blob, fsyncs):
    services.lease_acquire(ref=blob, actor=ACTOR, duration=15)
    # one fsync, of the WAL, with the writer lock already free for the next
    # writer and the lease already committed -- and before lease_acquire returned
    assert fsyncs == [(os.path.realpath(_db_path()) + "-wal", True, "leased")]
    assert _synchronous() == 2  # the connection is back at FULL for anything else


def test_a_failed_fsync_fails_the_action(blob):
    def failing(fd):
        raise OSError(5, "Input/output error")

    real, os.fdatasync = os.fdatasync, failing
    try:
        with pytest.raises(DatabaseError, match="could not fsync the write-ahead log"):
            services.lease_acquire(ref=blob, actor=ACTOR, duration=15)
    finally:
        os.fdatasync = real
    # committed but not known to be durable: reported as a failure, and the
    # connection is usable and back at FULL
    assert _synchronous() == 2
    assert _committed_lease_state() == "leased"


def test_a_rolled_back_transaction_needs_no_fsync(blob, fsyncs):
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            Account.objects.create(name="doomed", key1="a2V5")
            raise RuntimeError("undo")
    assert fsyncs == []
    assert _synchronous() == 2
    assert lock_is_free(_db_path() + ".writer-lock")
    assert not Account.objects.filter(name="doomed").exists()


@pytest.mark.parametrize("option, synchronous", [(False, "FULL"), (True, "NORMAL")])
def test_sqlite_syncs_by_itself_when_switched_off_or_not_full(blob, fsyncs, option, synchronous):
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    connection.close()
    options["sync_outside_lock"] = option
    options["init_command"] = options["init_command"].replace("synchronous=FULL", f"synchronous={synchronous}")
    try:
        statements: list[str] = []
        connection.ensure_connection()
        connection.connection.set_trace_callback(statements.append)
        services.lease_acquire(ref=blob, actor=ACTOR, duration=15)
        connection.connection.set_trace_callback(None)
        assert fsyncs == []
        assert not [s for s in statements if s.startswith("PRAGMA")]
        assert _synchronous() == {"FULL": 2, "NORMAL": 1}[synchronous]
    finally:
        connection.close()
        options.clear()
        options.update(saved)
