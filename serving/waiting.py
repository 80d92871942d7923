"""Acquires that wait for a held lease, held by a worker's event loop (the doors' part, and the
wire: leases/domain/waiting.py): a waiting request is a coroutine that holds its connection and a
little memory, no thread and no lane, woken by a release or break signalled from any process or
instance, by the known end of the blocking state, or by the end of its own wait, and then tried
again in the lease lane like any request; docs/development/architecture.md ("Waiting acquires")
tells the order of waiters and the bounds per principal."""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import threading
import time


from leases import conf
from leases.auth.sharedkey import VERIFIED
from leases.domain import clock, waiting
from leases.operations.metrics import WAITING
from leases.services import wakeups
from serving import long_reads
from serving.environ import wsgi_environ
from serving.lanes import PRINCIPAL

log = logging.getLogger("leasehold.waiting")

RECENT = 4096  # signals remembered for waiters between attempts
TIMER_MARGIN = 0.002  # seconds after a deadline before trying (the deadline itself still blocks)
LISTEN_LINGER = 30.0  # seconds a worker keeps listening to the database after its last waiter left


class _Queue:
    """The waiters of one resource in this worker, first come first."""

    __slots__ = ("waits", "timer")

    def __init__(self):
        self.waits: collections.deque = collections.deque()
        self.timer: asyncio.TimerHandle | None = None

    def wake_first(self) -> None:
        if self.waits:
            woken = self.waits[0].woken
            if woken is not None and not woken.done():
                woken.set_result("woken")


