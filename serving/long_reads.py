"""Long reads (the history's CSV and NDJSON exports) run in a helper process of the worker's, at a
lower CPU priority, streaming to the client through the worker's event loop, because an export's
Python in the worker's own process takes the GIL from the lease thread every time that thread lets
it go (docs/decisions/0010); ``LEASEHOLD_LONG_READ_PROCESS=0`` runs them in the worker's ``read``
lane instead. docs/development/architecture.md ("The export helper") tells how the helper is
started, fed and bounded."""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading

from leases import conf
from leases.domain import paths

# The long reads, by path (GET only): the JSON API's export and the admin's.
LONG_READ_PATHS = (paths.API_EVENTS_EXPORT, paths.API_TENURES_EXPORT, "/admin/leases/leaseevent/export.csv")
START_SECONDS = 60  # a helper not ready by then (Django set-up on a saturated machine) is a 503
HEADER = struct.Struct(">I")
log = logging.getLogger("leasehold.long_reads")
NOT_PICKLED = ("wsgi.input", "wsgi.errors")  # rebuilt by the helper


def is_long_read(scope) -> bool:
    return scope["method"] in ("GET", "HEAD") and scope["path"] in LONG_READ_PATHS


def enabled() -> bool:
    return conf.or_exit().long_read_process


def _frame(data: bytes) -> bytes:
    return HEADER.pack(len(data)) + data


class HelperUnavailable(Exception):
    pass


# ------------------------------------------------------------------ the worker's side


def _spawn(helper: str, path: str, env: dict) -> subprocess.Popen:
    """The helper process (``python -m helper``), serving on the socket
    ``path`` (in a thread: see LongReads._helper)."""
    return subprocess.Popen([sys.executable, "-m", helper, path], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env)


class LongReads:
    """A worker's helper process and the long reads it relays. ``helper``:
    the module the helper runs as, whose ``main`` calls ``serve``."""

    def __init__(self, helper: str):
        self.helper = helper
        settings = conf.or_exit()
        self.nice, self.slots = settings.long_read_nice, settings.long_reads
        # An export that finds every slot taken waits as long as a writer
        # waits for the database, then is answered 503: no endless queue.
        self.slot_wait = settings.write_wait
        self._slots: asyncio.Semaphore | None = None
        self._starting = asyncio.Lock()
        self.proc: subprocess.Popen | None = None
        self.dir: str | None = None
        self.path: str | None = None

    async def _helper(self) -> str:
        """The socket of a running helper, started if need be."""
        async with self._starting:
            if self.proc is not None and self.proc.poll() is None and self.path is not None:
                return self.path
            self.close()
            self.dir = tempfile.mkdtemp(prefix="leasehold-long-reads-")  # 0700: only this user connects
            self.path = os.path.join(self.dir, "socket")
            env = dict(os.environ, LEASEHOLD_SQLITE_CHECKPOINT_INTERVAL="0",
                       LEASEHOLD_LONG_READ_PROCESS="0", LEASEHOLD_LONG_READ_NICE=str(self.nice))
            # Started, and waited for, in a thread: spawning from the event
            # loop (uvloop's spawn returns once the child has exec'd) holds
            # the loop, and every request of this worker, for longer than a
            # renewal's budget under load (docs/decisions/0010).
            loop = asyncio.get_running_loop()
            self.proc = proc = await loop.run_in_executor(None, _spawn, self.helper, self.path, env)
            assert proc.stdout is not None  # spawned with a pipe
            try:
                line = await asyncio.wait_for(loop.run_in_executor(None, proc.stdout.readline), START_SECONDS)
            except TimeoutError:  # close() below kills it, which ends that readline too
                line = b""
            if line != b"ready\n":
                self.close()
                raise HelperUnavailable("the long-read process did not start")
            return self.path

    async def serve(self, environ: dict, body: bytes, receive, send) -> None:
        """Run one long read in the helper and relay its answer."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.slots)
        try:
            await asyncio.wait_for(self._slots.acquire(), self.slot_wait)
        except TimeoutError:
            await _busy(send)
            return
        try:
            try:
                path = await self._helper()
                reader, writer = await asyncio.open_unix_connection(path)
            except (HelperUnavailable, OSError):
                await _busy(send)
                return
            gone = asyncio.ensure_future(until_disconnected(receive))
            try:
                request = {k: v for k, v in environ.items() if k not in NOT_PICKLED}
                writer.write(_frame(pickle.dumps((request, body), protocol=pickle.HIGHEST_PROTOCOL)))
                try:
                    head = await _read_frame(reader)
                except (asyncio.IncompleteReadError, OSError):
                    await _busy(send)  # the helper died before it answered
                    return
                status, headers = pickle.loads(head)
                await send({"type": "http.response.start", "status": status, "headers": headers})
                try:
                    while piece := await _read_frame(reader):
                        if gone.done():
                            return  # the client went away: closing the connection ends the helper's work
                        await send({"type": "http.response.body", "body": piece, "more_body": True})
                except (asyncio.IncompleteReadError, OSError):
                    # The helper died (or was stopped with the server): return
                    # with the response unfinished, so the front closes the
                    # connection and the client sees it cut short.
                    log.warning("a long read was cut short: its helper process ended (%s %s)",
                                environ["REQUEST_METHOD"], environ["PATH_INFO"])
                    return
                await send({"type": "http.response.body", "body": b""})
            finally:
                gone.cancel()
                writer.close()
        finally:
            self._slots.release()

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # it would exit anyway once its stdin closes (reaped when its Popen goes)
        self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


async def until_disconnected(receive) -> None:
    """Returns once the client has gone away (the body was received already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    return await reader.readexactly(size) if size else b""


async def _busy(send) -> None:
    text = b"The server is busy: retry the export."
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"retry-after", b"1"),
                            (b"content-length", str(len(text)).encode())]})
    await send({"type": "http.response.body", "body": text})


