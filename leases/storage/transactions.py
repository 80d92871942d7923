"""The write transaction of a service, and the seam to the SQLite engine: on SQLite (engines.sqlite)
the write transactions of a process's threads are committed together (group commit: one fsync for
all); on PostgreSQL, or inside a transaction the caller already opened, a write transaction is a
plain ``transaction.atomic()``. A server's lease batch shares one transaction on PostgreSQL too,
without waiting for rows (``write_together``)."""

from __future__ import annotations

from django.db import OperationalError, transaction

from engines.sqlite.base import DatabaseWrapper as SQLiteWrapper

from leases.storage import statements


class RetryAlone(Exception):
    """A write of a shared transaction that was not made there: its row was
    locked by another transaction, or another write of the batch failed and
    the transaction was undone. Nothing of it was written; it is to be made
    in a transaction of its own."""


def write_transaction(fn, *, using: str | None = None):
    """``with transaction.atomic(): return fn()`` -- except that on
    Leasehold's SQLite engine ``fn`` runs in a transaction shared with other
    threads writing at the same time, unless the caller already is in one."""
    conn = transaction.get_connection(using)
    if isinstance(conn, SQLiteWrapper) and not conn.in_atomic_block:
        return conn.group_commit(fn)
    with transaction.atomic(using=using):
        return fn()


def commits_together(using: str | None = None, *, wait_for_rows: bool = True) -> bool:
    """Whether ``write_together`` (with this ``wait_for_rows``) commits its
    writes together here: on Leasehold's SQLite engine on a file, and on
    PostgreSQL for writes that do not wait for rows."""
    conn = transaction.get_connection(using)
    if conn.in_atomic_block:
        return False
    if conn.vendor == "postgresql":
        return not wait_for_rows
    return isinstance(conn, SQLiteWrapper) and conn._writer_lock_path() is not None


def write_together(fns, *, using: str | None = None, wait_for_rows: bool = True
                   ) -> list[tuple[object, BaseException | None]]:
    """Run each of ``fns`` as ``write_transaction`` would; every one's
    (result, error), in order, returned only after the commit that covers it.

    * On SQLite on a file: all in one write transaction and one commit, each
      in a savepoint of its own (one's failure undoes only its own writes).
    * On PostgreSQL with ``wait_for_rows=False`` (a server's lease batch,
      serving/lease_batch.py): all in one transaction and one commit, no
      row another transaction holds waited for. One transaction for many
      requests that waited for rows would hold up all of them behind one
      locked row, and hold their rows while it waits (two instances could
      deadlock). A write whose row is locked elsewhere is answered
      RetryAlone. If a write or the commit fails, the transaction is
      undone and every write is answered RetryAlone, except for a failure of
      the database itself (OperationalError: a timeout, a lost connection,
      whose commit may or may not have been made), which is every write's answer.
    * Else one transaction each."""
    if commits_together(using, wait_for_rows=wait_for_rows):
        conn = transaction.get_connection(using)
        return conn.group_commit_all(fns) if isinstance(conn, SQLiteWrapper) else _shared_without_row_waits(fns, using)
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


def _shared_without_row_waits(fns, using) -> list[tuple[object, BaseException | None]]:
    outcomes: list[tuple[object, BaseException | None]] = []
    try:
        with transaction.atomic(using=using), statements.rows_not_waited_for():
            for fn in fns:
                try:
                    outcomes.append((fn(), None))
                except statements.RowLocked:  # raised by its first statement: nothing of it written
                    outcomes.append((None, RetryAlone()))
    except OperationalError as exc:  # the database's: every write's answer
        return [(None, exc) for _ in fns]
    except Exception:  # noqa: BLE001  a write or the commit refused: nothing kept, each is made alone
        return [(None, RetryAlone()) for _ in fns]
    return outcomes
