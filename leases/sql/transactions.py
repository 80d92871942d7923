"""The write transaction of a service, and the seam to the SQLite engine.

On SQLite (engines.sqlite) the write transactions of a process's
threads are committed together (group commit: one fsync for all); on
PostgreSQL, or inside a transaction the caller already opened, a write
transaction is a plain ``transaction.atomic()``.
"""

from __future__ import annotations

from django.db import transaction

from engines.sqlite.base import DatabaseWrapper as SQLiteWrapper


def write_transaction(fn, *, using: str | None = None):
    """``with transaction.atomic(): return fn()`` -- except that on
    Leasehold's SQLite engine ``fn`` runs in a transaction shared with other
    threads writing at the same time, unless the caller already is in one."""
    conn = transaction.get_connection(using)
    if isinstance(conn, SQLiteWrapper) and not conn.in_atomic_block:
        return conn.group_commit(fn)
    with transaction.atomic(using=using):
        return fn()


def commits_together(using: str | None = None) -> bool:
    """Whether ``write_together`` commits its transactions together here:
    on Leasehold's SQLite engine on a file. Not on PostgreSQL, where one
    transaction for many requests would hold all their row locks at once and
    two server instances could deadlock on them."""
    conn = transaction.get_connection(using)
    return isinstance(conn, SQLiteWrapper) and not conn.in_atomic_block and conn._writer_lock_path() is not None


def write_together(fns, *, using: str | None = None) -> list[tuple[object, BaseException | None]]:
    """Run each of ``fns`` as ``write_transaction`` would, all in one write
    transaction and one commit where ``commits_together()`` (each in a
    savepoint of its own: one's failure undoes only its own writes), else
    one transaction each; every one's (result, error), in order, returned
    only after the commit that covers it."""
    if commits_together(using):
        return transaction.get_connection(using).group_commit_all(fns)
    outcomes: list[tuple[object, BaseException | None]] = []
    for fn in fns:
        try:
            with transaction.atomic(using=using):
                result = fn()
        except Exception as exc:  # noqa: BLE001  (handed back to the caller; the commit's failure too)
            outcomes.append((None, exc))
        else:
            outcomes.append((result, None))  # only once committed
    return outcomes
