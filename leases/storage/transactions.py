"""The write transaction of a service, and the seam to the SQLite engine.

On SQLite (leases.sqlite_backend) the write transactions of a process's
threads are committed together (group commit: one fsync for all); on
PostgreSQL, or inside a transaction the caller already opened, a write
transaction is a plain ``transaction.atomic()``.
"""

from __future__ import annotations

from django.db import transaction

from leases.sqlite_backend.base import DatabaseWrapper as SQLiteWrapper


def write_transaction(fn, *, using: str | None = None):
    """``with transaction.atomic(): return fn()`` -- except that on
    Leasehold's SQLite engine ``fn`` runs in a transaction shared with other
    threads writing at the same time, unless the caller already is in one."""
    conn = transaction.get_connection(using)
    if isinstance(conn, SQLiteWrapper) and not conn.in_atomic_block:
        return conn.group_commit(fn)
    with transaction.atomic(using=using):
        return fn()
