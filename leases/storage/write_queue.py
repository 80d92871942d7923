"""The process's one write queue: every write transaction of a service is submitted here (``run``, or
``run_all`` for several of one caller, such as a server's batch of lease requests), and whichever
thread finds the queue idle leads: it takes what is queued, writes it in one transaction, each member
in a savepoint of its own, commits once (one fsync on SQLite, one commit on PostgreSQL) and answers
each member its own result or error, none before that commit. So a lone write is made at once and
writes that arrive while one commits are made together, on SQLite and PostgreSQL alike. On PostgreSQL
a shared transaction waits for no row: a member whose row another transaction holds is re-run alone,
in its own caller's thread, where it may wait for the row. docs/development/architecture.md ("The
write queue") tells the rules; docs/decisions/0007, 0008 and 0024 say why writes are made together."""

from __future__ import annotations

import contextlib
import threading

from django.db import OperationalError, transaction
from django.db.transaction import TransactionManagementError

from engines.writer_wait import WouldWait, must_not_wait
from engines import postgres
from engines.sqlite.base import DatabaseWrapper as SQLiteWrapper
from leases.storage import statements


class RetryAlone(Exception):
    """A write of a shared transaction that was not made there and that the
    caller's thread may not make alone (``run_all(wait_for_rows=False)`` on
    PostgreSQL): its row was locked by another transaction, or the shared
    commit was refused. Nothing of it was written; it is to be made in a
    thread that may wait for its row."""


# PostgreSQL: how long a statement of a shared transaction may wait for a lock that another
# transaction holds (a write that does not read its rows through statements.load_locked) before
# its member is made alone instead, outside the batch.
BATCH_LOCK_WAIT_MS = 1


class _Member:
    __slots__ = ("fn", "skips_rows", "result", "error", "done", "alone")

    def __init__(self, fn, skips_rows: bool):
        self.fn = fn
        self.skips_rows = skips_rows  # reads its rows with load_locked: SKIP LOCKED in a batch
        self.result = None
        self.error: BaseException | None = None
        self.done = False
        self.alone = False  # not written with the batch: to be made in a transaction of its own


class WriteQueue:
    """The write transactions of one process's threads for one database."""

    def __init__(self, alias: str, *, rows_locked: bool):
        self.alias = alias
        self.rows_locked = rows_locked  # PostgreSQL: a shared transaction must not wait for rows
        self.cond = threading.Condition(threading.Lock())
        self.queue: list[_Member] = []
        self.busy = False

    def run(self, fn, *, skips_rows: bool = False):
        """``fn()`` written and committed (with whatever else is queued); its
        result, or its error raised."""
        (result, error), = self.run_all([fn], skips_rows=skips_rows)
        if error is not None:
            raise error
        return result

    def run_all(self, fns, *, wait_for_rows: bool = True, skips_rows: bool = False
                ) -> list[tuple[object, BaseException | None]]:
        """Each of ``fns`` written, in one batch (with whatever else is
        queued); each one's (result, error), in order, once the commit that
        covers it is done. Under ``writer_wait.at_once()``: ``WouldWait`` if another
        thread is writing or queued, or if the writer is not free this
        moment; nothing written. ``wait_for_rows=False``: a member that must
        be made alone (see ``RetryAlone``) is answered RetryAlone instead.
        ``skips_rows``: ``fns`` lock their rows with statements.load_locked
        only (the lease writes), which skips a locked row in a batch; any
        other write's lock waits in a batch on PostgreSQL are cut short
        (BATCH_LOCK_WAIT_MS) and the member made alone."""
        members = [_Member(fn, skips_rows) for fn in fns]
        with self.cond:
            if must_not_wait() and (self.busy or self.queue):
                # another thread's batch is committing, or about to: leading
                # this one would mean waiting, or taking others' writes along
                raise WouldWait("another thread of this process is writing")
            self.queue.extend(members)
            # queued together under the lock, so a leader takes all or none
            while self.busy and not members[-1].done:
                self.cond.wait()
            leader = not members[-1].done
            if leader:
                self.busy = True
                batch, self.queue = self.queue, []
        if leader:
            try:
                self._write(batch)
            finally:
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()
        for member in members:
            if member.alone:
                self._alone(member, wait_for_rows)
        return [(member.result, member.error) for member in members]

    def _alone(self, member: _Member, wait_for_rows: bool) -> None:
        """A member the batch did not write, made in a transaction of its own
        in its caller's thread (after the batch let go of the queue)."""
        member.alone = False
        if self.rows_locked and not wait_for_rows:
            member.result, member.error = None, RetryAlone()
            return
        try:
            with transaction.atomic(using=self.alias):
                member.result, member.error = member.fn(), None
        except Exception as exc:  # noqa: BLE001  (its own answer; the commit's failure too)
            member.result, member.error = None, exc

    def _write(self, batch: list[_Member]) -> None:
        """The leader's work: ``batch`` in one transaction. A lone member, or
        PostgreSQL's lease writes (no savepoints: two round trips a member),
        are written plainly; any other batch a savepoint a member."""
        try:
            with transaction.atomic(using=self.alias), self._rows_not_waited_for():
                conn = transaction.get_connection(self.alias)
                cut_short = self.rows_locked and not all(member.skips_rows for member in batch)
                if cut_short:
                    _execute(conn, f"SET LOCAL lock_timeout = '{BATCH_LOCK_WAIT_MS}ms'")
                if len(batch) == 1 or (self.rows_locked and not cut_short):
                    self._plainly(batch)
                else:
                    for member in batch:
                        _in_savepoint(conn, member)
                    if conn.needs_rollback:
                        # a savepoint could not be rolled back: the whole
                        # transaction will be, so nobody may report success
                        raise TransactionManagementError("the batch's transaction was rolled back")
                if cut_short and not conn.needs_rollback:
                    # The commit waits as any commit does: the foreign keys
                    # (deferred) are checked there, locking the rows they name.
                    _execute(conn, "SET LOCAL lock_timeout TO DEFAULT")
        except WouldWait:  # at_once(): nothing was begun; only the caller's own write was here
            raise
        except Exception as exc:
            # The database's own failure (an OperationalError: the writer busy
            # past the wait, a timeout, a lost connection, a failed fsync; the
            # commit may or may not have been made), or a lone member's, is
            # every member's answer; else nothing of the batch was kept and
            # each member is made alone, so that the one at fault fails alone.
            shared = isinstance(exc, OperationalError) or len(batch) == 1
            for member in batch:
                member.result, member.alone = None, not shared
                member.error = (member.error or exc) if shared else None
        except BaseException:
            for member in batch:
                if member.error is None:
                    member.result, member.error = None, RuntimeError("the write transaction was interrupted")
            raise
        finally:
            for member in batch:
                member.done = True

    def _plainly(self, batch: list[_Member]) -> None:
        """Each member without a savepoint: a failure undoes the transaction
        (the caller answers it), but a lock the batch did not wait for, whose
        member is made alone instead (a row skipped wrote nothing; a lock
        wait cut short ended PostgreSQL's transaction, so nothing is kept)."""
        for member in batch:
            try:
                member.result = member.fn()
            except Exception as exc:
                if not _lock_not_waited_for(exc):
                    raise
                member.alone = True
                if not isinstance(exc, statements.RowLocked):
                    transaction.set_rollback(True, using=self.alias)

    def _rows_not_waited_for(self):
        return statements.rows_not_waited_for() if self.rows_locked else contextlib.nullcontext()


