"""The write queue's intake from the event loop (write_queue.py's policy for the doors' lease requests):
a door submits a request (``submit``) and awaits its answer. The loop itself writes a request that is
all its caller is serving, if the queue is idle and the writer free this moment (``writer_wait.at_once``);
otherwise the queue's one thread per process and database takes what is queued, up to MAX_BATCH by
principal in turn, and writes it as one batch of the queue (one commit, one fsync). On PostgreSQL
that batch waits for no row: a request whose row another transaction holds is made alone by the
intake, in a thread that may wait for the row. docs/development/architecture.md ("The write queue")
tells the rules; docs/decisions/0048 why the queue is the only batcher."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from django.db import connections

from engines.writer_wait import WouldWait, at_once
from leases import conf
from leases.storage import transactions
from leases.storage.write_queue import RetryAlone, WriteQueue, queue_for

MAX_BATCH = 64
ALONE_THREADS = 4  # PostgreSQL: requests made alone at once, each waiting for its own row


class Call(Protocol):
    """A request checked by its door: its write, then its answer."""

    def writes(self) -> Callable[[], Any] | None: ...  # its write (rows read with statements.load_locked); None: none

    def written(self, result, error: BaseException | None) -> None: ...  # the write's outcome, once committed

    def answer(self) -> Any: ...  # the door's answer, once written


Checked = Callable[[list], Sequence[Call]]  # a door's: requests submitted together -> their calls, in order


class _Entry:
    __slots__ = ("door", "item", "principal", "received_at", "future", "finish")

    def __init__(self, door: Checked, item, principal: str, received_at: float, future: asyncio.Future,
                 finish: Callable[[Any], Any] = lambda answer: answer):
        self.door, self.item, self.principal, self.received_at, self.future = door, item, principal, received_at, future
        self.finish = finish


class Intake:
    """One write queue's requests from one process's event loop."""

    def __init__(self, queue: WriteQueue, *, inline: bool):
        self.queue = queue
        self.inline = inline and not queue.rows_locked  # a round trip to PostgreSQL is no lock at_once() refuses
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="write-queue")
        self.alone = ThreadPoolExecutor(ALONE_THREADS, thread_name_prefix="write-alone") if queue.rows_locked else None
        self.context = contextvars.Context()  # the loop's writes: one database connection of their own
        self.lock = threading.Lock()  # pending and scheduled: the loop adds, the queue's thread takes
        self.pending: list[_Entry] = []
        self.scheduled = False

    async def submit(self, door: Checked, item, *, principal: str, received_at: float,
                     idle: Callable[[], bool] = lambda: False, finish: Callable[[Any], Any] = lambda answer: answer):
        """``finish`` of ``item``'s answer (the ``answer()`` of its call, which
        ``door`` makes of it; both made where it was written) once the commit
        that covers its write is done. ``idle()``: whether this request is all
        the caller serves (the loop may then write it itself)."""
        loop = asyncio.get_running_loop()
        entry = _Entry(door, item, principal, received_at, loop.create_future(), finish)
        with self.lock:
            self.pending.append(entry)
            start = not self.scheduled
            self.scheduled = True
        if start:
            if self.inline and idle():
                # After this turn of the loop, whose other requests (their
                # tasks start in this turn too) then join the batch: written
                # by the loop only if still alone.
                loop.call_soon(self._flush, loop, idle)
            else:
                loop.run_in_executor(self.thread, self._drain, loop)
        return await entry.future

    def close(self, *, wait: bool = False) -> None:
        """The threads ended, each closing its database connection first."""
        _ended(self.thread, 1, wait)
        if self.alone is not None:
            _ended(self.alone, ALONE_THREADS, wait)

    def _take(self, room: int = MAX_BATCH) -> list[_Entry]:
        with self.lock:
            if len(self.pending) <= room:
                batch, self.pending = self.pending, []
                return batch
            batch = fair_share(self.pending, room, key=lambda entry: entry.principal)
            taken = {id(entry) for entry in batch}
            self.pending = [entry for entry in self.pending if id(entry) not in taken]
        return batch

    def _next(self, loop) -> None:
        """After a batch: the next one if more came (on the loop: it may write it itself)."""
        with self.lock:
            more = bool(self.pending)
            self.scheduled = more
        if more:
            loop.call_soon_threadsafe(self._flush, loop, lambda: False)

    def _flush(self, loop, idle) -> None:
        """On the loop: a lone request written at once if the writer is free
        this moment, else everything queued handed to the queue's thread."""
        batch: list[_Entry] = []
        if self.inline and len(self.pending) == 1 and idle():
            batch = self._take()
            try:
                with at_once(), _lent():
                    answers = self.context.run(self._served, batch)
            except WouldWait:  # the queue's thread will wait for the writer
                pass
            else:
                _settle_all(answers)
                self._next(loop)
                return
        loop.run_in_executor(self.thread, self._drain, loop, batch)

    def _drain(self, loop, batch: Sequence[_Entry] = ()) -> None:
        """In the queue's thread: what is queued by now (after ``batch``, if
        the loop took it first), waiting for the writer within the wait of
        its oldest request."""
        batch = [*batch, *self._take(MAX_BATCH - len(batch))]
        if batch:
            with transactions.waits_from(min(entry.received_at for entry in batch)):
                answers = self._served(batch)
            loop.call_soon_threadsafe(_settle_all, answers)  # one wake-up of the loop
        self._next(loop)

    def _served(self, batch: list[_Entry]) -> list[tuple[asyncio.Future, object]]:
        """The batch checked, written together and answered; a request the
        batch could not write is handed to a thread that makes it alone."""
        try:
            calls = _checked(batch)
            writing = [(entry, call, write) for entry, call in zip(batch, calls) if (write := call.writes()) is not None]
            outcomes = self.queue.run_all([write for _, _, write in writing], skips_rows=True,
                                          wait_for_rows=not self.queue.rows_locked) if writing else []
        except WouldWait:
            raise
        except BaseException as exc:  # noqa: BLE001  a bug: every request's answer, none hangs
            return [(entry.future, exc) for entry in batch]
        later = set()
        for (entry, call, write), (result, error) in zip(writing, outcomes):
            if isinstance(error, RetryAlone):
                later.add(id(entry))
                self._alone(entry, call, write)
            else:
                call.written(result, error)
        return [(entry.future, _answer(entry, call)) for entry, call in zip(batch, calls) if id(entry) not in later]

    def _alone(self, entry: _Entry, call: Call, write) -> None:
        """PostgreSQL: ``call``'s write made alone, in a thread that may wait for its row."""
        loop = entry.future.get_loop()

        def alone() -> None:
            with transactions.waits_from(entry.received_at):
                try:
                    (result, error), = self.queue.run_all([write], skips_rows=True)
                    call.written(result, error)
                    answer = _answer(entry, call)
                except BaseException as exc:  # noqa: BLE001
                    answer = exc
            loop.call_soon_threadsafe(_settle_all, [(entry.future, answer)])

        assert self.alone is not None
        self.alone.submit(alone)


