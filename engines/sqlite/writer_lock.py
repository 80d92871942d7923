"""The writer lock: an exclusive ``flock`` on ``<db>.writer-lock`` taken before ``BEGIN IMMEDIATE``,
so that writers in several processes queue in the kernel and are handed the lock promptly and fairly
instead of starving each other in SQLite's busy handler, with the wait bounded by ``write_wait``
(OPTIONS, LEASEHOLD_WRITE_WAIT) counted from the request's arrival, past which the writer gets
``WriterBusy`` (503 ServerBusy); docs/development/architecture.md ("The writer lock") tells how."""

from __future__ import annotations

import fcntl
import os
import threading
from contextlib import contextmanager


def writer_lock_path(name: str) -> str | None:
    """The writer lock's file beside database ``name``; None for an
    in-memory database (its connections share nothing to lock)."""
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return name + ".writer-lock"


def open_lock_file(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


@contextmanager
def writer_lock(path: str):
    """The writer lock, for a thread that has no DatabaseWrapper."""
    fd = open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class FlockWaiter:
    """Takes the writer lock on descriptor ``fd`` for its connection within
    a time bound. A helper thread blocks in flock() (woken by the kernel as
    soon as the holder lets go); the connection's thread waits for it at most
    its timeout. If it gave up, the helper lets go of the lock as soon as it
    gets it. The descriptor is closed by whoever is last: ``close()`` while
    the helper is still blocked leaves that to the helper (closing it under
    a blocked flock would let the number be reused by another file)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.cond = threading.Condition(threading.Lock())
        self.waiting = 0  # threads in acquire()
        self.wanted = False  # the helper is, or is about to be, blocked in flock
        self.granted = False  # the helper got the lock for a waiter
        self.closing = False
        self.thread: threading.Thread | None = None

    def acquire(self, timeout: float) -> bool:
        with self.cond:
            # Free and nobody's request pending on this descriptor: take it
            # now. (With the helper blocked, a second flock on the same open
            # file would succeed as a conversion and the helper's LOCK_UN
            # would then drop it under us, hence only here, under cond.)
            if not self.wanted:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    pass
            self.waiting += 1
            try:
                if not self.wanted:
                    self.wanted = True
                    if self.thread is None:
                        self.thread = threading.Thread(target=self._run, name="writer-lock-wait", daemon=True)
                        self.thread.start()
                    self.cond.notify_all()
                if self.cond.wait_for(lambda: self.granted, timeout):
                    self.granted = False
                    return True
                return False
            finally:
                self.waiting -= 1

    def try_acquire(self) -> bool:
        """The lock now if it is free and nobody's request is pending on this
        descriptor; never waits."""
        with self.cond:
            if self.wanted:
                return False
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False

    def close(self) -> None:
        """Close the descriptor now, or when the blocked helper returns."""
        with self.cond:
            self.closing = True
            if self.wanted:
                return
            self.cond.notify_all()
        os.close(self.fd)

    def _run(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.wanted or self.closing)
                if self.closing and not self.wanted:
                    return
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX)
                failed = False
            except OSError:
                failed = True
            with self.cond:
                self.wanted = False
                if self.closing:
                    os.close(self.fd)  # releases the lock too
                    return
                if self.waiting and not failed:
                    self.granted = True
                    self.cond.notify_all()
                elif not failed:
                    fcntl.flock(self.fd, fcntl.LOCK_UN)  # its waiter gave up
