"""Lease time read from the database (leases.domain.clock says why): on PostgreSQL
``clock_timestamp()`` (the time the statement reads it, not ``now()``, which stands still for the
whole transaction), read in the statement that locks the row, after the lock (``LOCK_COLUMNS``,
appended by statements.load_locked), together with the high-water mark of leases_leaseclock; on
SQLite the machine's clock, read once per transaction, after the writer lock. The high-water mark is
advanced by ``advance_high_water`` (leases.operations.clockwatch, about once a second per server
process), not by the lease transactions: one row written by every transaction would queue them all
behind each other."""

from __future__ import annotations

import time
from datetime import datetime, timezone

from django.db import connection as default_connection

from engines import postgres
from leases.domain import clock

_TABLE = "leases_leaseclock"  # leases.models.LeaseClock (not imported: this package loads before the models)
_HIGH_WATER = f"(SELECT high_water FROM {_TABLE} WHERE id = 1)"


def reads_time(conn) -> bool:
    """Whether the database's clock is lease time on ``conn``: PostgreSQL."""
    return postgres.in_use(conn)


def lock_columns(conn) -> tuple[str, ...]:
    """SQL to select beside a locked row, evaluated once the lock is held:
    the database's clock and the high-water mark (none on SQLite)."""
    return ("clock_timestamp()", _HIGH_WATER) if reads_time(conn) else ()


def decided(extra: tuple, floor: datetime | None = None) -> datetime:
    """The time of a decision from what ``lock_columns`` selected, at least ``floor``."""
    return clock.decide(*extra, floor=floor)


def transaction_now(conn=None, cursor=None) -> datetime:
    """The time of a decision in ``conn``'s transaction, for a caller that
    holds its row lock already: one round trip on PostgreSQL."""
    conn = conn or default_connection
    if not reads_time(conn):
        return clock.decide()
    if cursor is not None:
        cursor.execute(f"SELECT clock_timestamp(), {_HIGH_WATER}")
        return clock.decide(*cursor.fetchone())
    with conn.cursor() as own:
        own.execute(f"SELECT clock_timestamp(), {_HIGH_WATER}")
        return clock.decide(*own.fetchone())


_ADVANCE = (f"INSERT INTO {_TABLE} (id, high_water, steps) VALUES (1, clock_timestamp(), 0) "
            f"ON CONFLICT (id) DO UPDATE SET high_water = "
            f"greatest({_TABLE}.high_water, excluded.high_water) RETURNING clock_timestamp(), high_water")


def advance_high_water(conn=None) -> tuple[datetime, float, float, datetime | None]:
    """Read the database's clock and raise the high-water mark to it (on
    PostgreSQL; elsewhere only the machine's clock is read): (the reading,
    the monotonic times before and after it, the high-water mark)."""
    conn = conn or default_connection
    if not reads_time(conn):
        before = time.monotonic()
        reading = datetime.now(timezone.utc)
        return reading, before, time.monotonic(), None
    with conn.cursor() as cursor:
        before = time.monotonic()
        cursor.execute(_ADVANCE)
        after = time.monotonic()
        reading, high_water = cursor.fetchone()
    return reading, before, after, high_water


def clock_now(conn=None) -> datetime:
    """The database's clock as it reads now (the machine's on SQLite), no floor, no offset."""
    conn = conn or default_connection
    if not reads_time(conn):
        return datetime.now(timezone.utc)
    with conn.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]
