"""Lease requests that a worker receives together are committed together.

A lease holder's renewal is a tiny write whose cost, at synchronous=FULL, is
mostly the commit: taking the writer lock, BEGIN, COMMIT and the fsync of the
WAL, each once per request. Here the event loop queues the lease requests of
the lean path (leases/azure/fastpath.py) as they arrive whole, and the lease
lane's thread answers everything queued at once: one write transaction, each
request in a savepoint of its own, one commit and one fsync
(fastpath.answer_together). Nobody is answered before the commit that covers
their request, so every acknowledged lease is on disk as before; a request
that arrives while a batch runs goes into the next one, so under load
batches grow by themselves and with one client nothing waits for company.

A batch is one task on the lane's thread, and the next batch is queued
behind whatever else the lane has to run (the JSON API's lease requests,
lease requests of an unusual shape): a stream of batches cannot starve them.
A batch holds at most ``MAX_BATCH`` requests, so that the writer lock is
held for a bounded time (about a millisecond of work per request).

The write wait (LEASEHOLD_WRITE_WAIT) counts from the arrival of the batch's
oldest request: the batch gives up, every request answered 503 ServerBusy,
within the wait of that arrival.

On PostgreSQL, or an in-memory SQLite database, each request still has its
own transaction (storage.transactions.commits_together says why).
"""

from __future__ import annotations

import asyncio
import threading
import time

from leases import timing
from leases.sqlite_backend.busy import received_at

MAX_BATCH = 64


class LeaseBatcher:
    """The lean lease requests of one worker process, answered in batches on
    one lane thread (``executor``) by ``answer_together(requests)`` ->
    responses, each as the lane's ``finish(environ, response)`` renders it."""

    def __init__(self, executor, answer_together, finish):
        self.executor = executor
        self.answer_together = answer_together
        self.finish = finish
        self.lock = threading.Lock()  # pending and scheduled: the loop adds, the lane thread takes
        self.pending: list[tuple[dict, tuple, asyncio.Future]] = []
        self.scheduled = False

    async def submit(self, environ: dict, names: tuple):
        """The answer (status, headers, content) once its batch committed."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self.lock:
            self.pending.append((environ, names, future))
            schedule = not self.scheduled
            self.scheduled = True
        if schedule:
            loop.run_in_executor(self.executor, self.run_batch, loop)
        return await future

    def run_batch(self, loop) -> None:
        """In the lane's thread: answer what is queued (up to MAX_BATCH), then
        queue the next batch behind the lane's other work if more came."""
        with self.lock:
            batch, self.pending = self.pending[:MAX_BATCH], self.pending[MAX_BATCH:]
        shared = _timed_batch() if timing.ENABLED else None  # bench only
        try:
            with received_at(min(environ["leasehold.received_at"] for environ, _, _ in batch)):
                responses = self.answer_together([(environ, names) for environ, names, _ in batch])
            if shared is not None:
                _timed_batch_done(shared, [environ for environ, _, _ in batch])
            answers = [(future, self.finish(environ, response))
                       for (environ, _, future), response in zip(batch, responses)]
        except BaseException as exc:  # a bug: every waiting request gets it, none hangs
            answers = [(future, exc) for _, _, future in batch]
        loop.call_soon_threadsafe(_settle_all, answers)  # one wake-up of the loop for the batch
        with self.lock:
            more = bool(self.pending)
            self.scheduled = more
        if more:
            loop.call_soon_threadsafe(loop.run_in_executor, self.executor, self.run_batch, loop)


def _timed_batch() -> dict:
    """Bench only (leases/timing.py): the batch's steps, marked once for all."""
    shared = {"thread": time.monotonic()}
    timing.attach(shared)
    return shared


def _timed_batch_done(shared: dict, environs: list[dict]) -> None:
    timing.attach(None)
    shared["returned"] = time.monotonic()
    for environ in environs:
        marks = environ.get("leasehold.timing")
        if marks is not None:
            marks.update(shared, batch=len(environs))


def _settle_all(answers: list[tuple[asyncio.Future, object]]) -> None:
    for future, answer in answers:
        if future.cancelled():
            continue
        if isinstance(answer, BaseException):
            future.set_exception(answer)
        else:
            future.set_result(answer)
