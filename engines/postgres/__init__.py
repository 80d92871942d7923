"""Leasehold's PostgreSQL engine (settings' ENGINE for a postgresql:// LEASEHOLD_DATABASE): Django's
PostgreSQL backend with every database call bounded, on the server's side and on the client's, and
connections that fail replaced, so that a hung or failed-over database costs a request a bounded
wait (503 ServerBusy), never a stuck thread; docs/development/architecture.md ("The PostgreSQL
engine") tells how. This module imports no driver: ``serving()`` and ``drop_all()`` are safe to call
on SQLite."""

from __future__ import annotations

import threading
from contextlib import contextmanager

SERVING = False  # a server process: the session timeouts apply (not to manage.py's commands)


def in_use(connection=None) -> bool:
    """Whether ``connection`` (by default: the default database's) is PostgreSQL's: Leasehold's one
    test of it (its PostgreSQL is this engine), which opens no connection."""
    if connection is None:
        from django.db import connection as default

        connection = default
    return connection.vendor == "postgresql"


def serving() -> None:
    """This process serves requests: bound every statement and lock wait (lock_timeout, statement_timeout)."""
    global SERVING
    SERVING = True


_bound = threading.local()


@contextmanager
def bounded(seconds: float):
    """This thread's waits for the server in the block end within
    ``seconds`` each (in a server process), whatever else would apply."""
    outer = getattr(_bound, "seconds", None)
    _bound.seconds = seconds
    try:
        yield
    finally:
        _bound.seconds = outer


def bound() -> float | None:
    return getattr(_bound, "seconds", None)


@contextmanager
def writes_by(deadline: float):
    """This thread serves a write that must be answered by ``deadline``
    (time.monotonic()): past it, a transaction it would begin is refused
    with 503 ServerBusy before anything is sent (the request waited its
    whole LEASEHOLD_WRITE_WAIT in a queue)."""
    _bound.deadline = deadline
    try:
        yield
    finally:
        _bound.deadline = None


def write_deadline() -> float | None:
    return getattr(_bound, "deadline", None)


def drop_all(reason: str) -> int:
    """Break every PostgreSQL connection of this process (no-op without
    any); the number broken."""
    import sys

    base = sys.modules.get(f"{__name__}.base")
    return 0 if base is None else base.drop_all(reason)