def write_now(calls: Sequence[Call]) -> None:
    """In this thread: the calls' writes made together by the write queue
    (one transaction each where it makes nothing together), each call told
    its write's outcome after the commit that covers it."""
    writing = [(call, write) for call in calls if (write := call.writes()) is not None]
    outcomes = transactions.write_together([write for _, write in writing], skips_rows=True) if writing else []
    for (call, _), (result, error) in zip(writing, outcomes):
        call.written(result, error)


def _checked(batch: list[_Entry]) -> Sequence[Call]:
    """Each request's call, made by its door, the requests of one door checked together."""
    first = batch[0].door
    if all(entry.door is first for entry in batch):
        return first([entry.item for entry in batch])
    calls = {door: iter(door([entry.item for entry in batch if entry.door is door]))
             for door in dict.fromkeys(entry.door for entry in batch)}
    return [next(calls[entry.door]) for entry in batch]


def _ended(executor: ThreadPoolExecutor, threads: int, wait: bool) -> None:
    """``executor``'s threads (at most ``threads``) each close their connections, then end."""
    together = threading.Barrier(threads)  # one close each: none takes two while another takes none

    def close() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            together.wait(timeout=5)
        connections.close_all()

    for _ in range(threads):
        executor.submit(close)
    executor.shutdown(wait=wait)


def _answer(entry: _Entry, call: Call) -> object:
    try:
        return entry.finish(call.answer())
    except BaseException as exc:  # noqa: BLE001  a bug in one answer is that request's only
        return exc


def fair_share(entries: list, room: int, *, key) -> list:
    """Up to ``room`` of ``entries``, taken one per ``key`` in turn (each
    key's in their order), the keys in order of their first entry: one
    principal's burst fills no batch that another's renewal waits behind."""
    queues: dict = {}
    for entry in entries:
        queues.setdefault(key(entry), collections.deque()).append(entry)
    taken: list = []
    while len(taken) < room and queues:
        for name in list(queues):
            queue = queues[name]
            taken.append(queue.popleft())
            if not queue:
                del queues[name]
            if len(taken) == room:
                break
    return taken


@contextlib.contextmanager
def _lent():
    """The loop's thread lent to one synchronous write. Django refuses a
    database call from a thread whose event loop is running
    (SynchronousOnlyOperation); while this write runs the loop runs nothing
    else, so for its length the thread is marked as running none."""
    loop = asyncio.get_running_loop()
    asyncio._set_running_loop(None)
    try:
        yield
    finally:
        asyncio._set_running_loop(loop)


def _settle_all(answers: list[tuple[asyncio.Future, object]]) -> None:
    for future, answer in answers:
        if future.cancelled():
            continue
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)


async def written(door: Checked, item, *, principal: str, received_at: float,
                  idle: Callable[[], bool] = lambda: False, finish: Callable[[Any], Any] = lambda answer: answer):
    """From the event loop: ``item``'s answer through this process's intake
    for the default database (``Intake.submit``); None where writes are not
    made together there (the door's general path answers it)."""
    lookups = getattr(_lookups, "context", None)
    if lookups is None:
        lookups = _lookups.context = contextvars.Context()
    intake = lookups.run(intake_for)
    if intake is None:
        return None
    return await intake.submit(door, item, principal=principal, received_at=received_at, idle=idle, finish=finish)


_lookups = threading.local()  # a loop's look-ups of its intake: in one context, one database connection object
_intakes: dict[int, Intake] = {}
_intakes_lock = threading.Lock()


def intake_for(using: str | None = None) -> Intake | None:
    """This process's intake for database ``using``'s write queue; None
    where writes are not made together (write_queue.queue_for)."""
    queue = queue_for(using)
    if queue is None:
        return None
    intake = _intakes.get(id(queue))
    if intake is None:
        with _intakes_lock:
            intake = _intakes.setdefault(id(queue), Intake(queue, inline=conf.current().lease_inline))
    return intake


def close_all() -> None:
    """The intakes' threads ended (a server process stopping)."""
    with _intakes_lock:
        for intake in _intakes.values():
            intake.close()
        _intakes.clear()