# ------------------------------------------------------------------ the helper's side


def _serve_one(app, conn: socket.socket) -> None:
    """One long read: the request from ``conn``, its answer back."""
    import io

    from serving.answers import close as _close, next_piece as _next_piece

    result = None
    try:
        with conn, conn.makefile("rb") as incoming:
            (size,) = HEADER.unpack(incoming.read(HEADER.size))
            environ, body = pickle.loads(incoming.read(size))
            environ["wsgi.input"] = io.BytesIO(body)
            environ["wsgi.errors"] = sys.stderr
            status, headers, content, result = app.call(environ)
            conn.sendall(_frame(pickle.dumps((status, headers))))
            if result is None:
                if content:
                    conn.sendall(_frame(content))
            else:
                while piece := _next_piece(result):
                    conn.sendall(_frame(piece))
            conn.sendall(_frame(b""))  # complete
    except (BrokenPipeError, ConnectionResetError):
        pass  # the worker's client went away
    finally:
        if result is not None:
            _close(result)
        from django.db import connections

        connections.close_all()  # this thread's connections: no read snapshot outlives its export


def lower_priority() -> None:
    """The helper's first step, before Django is set up: the lease workers get the cores first."""
    os.nice(conf.or_exit().long_read_nice)


def serve(path: str, app) -> None:
    """The helper's loop: each long read from the socket ``path`` run by
    ``app`` (the workers' LeaseholdASGI) in a thread of its own."""

    def orphaned():  # the worker is gone: so is its helper
        sys.stdin.buffer.read()
        os.kill(os.getpid(), signal.SIGTERM)  # the default action: the process ends, threads and all

    threading.Thread(target=orphaned, daemon=True).start()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    os.dup2(2, 1)  # nobody reads the pipe after "ready": anything printed goes to the log
    try:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=_serve_one, args=(app, conn), daemon=True, name="long-read").start()
    except KeyboardInterrupt:  # Ctrl-C on the server's terminal reaches its whole process group
        pass
