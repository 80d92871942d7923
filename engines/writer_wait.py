"""The one "the writer was not free in time" error of both engines, how a
caller recognises it, the "commit outcome unknown" error, and each thread's deadline for its writes (counted
from the request's arrival). Leasehold's doors answer it 503 ServerBusy
with Retry-After (leases/storage/write_refusals.py)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

from django.db.utils import OperationalError

RETRY_AFTER_SECONDS = 1

_request = threading.local()


@contextmanager
def received_at(moment: float):
    """Count this thread's write waits from ``moment`` (time.monotonic(),
    when the server had the whole request), so the time a request queued
    for a thread is part of its wait: the answer comes within the wait of
    its arrival, not of its turn (serving/asgi.py)."""
    _request.received_at = moment
    try:
        yield
    finally:
        _request.received_at = None


@contextmanager
def at_once():
    """This thread's write transactions in the block must not wait: if the
    writer lock (ours, or SQLite's own) is not free this moment, or another
    thread of the process is committing, the transaction is not begun and
    ``WouldWait`` is raised instead. For the event loop thread, which may
    write a lease batch itself but must never block on a lock
    (leases/storage/queue_intake.py)."""
    outer = must_not_wait()
    _request.at_once = True
    try:
        yield
    finally:
        _request.at_once = outer


def must_not_wait() -> bool:
    return getattr(_request, "at_once", False)


def time_left(wait: float) -> float:
    """Seconds this thread may still wait for the writer."""
    start = getattr(_request, "received_at", None)
    return wait if start is None else wait - (time.monotonic() - start)


class WriterBusy(OperationalError):
    """The writer lock (our flock, or SQLite's own lock held by another
    program) was not free within LEASEHOLD_WRITE_WAIT seconds. Nothing was
    written."""


class WouldWait(WriterBusy):
    """Under ``at_once()``: the writer was not free this moment. Nothing was
    begun, nothing written; the caller is expected to try again where it may
    wait (a 503 ServerBusy if it ever reached a client)."""


class CommitOutcomeUnknown(OperationalError):
    """The commit was sent, but whether it is durable is not known: the
    database committed locally yet its wait for a synchronous standby was
    cut short (PostgreSQL only warns), or the connection was lost while the
    commit was under way. The write may or may not survive a failover; the
    doors answer 500 OperationTimedOut (docs/decisions/0045)."""


def is_writer_busy(exc: BaseException) -> bool:
    """Whether ``exc`` means the database's writer was busy past the wait:
    ours, or SQLite's own "database is locked" when its busy timeout ran
    out (a write outside our lock, e.g. an autocommit UPDATE)."""
    if isinstance(exc, WriterBusy):
        return True
    if isinstance(exc, OperationalError):
        text = str(exc)
        return text.startswith("database is locked") or text.startswith("database is busy")
    return False
