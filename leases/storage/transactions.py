"""The write transaction of a service: ``write_transaction`` and ``write_together`` submit writes to
the process's write queue (write_queue.py), which makes them together with other threads' writes on
SQLite on a file and on PostgreSQL; inside a transaction the caller already opened, or where the
queue makes nothing together (an in-memory database), a write is a plain ``transaction.atomic()``.
``waits_from``: a request's bounds on the writes made for it."""

from __future__ import annotations

import contextlib

from django.db import transaction

from engines import writer_wait, postgres
from leases import conf
from leases.storage.write_queue import RetryAlone, commits_together, queue_for

__all__ = ["RetryAlone", "commits_together", "waits_from", "write_together", "write_transaction"]


@contextlib.contextmanager
def waits_from(received_at: float, *, reads_only: bool = False):
    """This thread's waits for the writer in the block counted from
    ``received_at`` (time.monotonic(), when the server had the whole
    request), so the time it queued for a thread is part of its wait; and
    on PostgreSQL (unless ``reads_only``) a transaction begun past
    LEASEHOLD_WRITE_WAIT from then refused (503 ServerBusy), as SQLite's
    writer lock refuses it."""
    with writer_wait.received_at(received_at):
        if reads_only or not postgres.in_use():
            yield
            return
        with postgres.writes_by(received_at + conf.current().write_wait):
            yield


def write_transaction(fn, *, using: str | None = None, skips_rows: bool = False):
    """``with transaction.atomic(): return fn()`` -- through the write queue,
    unless the caller already is in a transaction. ``skips_rows``: see
    WriteQueue.run_all."""
    queue = None if transaction.get_connection(using).in_atomic_block else queue_for(using)
    if queue is None:
        with transaction.atomic(using=using):
            return fn()
    return queue.run(fn, skips_rows=skips_rows)


def write_together(fns, *, using: str | None = None, wait_for_rows: bool = True, skips_rows: bool = False
                   ) -> list[tuple[object, BaseException | None]]:
    """Run each of ``fns`` as ``write_transaction`` would, submitted together
    to the write queue; every one's (result, error), in order, returned only
    after the commit that covers it. ``wait_for_rows=False``: this thread
    may not wait for a row (PostgreSQL's lease batch thread): a write the
    queue could not make with the batch is answered RetryAlone
    (write_queue.py). Where the queue makes nothing together, one
    transaction each."""
    queue = None if transaction.get_connection(using).in_atomic_block else queue_for(using)
    if queue is not None:
        return queue.run_all(fns, wait_for_rows=wait_for_rows, skips_rows=skips_rows)
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
