"""Time, injectable.

Every helper reads time and waits through a ``Clock``, never through
``time`` directly, so that tests (and simulations) can move time instead of
sleeping. ``SystemClock`` is the real one. ``ManualClock`` stands still until
``advance()`` moves it, and can move a server's clock along with it (for
Leasehold's tests: ``ManualClock(on_advance=leases.clock.advance)`` together
with ``leases.clock.freeze()``).

Two readings are used:
- ``monotonic()`` for every lease deadline: a holder's local deadline is the
  monotonic time at which its acquire or renew request was *sent*, plus the
  duration, minus a safety margin;
- ``time()`` (wall clock, seconds since the epoch) only to name the period a
  ``once_per`` job belongs to.
"""

from __future__ import annotations

import asyncio
import threading
import time as _time
import weakref
from typing import Callable


class SystemClock:
    """The real clock: time.monotonic, time.time, real waits."""

    def monotonic(self) -> float:
        return _time.monotonic()

    def time(self) -> float:
        return _time.time()

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Wait until ``event`` is set or ``timeout`` seconds pass; whether it was set."""
        return event.wait(max(0.0, timeout))

    def sleep(self, seconds: float) -> None:
        _time.sleep(max(0.0, seconds))

    async def wait_async(self, event: asyncio.Event, timeout: float) -> bool:
        try:
            await asyncio.wait_for(event.wait(), max(0.0, timeout))
            return True
        except asyncio.TimeoutError:
            return event.is_set()

    async def sleep_async(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def enlist(self, thread: threading.Thread) -> threading.Thread:
        """Declare a (not yet started) thread that will wait on this clock."""
        return thread


SYSTEM_CLOCK = SystemClock()


class ManualClock(SystemClock):
    """A clock that stands still until ``advance(seconds)`` moves it.

    Waiters (threads or asyncio tasks) wake when the time they wait for is
    reached by an ``advance`` or when their event is set. ``on_advance`` is
    called with the same seconds, to move another clock in step (a server's).
    ``settle()`` lets a test wait, best effort, until the threads that use
    this clock are all waiting on it again, so that the next advance does not
    overtake them.
    """

    # Real seconds between checks of an event that a waiter cannot be told
    # about (threading.Event and asyncio.Event have no callbacks).
    POLL = 0.01

    def __init__(self, *, start: float = 1000.0, wall_start: float | None = None,
                 on_advance: Callable[[float], None] | None = None):
        self._now = start
        self._wall_offset = (_time.time() if wall_start is None else wall_start) - start
        self._on_advance = on_advance
        self._cond = threading.Condition()
        # thread -> (token of its current wait, time it waits until)
        self._waiting: dict[threading.Thread, tuple[object, float]] = {}
        # (thread, token) of waits that an advance has ended
        self._woken: set[tuple[threading.Thread, object]] = set()
        # every thread that ever waited on this clock
        self._participants: weakref.WeakSet[threading.Thread] = weakref.WeakSet()

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go back")
        with self._cond:
            if self._on_advance is not None:
                self._on_advance(seconds)
            self._now += seconds
            self._woken |= {(t, token) for t, (token, until) in self._waiting.items() if until <= self._now}
            self._cond.notify_all()

    def settle(self, timeout: float = 2.0) -> bool:
        """Wait (real time, at most ``timeout``) until every other live thread
        that ever waited on this clock waits on it again, past the waits the
        last advances ended (or has ended); whether that happened. Threads
        busy elsewhere (in a request, say) are waited for too: time must not
        run ahead of them."""
        me = threading.current_thread()
        deadline = _time.monotonic() + timeout
        while True:
            with self._cond:
                self._woken = {(t, token) for t, token in self._woken
                               if t.is_alive() and self._waiting.get(t, (token,))[0] is token}
                ended = {t for t, _ in self._woken}
                busy = [t for t in self._participants
                        if t is not me and t.is_alive() and (t not in self._waiting or t in ended)]
            if not busy:
                return True
            if _time.monotonic() >= deadline:
                return False
            _time.sleep(self.POLL / 2)

    def enlist(self, thread: threading.Thread) -> threading.Thread:
        """Count ``thread`` among this clock's threads before it starts, so
        that settle() waits for it from its first instant."""
        with self._cond:
            self._participants.add(thread)
        return thread

    def wait(self, event: threading.Event, timeout: float) -> bool:
        me, token = threading.current_thread(), object()
        with self._cond:
            until = self._now + max(0.0, timeout)
            self._waiting[me] = (token, until)
            self._participants.add(me)
            try:
                while not event.is_set() and self._now < until:
                    self._cond.wait(self.POLL)
            finally:
                del self._waiting[me]
        return event.is_set()

    def sleep(self, seconds: float) -> None:
        self.wait(threading.Event(), seconds)

    async def wait_async(self, event: asyncio.Event, timeout: float) -> bool:
        until = self._now + max(0.0, timeout)
        while not event.is_set() and self._now < until:
            await asyncio.sleep(self.POLL)
        return event.is_set()

    async def sleep_async(self, seconds: float) -> None:
        await self.wait_async(asyncio.Event(), seconds)
