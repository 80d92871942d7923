"""Where a request's time goes inside the server, for the benchmarks (bench/hostile.py,
bench/timing_report.py): off unless ``LEASEHOLD_TIMING_LOG`` names a path prefix, and then one JSON
line per request in ``<prefix>.<pid>`` with the moments at which it passed each step, and a line
whenever the event loop wakes late (``watch_loop``); off, nothing on the request path looks at timing. The marks are taken by one wrapper, ``installed(app)``, put around the served
application (config/asgi.py) only when the log is on. Not for production: the log grows with every request. docs/development/architecture.md
("Request timings") lists the steps."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from typing import TextIO

from engines import writer_wait
from leases import conf
from leases.storage import queue_intake

PREFIX = conf.current().timing_log
ENABLED = PREFIX is not None

_local = threading.local()
_files: dict[int, TextIO] = {}


KEY = "leasehold.timing"  # the record, in the scope and the environ


def installed(app):
    """``app`` (serving/asgi.py's LeaseholdASGI) with the timing wrapper
    around it, or ``app`` itself when timing is off."""
    if not ENABLED:
        return app
    app.app = _timed_wsgi(app.app)
    _timed_batches()
    return _TimedASGI(app)


class _TimedASGI:
    def __init__(self, app):
        self.app = app
        self.loop_watch: asyncio.Task | None = None

    def __getattr__(self, name):  # the wrapped application's attributes (tests, the server)
        return getattr(self.app, name)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            if scope["type"] == "lifespan" and self.loop_watch is None:
                self.loop_watch = asyncio.get_running_loop().create_task(watch_loop())
            return await self.app(scope, receive, send)
        marks = {"path": scope["path"], "method": scope["method"],
                 "query": scope["query_string"][:60].decode("latin-1"), "called": time.monotonic()}

        async def timed_receive():
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body") and "body" not in marks:
                marks["body"] = time.monotonic()
            return message

        async def timed_send(message):
            if message["type"] == "http.response.start":
                marks.update(resumed=time.monotonic(), status=message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                marks["sent"] = time.monotonic()
                write(marks)

        await self.app({**scope, KEY: marks}, timed_receive, timed_send)


def _timed_wsgi(app):
    """The WSGI application as a lane thread runs it: thread, returned, and
    the engine's marks in between (attach)."""
    def timed(environ, start_response):
        marks = environ.get(KEY)
        if marks is None:
            return app(environ, start_response)
        marks.update(thread=time.monotonic(), lane=environ.get("leasehold.lane"))
        marks.setdefault("body", environ.get("leasehold.received_at"))  # a request without a body
        attach(marks)
        try:
            return app(environ, start_response)
        finally:
            marks["returned"] = time.monotonic()
            attach(None)
    return timed


def _timed_batches() -> None:
    """The write queue's batches from the event loop (leases/storage/queue_intake.py): their steps
    marked once for all, from their checks to their commit, then copied to each of their requests."""
    served = queue_intake.Intake._served

    def timed(self, batch):
        attach({"thread": time.monotonic(), "lane": "lease-inline" if writer_wait.must_not_wait() else "lease-batch"})
        try:
            return served(self, batch)
        finally:
            shared = getattr(_local, "marks", None) or {}
            attach(None)
            shared["returned"] = time.monotonic()
            for entry in batch:
                environ = entry.item[0]
                marks = environ.get(KEY)
                if marks is not None:
                    marks.update(shared, batch=len(batch))
                    marks.setdefault("body", environ.get("leasehold.received_at"))

    queue_intake.Intake._served = timed  # type: ignore[method-assign]


def attach(marks: dict | None) -> None:
    """The lane thread works for ``marks``' request from now on (None: for none)."""
    _local.marks = marks


def mark(name: str) -> None:
    """Note the moment of ``name`` for the request this thread works for."""
    if ENABLED:
        marks = getattr(_local, "marks", None)
        if marks is not None and name not in marks:
            marks[name] = time.monotonic()


def write(record: dict) -> None:
    pid = os.getpid()
    out = _files.get(pid)
    if out is None:
        out = _files[pid] = open(f"{PREFIX}.{pid}", "a", buffering=1)  # line by line: a killed server loses nothing
    out.write(json.dumps(record) + "\n")


async def watch_loop(period: float = 0.01, late: float = 0.005) -> None:
    """Log whenever the event loop wakes a ``period`` timer ``late`` or more
    behind: time every request in this process also waited."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + period
        await asyncio.sleep(period)
        behind = loop.time() - due
        if behind >= late:
            write({"loop_late": behind, "at": time.monotonic()})


def flush() -> None:
    for out in _files.values():
        out.flush()