def _in_savepoint(conn, member: _Member) -> None:
    """One member in a savepoint of its own, so that its failure undoes only
    its writes. The savepoint is SQL on the driver's connection: Django's
    atomic() does the same with several times the Python calls, under the
    writer lock, for every member of a batch. A savepoint that cannot be
    rolled back or released (SQLite ended the whole transaction, as on a
    full disk; PostgreSQL lost the connection) raises: the batch's
    transaction fails, and nobody is told their write succeeded."""
    raw = conn.connection
    hooks = len(conn.run_on_commit)
    with conn.wrap_database_errors:
        raw.execute("SAVEPOINT leasehold_member")
        try:
            member.result = member.fn()
        except Exception as exc:
            if _lock_not_waited_for(exc):  # nothing of it kept: made alone
                member.alone = True
            else:
                member.error = exc
            raw.execute("ROLLBACK TO SAVEPOINT leasehold_member")
            del conn.run_on_commit[hooks:]  # what it asked to run after the commit was undone with it
        raw.execute("RELEASE SAVEPOINT leasehold_member")


def _execute(conn, sql: str) -> None:
    with conn.wrap_database_errors:
        conn.connection.execute(sql)


def _lock_not_waited_for(exc: BaseException) -> bool:
    """Whether ``exc`` is a member's lock that a batch did not wait for:
    a locked row skipped (RowLocked), or a lock wait cut short on PostgreSQL
    (lock_not_available)."""
    return isinstance(exc, statements.RowLocked) or getattr(exc.__cause__, "sqlstate", None) == "55P03"


_queues: dict[tuple, WriteQueue] = {}
_queues_lock = threading.Lock()


def queue_for(using: str | None = None) -> WriteQueue | None:
    """This process's write queue for database ``using``; None where writes
    are not made together: an in-memory SQLite database, whose connections
    share no data, and databases of other engines."""
    conn = transaction.get_connection(using)
    if postgres.in_use(conn):
        rows_locked = True
    elif isinstance(conn, SQLiteWrapper) and conn._writer_lock_path() is not None:
        rows_locked = False
    else:
        return None
    settings = conn.settings_dict
    key = (conn.alias, str(settings["NAME"]), settings.get("HOST"), settings.get("PORT"))
    queue = _queues.get(key)
    if queue is None:
        with _queues_lock:
            queue = _queues.setdefault(key, WriteQueue(conn.alias, rows_locked=rows_locked))
    return queue


def commits_together(using: str | None = None) -> bool:
    """Whether writes submitted here now are made together with others'."""
    return not transaction.get_connection(using).in_atomic_block and queue_for(using) is not None
