"""Where a request's time goes inside the server, for the benchmarks (bench/hostile.py,
bench/timing_report.py): off unless ``LEASEHOLD_TIMING_LOG`` names a path prefix, and then one JSON
line per request in ``<prefix>.<pid>`` with the moments at which it passed each step, and a line
whenever the event loop wakes late (``watch_loop``); off, each hook costs one test of a module
global. Not for production: the log grows with every request. docs/development/architecture.md
("Request timings") lists the steps."""

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
