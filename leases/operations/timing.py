"""Where a request's time goes inside the server, for the benchmarks
(bench/hostile.py, bench/timing_report.py): off unless
``LEASEHOLD_TIMING_LOG`` names a path prefix, and then one JSON line per
request in ``<prefix>.<pid>`` with the moments (time.monotonic(), one clock
for every process of the machine) at which it passed each step:

    called     the ASGI app got the request (headers parsed by the front)
    body       its body was whole
    submitted  handed to its lane's thread
    thread     the lane's thread started it (the gap: lane queue, GIL)
    lock_wait  a write transaction began to wait for the writer lock
    begun      ... had the lock and SQLite's (BEGIN IMMEDIATE done)
    committing its COMMIT started (the SQL of the transaction before it)
    committed  COMMIT done, the writer lock let go
    synced     the WAL fsync done
    returned   the WSGI application returned
    resumed    the event loop took the answer back (loop busy, GIL)
    sent       the answer was handed to the transport

plus ``lane``, ``method``, ``path`` and the status. The event loop's own
lateness is logged too (``{"loop_late": seconds, "at": moment}`` whenever
a 10 ms timer fires more than 5 ms late). Off, each hook costs one test of
a module global. Not for production: the log grows with every request.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from typing import TextIO

from leases import conf

PREFIX = conf.current().timing_log
ENABLED = PREFIX is not None

_local = threading.local()
_files: dict[int, TextIO] = {}


def start(scope) -> dict | None:
    """A fresh record for a request (None when timing is off)."""
    if not ENABLED:
        return None
    return {"path": scope["path"], "method": scope["method"], "query": scope["query_string"][:60].decode("latin-1"),
            "called": time.monotonic()}


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
