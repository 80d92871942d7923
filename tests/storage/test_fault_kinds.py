"""Storage faults told apart from bugs (leases/operations/faults.py): SQLite's transient
lock failures are 503 ServerBusy (retry), not 500."""

from __future__ import annotations

import sqlite3

import pytest
from django.db import DatabaseError, OperationalError

from leases.operations import faults


def _as_django_raises(driver_error: Exception) -> Exception:
    """The exception a door's handler gets: Django's wrapper, raised from the driver's."""
    try:
        try:
            raise driver_error
        except sqlite3.Error as exc:
            raise OperationalError(*exc.args) from exc
    except DatabaseError as wrapped:
        return wrapped


def test_sqlite_locked_from_a_real_second_writer_is_busy(tmp_path):
    path = tmp_path / "db.sqlite3"
    holder = sqlite3.connect(path, timeout=0)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0)
    with pytest.raises(sqlite3.OperationalError) as raised:
        other.execute("BEGIN IMMEDIATE")
    fault = faults.classify(_as_django_raises(raised.value))
    assert fault is not None and fault.kind == faults.BUSY and fault.status == 503


def test_sqlite_locking_protocol_is_busy_not_a_bug():
    """SQLITE_PROTOCOL: a connection that lost the race for WAL's shared-memory
    locks for seconds gives up with "locking protocol" (seen with 28 worker
    processes on 2 cores). It is SQLite's busy, not a bug."""
    fault = faults.classify(_as_django_raises(sqlite3.OperationalError("locking protocol")))
    assert fault is not None and fault.kind == faults.BUSY
    assert fault.error().code == "ServerBusy" and fault.status == 503