class Waiters:
    """The waiting acquires of one worker process."""

    def __init__(self, bound: int | None = None):
        self.bound = bound if bound is not None else conf.or_exit().waiters_per_principal
        self.lock = threading.Lock()  # places: reserved by the doors in lane threads
        self.places: dict[str, int] = {}
        self.queues: dict[str, _Queue] = {}
        self.seq = 0  # signals received
        self.recent: collections.deque = collections.deque(maxlen=RECENT)  # (seq, key)
        self.listening: asyncio.Task | None = None
        self.on_database = False  # listens for releases only while it holds waiters (_listen_database)
        self.last_waiter = 0.0  # monotonic time a waiter last waited or left
        self.sock: socket.socket | None = None
        self.marker: str | None = None

    # ---------------------------------------------------------- places (any thread)

    def reserve(self, principal: str) -> bool:
        with self.lock:
            taken = self.places.get(principal, 0)
            if taken >= self.bound:
                return False
            self.places[principal] = taken + 1
        WAITING.inc()
        return True

    def release(self, principal: str) -> None:
        with self.lock:
            left = self.places.get(principal, 1) - 1
            if left > 0:
                self.places[principal] = left
            else:
                self.places.pop(principal, None)
        WAITING.dec()

    def waiting(self) -> int:
        return sum(len(queue.waits) for queue in self.queues.values())

    # ---------------------------------------------------------- on the loop

    def signal(self, key: str) -> None:
        """A lease was released or broken (any process): wake its first waiter here."""
        self.seq += 1
        self.recent.append((self.seq, key))
        queue = self.queues.get(key)
        if queue is not None:
            queue.wake_first()

    def wake_all(self) -> None:
        """Signals may have been missed (nobody listened yet, or the listener
        reconnected): every first waiter tries again, one between attempts too
        (the recent signals forgotten: _signalled_since then assumes one)."""
        self.seq += 1
        self.recent.clear()
        for queue in self.queues.values():
            queue.wake_first()

    def _signalled_since(self, key: str, seq: int) -> bool:
        if seq >= self.seq:
            return False
        if not self.recent or self.recent[0][0] > seq + 1:  # forgotten: assume so
            return True
        return any(s > seq and k == key for s, k in reversed(self.recent))

    async def wait(self, wait, gone: asyncio.Future) -> str:
        """Until woken ("woken"), the wait's end ("timeout") or the client's
        going away ("gone"). ``wait`` (leases.domain.waiting.Wait) was refused
        quietly: its key and the blocking state's end are set."""
        loop = asyncio.get_running_loop()
        queue = self.queues.get(wait.key)
        if queue is None:
            queue = self.queues[wait.key] = _Queue()
        if wait.queued is None:
            queue.waits.append(wait)
            wait.queued = wait.key
        self.last_waiter = time.monotonic()
        if self.on_database and self.listening is None:
            self.listening = loop.create_task(self._listen_database())
        self._set_timer(loop, queue, wait.ends_at)  # the latest word on when the blocking state ends
        if self._signalled_since(wait.key, wait.seq):
            return "woken"
        remaining = wait.until - time.monotonic()
        if remaining <= 0:
            return "timeout"
        wait.woken = loop.create_future()
        done, _ = await asyncio.wait((wait.woken, gone), timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        if gone in done:
            return "gone"
        return "woken" if done else "timeout"

    def _set_timer(self, loop, queue: _Queue, ends_at) -> None:
        if queue.timer is not None:
            queue.timer.cancel()
            queue.timer = None
        if ends_at is not None:
            delay = max(0.0, (ends_at - clock.now()).total_seconds()) + TIMER_MARGIN
            queue.timer = loop.call_later(delay, queue.wake_first)

    def leave(self, wait, *, held: bool) -> None:
        """A waiter is answered (or its client gone). Unless its answer was
        "still held", the next waiter tries: the state changed for it too."""
        if wait.principal is not None:
            self.release(wait.principal)
            wait.principal = None
        self.last_waiter = time.monotonic()
        queue = self.queues.get(wait.queued) if wait.queued is not None else None
        if queue is None:
            return
        try:
            queue.waits.remove(wait)
        except ValueError:
            pass
        if not queue.waits:
            if queue.timer is not None:
                queue.timer.cancel()
            del self.queues[wait.queued]
        elif not held:
            queue.wake_first()

    # ---------------------------------------------------------- listening for signals

    def start(self) -> None:
        """At the worker's start: listen for other processes' signals."""
        folder = wakeups.marker_dir()
        if folder is not None:
            self._listen_datagrams(folder)
        elif wakeups.through_database():  # listened for while waiters wait
            self.on_database = True

    def close(self) -> None:
        if self.listening is not None:
            self.listening.cancel()
        if self.sock is not None:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
        if self.marker is not None:
            try:
                os.unlink(self.marker)
            except OSError:
                pass

    def _listen_datagrams(self, folder: str) -> None:
        try:
            os.makedirs(folder, exist_ok=True)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(wakeups.address(folder, os.getpid()))
            sock.setblocking(False)
            self.marker = os.path.join(folder, str(os.getpid()))
            open(self.marker, "w").close()
        except OSError as exc:  # waiters still wake at their deadlines
            log.warning("waiting acquires will not hear releases from other processes: %s", exc)
            return
        self.sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._on_datagrams)

    def _on_datagrams(self) -> None:
        sock = self.sock
        while sock is not None:
            try:
                data = sock.recv(256)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self.signal(data.decode("ascii", "replace"))

    def _wants_signals(self) -> bool:
        return bool(self.queues) or time.monotonic() - self.last_waiter < LISTEN_LINGER

    async def _listen_database(self) -> None:
        """Releases on any instance, heard while this worker holds waiters (and
        LISTEN_LINGER after the last left): idle workers do not listen, so a
        fleet does not pay for every release once per worker. Whatever was
        released while nobody listened is covered by wake_all: each waiter
        tries once more."""
        async for key in wakeups.released(self._wants_signals):
            if key is None:
                self.wake_all()
            else:
                self.signal(key)
        self.listening = None  # no await since the last look: a new waiter starts listening again


async def serve_waiting(app, scope, receive, send, body, length, environ, taken, lane) -> None:
    """An acquire that may wait (serving/waiting.py): tried; if refused
    quietly for a held lease, waited for and tried again, until it is
    granted or its wait runs out (the final, recorded attempt)."""
    wait = environ[waiting.ENVIRON] = waiting.Wait(app.waiters)
    wait.seq = app.waiters.seq
    answer = None
    # What the server found before the request queued (serving/admission.py), kept for each attempt.
    checked = {key: environ[key] for key in (PRINCIPAL, VERIFIED) if key in environ}
    try:
        answer = await app.lease_answer(environ, taken, lane)
        if wait.key is not None:
            gone = asyncio.ensure_future(long_reads.until_disconnected(receive))
            try:
                while wait.key is not None:
                    how = await app.waiters.wait(wait, gone)
                    if how == "gone":
                        answer = None
                        return
                    environ = wsgi_environ(scope, body, length)
                    environ.update({"leasehold.received_at": time.monotonic(), "leasehold.lane": lane.name,
                                    waiting.ENVIRON: wait, **checked})
                    wait.final, wait.key, wait.seq = how == "timeout", None, app.waiters.seq
                    answer = await app.lease_answer(environ, app.lean(scope, environ, body) if taken else None, lane)
            finally:
                gone.cancel()
        status, headers, content = answer
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})
    finally:
        app.waiters.leave(wait, held=answer is not None and answer[0] == 409)
