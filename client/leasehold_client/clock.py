"""Time, injectable.

Every helper reads time and waits through a ``Clock``, never through
``time`` directly, so that tests (and simulations) can move time instead of
sleeping. ``SystemClock`` is the real one. ``ManualClock`` stands still until
``advance()`` moves it, and can move a server's clock along with it (for
Leasehold's tests: ``ManualClock(on_advance=leases.domain.clock.advance)`` together
with ``leases.domain.clock.freeze()``).

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

    def enlist(self, thread):
        """Declare a (not yet started) thread or asyncio task that will wait on this clock."""
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
        # Participants are threads or asyncio tasks.
        # participant -> (token of its current wait, time it waits until)
        self._waiting: dict[object, tuple[object, float]] = {}
        # (participant, token) of waits that an advance has ended
        self._woken: set[tuple[object, object]] = set()
        # every participant that ever waited on this clock (or was enlisted)
        self._participants: weakref.WeakSet = weakref.WeakSet()

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
        deadline = _time.monotonic() + timeout
        while self._busy(threading.current_thread()):
            if _time.monotonic() >= deadline:
                return False
            _time.sleep(self.POLL / 2)
        return True

    async def settle_async(self, timeout: float = 2.0) -> bool:
        """settle() for asyncio tasks (and threads), from a coroutine: lets
        the event loop run the tasks it waits for."""
        deadline = _time.monotonic() + timeout
        while self._busy(asyncio.current_task()):
            if _time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.POLL / 2)
        return True

    def _busy(self, me) -> list:
        with self._cond:
            self._woken = {(t, token) for t, token in self._woken
                           if _alive(t) and self._waiting.get(t, (token,))[0] is token}
            ended = {t for t, _ in self._woken}
            return [t for t in self._participants
                    if t is not me and _alive(t) and (t not in self._waiting or t in ended)]

    def enlist(self, thread):
        """Count ``thread`` (or an asyncio task) among this clock's
        participants before it starts, so that settle() waits for it from its
        first instant."""
        with self._cond:
            self._participants.add(thread)
        return thread

    def _begin_wait(self, me, timeout: float) -> float:
        """Enlist ``me`` (a thread or a task) as waiting ``timeout`` on this clock, the lock held;
        returns when its wait ends, in this clock's time."""
        until = self._now + max(0.0, timeout)
        self._waiting[me] = (object(), until)
        self._participants.add(me)
        return until

    def wait(self, event: threading.Event, timeout: float) -> bool:
        me = threading.current_thread()
        with self._cond:
            until = self._begin_wait(me, timeout)
            try:
                while not event.is_set() and self._now < until:
                    self._cond.wait(self.POLL)
            finally:
                del self._waiting[me]
        return event.is_set()

    def sleep(self, seconds: float) -> None:
        self.wait(threading.Event(), seconds)

    async def wait_async(self, event: asyncio.Event, timeout: float) -> bool:
        me = asyncio.current_task()
        with self._cond:
            until = self._begin_wait(me, timeout)
        try:
            while not event.is_set() and self._now < until:
                await asyncio.sleep(self.POLL)
        finally:
            with self._cond:
                del self._waiting[me]
        return event.is_set()

    async def sleep_async(self, seconds: float) -> None:
        await self.wait_async(asyncio.Event(), seconds)


def _alive(participant) -> bool:
    """A thread that has not ended, or an asyncio task that has not finished."""
    if isinstance(participant, threading.Thread):
        return participant.is_alive()
    return not participant.done()
