"""The served application (python -m config.serve): an ASGI front that receives every request whole
on the event loop before it takes a Python thread, then runs Django's WSGI handler (config.wsgi) in
a bounded lane of threads chosen by the request's class (serving/lanes.py), so that a client
trickling a body costs memory or a temporary file, never a thread, and an export, a listing or an
upload never queues ahead of a renewal. docs/development/architecture.md ("Requests whole, in
lanes") tells the body's limits, the lanes and how a streamed response gives its thread back;
docs/decisions/0003 says why."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import time
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.http.response import HttpResponseBase

from serving import answers, bodies, front, long_reads
from serving.environ import wsgi_environ as _environ
from serving.admission import Admission
from serving.doors import Database, Door
from serving.lanes import PRINCIPAL, FairGate, Lane, OnePerRow, row_of
from serving.waiting import Waiters, serve_waiting
from leases.operations import clockwatch, ledger, retention
from leases import conf
from leases.domain import paths
from leases.domain.block_limits import MAX_LIST_BYTES
from leases.domain.refusals import Refusal


ABANDONED = "leasehold.abandoned"  # environ: the client gone or the server stopping (front.Abandoned)
API_BLOBS = paths.API_BLOBS  # the JSON API's uploads: the blob size cap, as Put Blob
UPLOAD_BYTES = 1 << 20  # a PUT with a larger body is staged in chunks (leases.storage.blob_content.CHUNK_BYTES)


class LeaseholdASGI:
    def __init__(self, app, *, doors: Sequence[Door], database: Database, long_read_helper: str | None = None):
        """``app``: Django's WSGI application; ``doors``: the doors' lean
        lease paths, which answer the usual lease request (its write made by
        the write queue with others') instead of ``app``; ``database``: its
        bounds on this process's work (both handed by config/asgi.py,
        serving/doors.py); ``long_read_helper``: the helper's module
        (serving/long_reads.py)."""
        self.app = app
        self.database = database
        self.doors = {door.name: door for door in doors}
        front.refusing_for(self.doors)  # the front's refusals, before routing, in their door's shape
        self.lean_paths = {name: door for name, door in self.doors.items() if door.usable()}
        database.serving()  # a server process: every statement and lock wait is bounded
        # Where a write waits for its row's lock, not the database's: more
        # threads, one per row at a time (serving/lanes.py).
        self.row_locks = database.locks_rows()
        own = conf.or_exit()
        more = 4 if self.row_locks else 1
        self.write_wait = own.write_wait
        self.rows = OnePerRow()
        self.lanes = {
            "lease": Lane("lease", threads=own.lease_threads or more),
            "read": Lane("read", threads=own.read_threads),
            "other": Lane("other", threads=own.other_threads or max(1, more // 2)),
            # A large Put Blob holds its thread while it stages its chunks
            # (leases/storage/blob_content.py): in a lane of its own, so that no
            # create, delete or admin form queues behind it.
            "upload": Lane("upload", threads=own.upload_threads),
        }
        self.idle_timeout, self.min_rate = own.body_idle_timeout, own.body_min_rate
        self.max_body = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + (1 << 20)
        # Lease actions and the JSON API (but its blob uploads) need a few KiB:
        # a bigger body is refused before it is read, whatever its sender may sign.
        self.small_body = own.max_small_body_bytes
        # Lean lease requests answered by their doors, their writes made together by the write queue.
        self.in_flight = 0  # requests being received or answered by this worker
        self.batching = own.lease_batch
        # exports in a low-priority helper process (serving/long_reads.py); without one, in the read lane
        self.long_reads = long_reads.LongReads(long_read_helper) if long_read_helper and long_reads.enabled() else None
        self.waiters = Waiters()  # acquires waiting for a held lease (serving/waiting.py)
        # Credentials checked before a lease request queues, failures bounded per
        # address (serving/admission.py); the lease lane shared by principals in
        # turn (serving/lanes.py), with a request queued behind each running one.
        self.admission = Admission(rate=own.unauthenticated_rate[0], burst=own.unauthenticated_rate[1],
                                   total_rate=own.unauthenticated_rate_total[0],
                                   total_burst=own.unauthenticated_rate_total[1], read_wait=own.write_wait,
                                   doors=self.doors)
        self.gate = FairGate(2 * len(self.lanes["lease"].executors))

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.in_flight += 1
            try:
                await self.http(scope, receive, answers.dated(send))
            finally:
                self.in_flight -= 1
        elif scope["type"] == "lifespan":
            await self.lifespan(receive, send)

    async def lifespan(self, receive, send):
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # Everything loaded so far (Django, the app, settings) lives
                # as long as the worker: out of the collector's sight, so a
                # full collection scans only what requests made since, not
                # every object loaded at start, on the event loop, with every
                # request of the worker waiting.
                gc.freeze()
                self.waiters.start()
                # Lease time read from the database before the first request (leases/operations/clockwatch.py).
                await asyncio.get_running_loop().run_in_executor(None, clockwatch.start)
                retention.start_pruner()  # if LEASEHOLD_RETENTION_* asks for pruning (one process prunes at a time)
                ledger.start_sealer()  # the history's ledger, sealed every few seconds (one process at a time)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.waiters.close()
                clockwatch.stop()
                retention.stop_pruner()
                ledger.stop_sealer()
                for lane in self.lanes.values():
                    lane.shutdown()
                self.database.close()
                self.admission.close()
                if self.long_reads is not None:
                    self.long_reads.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    @staticmethod
    def lane_name(scope) -> str:
        if paths.is_lease_request(scope["path"], scope["query_string"].decode("latin-1")):
            return "lease"
        if scope["method"] in ("GET", "HEAD", "OPTIONS"):
            return "read"
        if scope["method"] == "PUT" and bodies.content_length(scope) > UPLOAD_BYTES:
            return "upload"
        return "other"

    async def http(self, scope, receive, send):
        lane = self.lanes[self.lane_name(scope)]
        try:
            body, length = await self.read_body(scope, receive, lane.name)
        except bodies.BodyRefused as refused:
            front.refused_at_front(refused.status, refused.reason.decode())
            if refused.status == 413:  # in its door's shape: SDKs read the code
                status, headers, content = answers.refused(self.doors[paths.door_of(scope["path"])],
                                                           Refusal(413, "RequestBodyTooLarge"), None, close=True)
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": content})
            else:
                await answers.plain(send, refused.status, refused.reason)
            return
        except ConnectionError:  # the client went away mid-body
            return
        environ = _environ(scope, body, length)
        environ["leasehold.received_at"] = time.monotonic()
        if self.long_reads is not None and isinstance(body, bytes) and long_reads.is_long_read(scope):
            await self.long_reads.serve(environ, body, receive, send)  # not in this process (its docstring)
            return
        environ["leasehold.lane"] = lane.name
        if lane is self.lanes["lease"]:
            admitted = await self.admission.admit(scope, environ)  # before any queue
            if not isinstance(admitted, str):
                if admitted.pause:  # past the address's bound: answered after a pause (admission.py)
                    await asyncio.sleep(admitted.pause)
                await send({"type": "http.response.start", "status": admitted.status, "headers": admitted.headers})
                await send({"type": "http.response.body", "body": admitted.body})
                return
            environ[PRINCIPAL] = admitted
        taken = self.lean(scope, environ, body) if lane is self.lanes["lease"] else None
        # A request a lean path took that asks no wait (its takes_waits) is not looked at again.
        if lane is self.lanes["lease"] and isinstance(body, bytes) and (taken is None or taken[0].takes_waits) \
                and self.doors[paths.door_of(scope["path"])].asks_wait(environ, body):
            await serve_waiting(self, scope, receive, send, body, length, environ, taken, lane)
            return
        if taken is not None and self.batching:
            status, headers, content = await self.batched(environ, taken, lane)  # its body, if any, read: takes() says so
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": content})
            return
        if self.row_locks and lane.name in ("lease", "other"):
            async with self.rows.turn(row_of(scope["path"])):
                await self.run_in_lane(lane, environ, receive, send, body)
            return
        await self.run_in_lane(lane, environ, receive, send, body)

    def lean(self, scope, environ, body) -> tuple[Door, Any] | None:
        """The lean path of the request's door and what it takes of the
        request (its ``takes``), or None."""
        path = self.lean_paths.get(paths.door_of(scope["path"]))
        if path is None:
            return None
        names = path.takes(environ, body)
        return None if names is None else (path, names)

    def turn(self, lane, environ):
        """A lease request's place in the lease lane, in its principal's turn."""
        if lane.name != "lease":
            return contextlib.nullcontext()
        return self.gate.turn(environ.get(PRINCIPAL, ""))

    async def run_in_lane(self, lane, environ, receive, send, body):
        async with self.turn(lane, environ):
            await self._run_in_lane(lane, environ, receive, send, body)

    async def _run_in_lane(self, lane, environ, receive, send, body):
        index = lane.take()
        executor = lane.executors[index]
        loop = asyncio.get_running_loop()
        # A client that goes away is told to the thread serving it (a long read
        # stops: leases/admin/queries.py) and ends a stream (uvicorn's send()
        # then returns without error: an abandoned export ran to its end).
        gone = asyncio.ensure_future(long_reads.until_disconnected(receive))
        environ[ABANDONED] = abandoned = front.Abandoned()
        gone.add_done_callback(lambda _: abandoned.set())
        try:
            status, headers, content, result = await loop.run_in_executor(executor, self.call, environ)
            await send({"type": "http.response.start", "status": status, "headers": headers})
            if result is None:
                await send({"type": "http.response.body", "body": content})
                return
            try:  # streamed: one task per piece, the thread free between pieces
                while piece := await loop.run_in_executor(executor, answers.next_piece, result):
                    if gone.done():
                        return
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            finally:
                await loop.run_in_executor(executor, answers.close, result)
        finally:
            gone.cancel()
            lane.give_back(index)
            if not isinstance(body, bytes):
                body.close()  # the spooled file, deleted on close

    async def lease_answer(self, environ, taken, lane) -> tuple[int, list, bytes]:
        """One attempt of a lease request: by its door's lean path (``taken``
        by it) or in a thread of the lease lane."""
        if taken is not None and self.batching:
            return await self.batched(environ, taken, lane)
        return await self.in_lane(environ, lane)

    async def batched(self, environ, taken, lane) -> tuple[int, list, bytes]:
        """A lean lease request's answer by its door, its write made by the
        write queue; if the door declined it, by its general path, alone in
        its row's turn."""
        door, names = taken
        answer = await door.answer(environ, names, principal=environ.get(PRINCIPAL, ""),
                                   idle=lambda: self.in_flight == 1, finish=functools.partial(_finished, environ))
        if answer is not None:
            return answer
        async with self.rows.turn(row_of(environ["PATH_INFO"].encode("latin-1").decode())):
            return await self.in_lane(environ, lane)

    async def in_lane(self, environ, lane) -> tuple[int, list, bytes]:
        async with self.turn(lane, environ):
            index = lane.take()
            loop = asyncio.get_running_loop()
            try:
                status, headers, content, result = await loop.run_in_executor(lane.executors[index], self.call,
                                                                              environ)
                if result is not None:  # a streamed answer (a lease action's never is): closed in its thread
                    await loop.run_in_executor(lane.executors[index], answers.close, result)
                    raise RuntimeError("a lease action answered with a stream")
            finally:
                lane.give_back(index)
        return status, headers, content

    def body_cap(self, scope, lane: str | None = None) -> int:
        path = scope["path"]
        if (lane or self.lane_name(scope)) == "lease" or (paths.door_of(path) == "api" and not path.startswith(API_BLOBS)):
            return self.small_body
        if scope["method"] == "PUT" and paths.AZURE_PATH.match(path):
            # An XML body is parsed whole before anything is done with it:
            # no larger than the largest valid one.
            comp = paths.query_value(scope["query_string"].decode("latin-1"), "comp")  # as the door reads it
            if comp == "blocklist":
                return min(self.max_body, MAX_LIST_BYTES)
            if comp == "acl":
                return self.small_body  # five signed identifiers
        return self.max_body

    async def read_body(self, scope, receive, lane: str | None = None):
        """The whole body (bytes or a file at 0) and its length, within the
        time limits and this request's cap (serving/bodies.py); ``lane``: the
        request's lane's name, if known."""
        return await bodies.receive_whole(scope, receive, cap=self.body_cap(scope, lane), idle_timeout=self.idle_timeout,
                                          min_rate=self.min_rate)

    def call(self, environ):
        """Runs in a lane thread: the WSGI application, and the whole
        response unless it is streamed."""
        started: list = []

        def start_response(status, headers, exc_info=None):
            started[:] = [status, headers]

        if environ.get("leasehold.lane") == "upload":
            # Uploads queue behind each other in their lane by design; each
            # of an upload's writes waits for the writer on its own
            # (leases/storage/blob_content.py), so its wait counts from its turn.
            environ["leasehold.received_at"] = time.monotonic()
        with self.database.bounded(environ["leasehold.received_at"], reads_only=environ.get("leasehold.lane") == "read"):
            result = self.app(environ, start_response)
        streamed = not isinstance(result, HttpResponseBase) or result.streaming
        if streamed:
            status = int(started[0][:3])
            headers = [(answers.header_name(k), v.encode("latin-1")) for k, v in started[1]]
            return status, headers, None, result
        return (*answers.rendered(environ, int(started[0][:3]), started[1], result), None)


def _finished(environ, response) -> tuple[int, list, bytes] | None:
    """A door's answer as the front sends it (made in the thread that wrote it); None if it declined."""
    return None if response is None else answers.batched(environ, response)

