"""Lease requests that a worker receives together are submitted to the process's write queue
together (leases/storage/write_queue.py, through the writer the wiring hands serving: serving/doors.py),
which commits them together with whatever else is queued (one transaction, a savepoint each, one
commit and one fsync); when the batch is one request and nothing else is in flight, the event loop
submits it itself under ``at_once()`` (the queue writes it only if idle and the writer free this
moment, else refuses it and the lane's thread submits it), because a lone request's latency is mostly
the hand-over to a thread (that submission is the one place the event loop's thread reaches the
database: ``_lent``). This module only schedules: who submits (the loop or the lane's thread),
what is submitted together, fairly between principals; what commits together and when is the
queue's. docs/development/architecture.md ("Lease batches") tells the bounds and PostgreSQL's case;
docs/decisions/0007, 0008 and 0024 say why."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading

from serving.lanes import PRINCIPAL, fair_share
from serving.doors import Writer

MAX_BATCH = 64


class LeaseBatcher:
    """The lean lease requests of one worker process, answered in batches.

    ``check([(environ, names), ...])`` -> the calls (the checks);
    ``writer.write_together(calls)`` settles each; ``answer(call)``
    -> the response; ``finish(environ, response)`` -> what the front sends.
    ``executor`` is the lease lane's thread, for batches that must wait for
    the writer; ``inline=False`` sends every batch there. ``in_flight()``
    -> the requests the worker is serving: the loop writes a batch itself
    only when it is the one request in flight. ``writes_by(received_at)``:
    a context in which the lane's thread writes a batch whose oldest request
    arrived then (the write wait's bound on PostgreSQL)."""

    def __init__(self, executor, check, answer, finish, *, writer: Writer, in_flight, inline: bool = True,
                 writes_by=lambda received_at: contextlib.nullcontext()):
        self.executor = executor
        self.in_flight = in_flight
        self.check, self.write, self.answer, self.finish = check, writer.write_together, answer, finish
        self.writer = writer
        self.inline = inline
        self.writes_by = writes_by
        self.context = contextvars.copy_context()
        self.lock = threading.Lock()  # pending and scheduled: the loop adds, the lane thread takes
        self.pending: list[tuple[dict, tuple, asyncio.Future]] = []
        self.scheduled = False

    async def submit(self, environ: dict, names: tuple):
        """The answer (status, headers, content) once its batch committed."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self.lock:
            self.pending.append((environ, names, future))
            start = not self.scheduled
            self.scheduled = True
        if start:
            if self.inline and self.in_flight() == 1:
                # After this turn of the loop, whose other requests (their
                # tasks start in this turn too) then join the batch: written
                # by the loop only if still alone.
                loop.call_soon(self._flush, loop)
            else:
                loop.run_in_executor(self.executor, self._run_batch, loop)
        return await future

    def _take(self, room: int = MAX_BATCH) -> list:
        """Up to ``room`` queued requests; if more wait, taken by principal
        in turn (round robin), so that one principal's burst fills no batch
        that another's renewal waits behind."""
        with self.lock:
            if len(self.pending) <= room:
                batch, self.pending = self.pending, []
                return batch
            batch = fair_share(self.pending, room, key=lambda entry: entry[0].get(PRINCIPAL, ""))
            taken = {id(entry) for entry in batch}
            self.pending = [entry for entry in self.pending if id(entry) not in taken]
        return batch

    def _next(self, loop) -> None:
        """After a batch: the next one if more came (on the loop: it may
        write it itself)."""
        with self.lock:
            more = bool(self.pending)
            self.scheduled = more
        if more:
            loop.call_soon_threadsafe(self._flush, loop)

    def _flush(self, loop) -> None:
        """On the loop: write what is queued if nothing else is in flight
        and the writer is free this moment, else hand it to the lane's
        thread."""
        batch = []
        if self.inline and len(self.pending) == 1 and self.in_flight() == 1:
            batch = self._take()
            answers = self._written_at_once(batch)
            if answers is not None:
                _settle_all(answers)
                self._next(loop)
                return
        loop.run_in_executor(self.executor, self._run_batch, loop, batch)

    def _written_at_once(self, batch) -> list | None:
        """On the loop: the batch checked, written and answered if the writer
        is free this moment; None (nothing written) if not."""
        try:
            with self.writer.at_once(), _lent():
                calls = self.context.run(self._checked_and_written, batch)
        except self.writer.would_wait:  # the lane's thread will wait for the writer
            return None
        return self._answers(batch, calls)

    def _run_batch(self, loop, batch=()) -> None:
        """In the lane's thread: what is queued by now (after ``batch``, if
        the loop took it first), waiting for the writer within the wait of
        its oldest request."""
        batch = [*batch, *self._take(MAX_BATCH - len(batch))]
        if not batch:  # cannot happen (a batch is scheduled only for pending requests); never hang
            self._next(loop)
            return
        oldest = min(environ["leasehold.received_at"] for environ, _, _ in batch)
        with self.writer.received_at(oldest), self.writes_by(oldest):
            calls = self._checked_and_written(batch)
        loop.call_soon_threadsafe(_settle_all, self._answers(batch, calls))  # one wake-up of the loop
        self._next(loop)

    def _checked_and_written(self, batch) -> list | BaseException:
        """The batch's calls, checked and written; or, if that failed by a
        bug, the exception (every waiting request gets it, none hangs)."""
        try:
            calls = self.check([(environ, names) for environ, names, _ in batch])
            self.write(calls)
            return calls
        except self.writer.would_wait:
            raise
        except BaseException as exc:  # noqa: BLE001
            return exc

    def _answers(self, batch, calls) -> list[tuple[asyncio.Future, object]]:
        if isinstance(calls, BaseException):
            return [(future, calls) for _, _, future in batch]
        answers = []
        for call, (_, _, future) in zip(calls, batch):
            try:
                answers.append((future, self.finish(call.environ, self.answer(call))))
            except BaseException as exc:  # noqa: BLE001  a bug in one answer is that request's only
                answers.append((future, exc))
        return answers


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
