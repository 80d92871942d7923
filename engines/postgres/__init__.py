"""Leasehold's PostgreSQL engine (settings' ENGINE for a postgresql:// LEASEHOLD_DATABASE):
Django's PostgreSQL backend, with every database call bounded and connections that fail replaced.

- The URL is handed to libpq whole (several hosts, target_session_attrs, sslmode, ...); what it does
  not set is derived from ``LEASEHOLD_WRITE_WAIT`` (W): connect_timeout, TCP keepalives and
  tcp_user_timeout, and in a server process (``serving()``) lock_timeout W and statement_timeout W + 1 s.
- A wait for the server is bounded on the client's side too (base.BoundedConnection): a hung server
  (SIGSTOP, a frozen VM) answers nothing and enforces no timeout of its own. Past the bound the
  connection is closed and the call fails as "the database did not answer" (503 ServerBusy).
- A connection is checked at every request's start and end without a round trip (its socket, its
  status, whether the server is a standby) and replaced if it failed; ``drop_all()`` (leases/clockwatch
  calls it when the database stops answering) breaks every connection of the process at once, so no
  thread waits on a hung primary.
- A new connection tries the host that last accepted one first (a failover then costs one
  connect_timeout, not one per connection).

This module imports no driver: ``serving()`` and ``drop_all()`` are safe to call on SQLite.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

SERVING = False  # a server process: the session timeouts apply (not to manage.py's commands)


def serving() -> None:
    """This process serves requests: bound every statement and lock wait (module docstring)."""
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
