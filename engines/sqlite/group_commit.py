"""Group commit: ``group_commit(fn)`` runs the write transactions of one process's threads that
arrive together in one database transaction, each in a savepoint of its own, committed with one
fsync, so that on a slow disk writers do not queue behind one fsync each; every caller gets its own
result or exception, and none returns before the commit that covers it."""

from __future__ import annotations

import threading

from django.db import transaction
from django.db.transaction import TransactionManagementError

from ..busy import WouldWait, must_not_wait


class _Pending:
    __slots__ = ("fn", "result", "error", "done")

    def __init__(self, fn):
        self.fn = fn
        self.result = None
        self.error: BaseException | None = None
        self.done = False


class GroupCommit:
    """Write transactions of one process's threads, committed together."""

    def __init__(self, alias: str):
        self.alias = alias
        self.cond = threading.Condition(threading.Lock())
        self.queue: list[_Pending] = []
        self.busy = False

    def run(self, fn):
        (result, error), = self.run_all([fn])
        if error is not None:
            raise error
        return result

    def run_all(self, fns) -> list[tuple[object, BaseException | None]]:
        """``run`` for several transactions of one caller (the lease requests a
        worker received together, serving/lease_batch.py): they join the group
        together and are committed together; each one's (result, error), in
        order, once the commit that covers them is done."""
        ops = [_Pending(fn) for fn in fns]
        with self.cond:
            if must_not_wait() and (self.busy or self.queue):
                # another thread's group is committing, or about to: leading
                # this one would mean waiting, or taking others' writes along
                raise WouldWait("another thread of this process is writing")
            self.queue.extend(ops)
            # queued together under the lock, so a leader takes all or none
            while self.busy and not ops[-1].done:
                self.cond.wait()
            leader = not ops[-1].done
            if leader:
                self.busy = True
                batch, self.queue = self.queue, []
        if leader:
            try:
                self._execute(batch)
            finally:
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()
        return [(op.result, op.error) for op in ops]

    def _execute(self, batch: list[_Pending]) -> None:
        try:
            with transaction.atomic(using=self.alias):
                if len(batch) == 1:
                    batch[0].result = batch[0].fn()
                else:
                    conn = transaction.get_connection(self.alias)
                    for op in batch:
                        _run_in_savepoint(conn, op)
                    if conn.needs_rollback:
                        # a savepoint could not be rolled back: the whole
                        # transaction will be, so nobody may report success
                        raise TransactionManagementError("the group's transaction was rolled back")
        except WouldWait:  # at_once(): nothing was begun; only the caller's own writes were here
            raise
        except BaseException as exc:  # BEGIN or COMMIT failed (or the only transaction did)
            shared = exc if isinstance(exc, Exception) else RuntimeError("the write transaction was interrupted")
            for op in batch:
                if op.error is None:
                    op.error, op.result = shared, None
            if shared is not exc:
                raise
        finally:
            for op in batch:
                op.done = True


def _run_in_savepoint(conn, op: _Pending) -> None:
    """One member in a savepoint of its own, so that its failure undoes only
    its writes. The savepoint is SQL on the driver's connection: Django's
    atomic() does the same with several times the Python calls, under the
    writer lock, for every member of the group. A savepoint that cannot be
    rolled back or released (SQLite ended the whole transaction, as on a
    full disk) raises: the group's transaction fails, and nobody is told
    their write succeeded."""
    raw = conn.connection
    with conn.wrap_database_errors:
        raw.execute("SAVEPOINT leasehold_member")
        try:
            op.result = op.fn()
        except Exception as exc:
            op.error = exc
            raw.execute("ROLLBACK TO leasehold_member")
        raw.execute("RELEASE leasehold_member")


_groups: dict[str, GroupCommit] = {}
_groups_lock = threading.Lock()
