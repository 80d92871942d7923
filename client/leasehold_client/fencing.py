"""Fencing: the user's own database refuses a write from a stale lease holder.

A holder that paused (a GC, a swapped-out VM, a partition) can wake up after
its lease was broken or ran out and another holder took over, still
believing it holds the lease. Leasehold hands every new lease a generation
that never goes back (``AutoRenewLease.generation``, ``term.generation``).
``fence`` records, inside the caller's own transaction, the highest
generation seen per resource and refuses an older one:

    with conn:                                   # the caller's transaction
        fence(conn, "reports/daily", lease)      # StaleLease if a newer holder wrote
        conn.execute("UPDATE report SET ...")

One statement, ``INSERT ... ON CONFLICT DO UPDATE ... WHERE ... RETURNING``
on the table ``leasehold_fence`` (DDL below; created on first use unless
``create=False``). The row stays locked until the transaction ends, so a
newer holder's fenced transaction waits for an older one in progress, and
an older one arriving later finds the newer generation and is refused: the
exception propagates and the caller's transaction rolls back.

Works on any DB-API connection whose database speaks that statement:
sqlite3 (SQLite 3.35 or later, for RETURNING), psycopg 3 and psycopg2
(PostgreSQL 9.5 or later), and Django's ``django.db.connection`` on either.
No dependency: Django is imported only by ``fenced``.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator

TABLE = "leasehold_fence"
DDL = (f"CREATE TABLE IF NOT EXISTS {TABLE} (resource VARCHAR(1024) NOT NULL PRIMARY KEY, "
       "generation BIGINT NOT NULL)")
_UPSERT = (f"INSERT INTO {TABLE} (resource, generation) VALUES ({{p}}, {{p}}) "
           f"ON CONFLICT (resource) DO UPDATE SET generation = excluded.generation "
           f"WHERE {TABLE}.generation <= excluded.generation RETURNING generation")
_READ = f"SELECT generation FROM {TABLE} WHERE resource = {{p}}"
_MARKS = {"qmark": "?", "format": "%s", "pyformat": "%s"}


class StaleLease(Exception):
    """A holder of a newer lease on ``resource`` has already written: this
    holder's lease is gone, and its transaction must roll back."""

    def __init__(self, resource: str, generation: int, recorded: int | None):
        self.resource, self.generation, self.recorded = resource, generation, recorded
        super().__init__(f"stale lease on {resource!r}: generation {generation}, but generation {recorded} "
                         "has already written; this holder lost its lease, its transaction must roll back")


class NotInTransaction(RuntimeError):
    """fence() was called outside a transaction: its row lock would end with
    its own statement, and the writes after it would not be fenced."""


class CannotFence(ValueError):
    """No fencing generation to fence with (Azure Storage and Azurite hand out none)."""


def generation_of(lease_or_generation: Any) -> int:
    """The generation given, or an ``AutoRenewLease``'s / leader term's own."""
    value = getattr(lease_or_generation, "generation", lease_or_generation)
    if value is None:
        raise CannotFence("cannot fence: this lease has no fencing generation. Only Leasehold hands one out "
                          "(the Leasehold-Generation header of an acquire); Azure Storage and Azurite do not, "
                          "so a write from a stale holder cannot be told from the current holder's")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a fencing generation is a whole number of 0 or more, not {value!r}")
    return value


def fence(conn: Any, resource: str, generation: Any, *, create: bool = True) -> int:
    """Inside the caller's transaction on ``conn``: record ``generation``
    (an int, or a lease or leader term carrying ``.generation``) as the
    highest seen for ``resource``, or raise ``StaleLease`` if a higher one
    is recorded. The same generation may write again; resources are fenced
    apart. ``create=False`` skips the CREATE TABLE IF NOT EXISTS (for those
    who manage their schema: the table is ``DDL``). Returns the generation."""
    generation = generation_of(generation)
    mark = _placeholder(conn)
    if _autocommitting(conn):
        raise NotInTransaction(f"fence({resource!r}) outside a transaction fences nothing: the row lock ends with "
                               "its own statement; call it inside the transaction that does the work")
    cursor = conn.cursor()
    try:
        if create:
            cursor.execute(DDL)
        cursor.execute(_UPSERT.format(p=mark), (resource, generation))
        if cursor.fetchone() is not None:
            return generation
        cursor.execute(_READ.format(p=mark), (resource,))
        row = cursor.fetchone()
        raise StaleLease(resource, generation, row[0] if row else None)
    finally:
        cursor.close()


@contextmanager
def fenced(resource: str, generation: Any, *, using: str | None = None, create: bool = True) -> Iterator[None]:
    """Django: ``transaction.atomic`` on the ``using`` database, fenced first.

        with fenced("reports/daily", lease):
            Report.objects.filter(...).update(...)

    ``StaleLease`` (raised before the block runs, nothing written) rolls the
    atomic block back, as any exception does."""
    from django.db import DEFAULT_DB_ALIAS, connections, transaction

    alias = using or DEFAULT_DB_ALIAS
    with transaction.atomic(using=alias):
        fence(connections[alias], resource, generation, create=create)
        yield


def _placeholder(conn: Any) -> str:
    """The parameter marker of ``conn``'s driver: Django's connection and
    cursors take %s whatever the database; a DB-API module says its own."""
    if hasattr(conn, "vendor") and hasattr(conn, "ops"):  # django.db.connection (a proxy or a wrapper)
        sqlite = conn.vendor == "sqlite"
    else:
        module = sys.modules.get(type(conn).__module__.split(".")[0])
        style = getattr(module, "paramstyle", None)
        if style not in _MARKS:
            raise ValueError(f"fence() supports qmark, format and pyformat drivers, not {style!r} "
                             f"({type(conn).__module__})")
        sqlite = type(conn).__module__.split(".")[0] in ("sqlite3", "_sqlite3")
        if sqlite:
            _check_sqlite(module)
        return _MARKS[style]
    if sqlite:
        import sqlite3

        _check_sqlite(sqlite3)
    return "%s"


def _autocommitting(conn: Any) -> bool:
    """Would ``conn`` commit fence's statement by itself? Django outside
    ``atomic`` (in autocommit), sqlite3 with ``isolation_level=None`` outside
    a BEGIN, psycopg (3 or 2) in autocommit mode outside a transaction. (A
    sqlite3 connection in its default mode, or psycopg's, opens the
    transaction at fence's own statement and keeps it until commit.)"""
    if hasattr(conn, "in_atomic_block") and hasattr(conn, "get_autocommit"):  # django.db.connection
        return bool(conn.get_autocommit()) and not conn.in_atomic_block
    if hasattr(conn, "isolation_level") and hasattr(conn, "in_transaction"):  # sqlite3
        return conn.isolation_level is None and not conn.in_transaction
    if getattr(conn, "autocommit", False) is True:
        info = getattr(conn, "info", None)  # psycopg 3; psycopg2 says it by get_transaction_status()
        status = info.transaction_status if info is not None else conn.get_transaction_status()
        return int(status) == 0  # IDLE: no transaction open
    return False


def _check_sqlite(module: Any) -> None:
    version = getattr(module, "sqlite_version_info", (3, 35, 0))
    if tuple(version) < (3, 35, 0):
        raise RuntimeError(f"fence() needs SQLite 3.35 or later (for RETURNING); this Python has SQLite "
                           f"{'.'.join(map(str, version))}")
