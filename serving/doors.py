"""What serving is handed by the wiring (config/asgi.py), so that it schedules requests without
importing a door, the storage layer or an engine: each door's lean lease path (``LeanPath``: which
requests it takes, their calls made together, its answer to a refused request) and the writer its
batches go through (``Writer``: the write queue's batch write and signals, each thread's write
deadline, this process's bounds). docs/development/architecture.md ("serving and the doors") tells
who hands what."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from leases.domain import paths


def door_of(path: str) -> str:
    """The door a lease request's path is for: ``"api"`` or ``"azure"``."""
    return "api" if path.startswith(paths.API_LEASES) else "azure"


def _always() -> bool:
    return True


@dataclass(frozen=True, eq=False)  # each one itself: a request remembers the one that took it
class LeanPath:
    """A door's lean lease path: its usual lease request answered without
    Django's handler, its write joining the server's lease batches."""

    door: str  # which requests it looks at (``door_of``)
    # (environ, body) -> the request's names, or None: the door's general path answers it
    takes: Callable[[dict, Any], Any]
    # [(environ, names), ...] received together -> their calls (checked, to be written and answered);
    # a call's answer() is the door's response, or None: declined (nothing written), the general path's
    checked: Callable[[list[tuple[dict, Any]]], list]
    # False: a request it takes asks no wait (its takes read the body), so serving looks for none
    takes_waits: bool = True
    usable: Callable[[], bool] = _always  # whether it may answer here (asked once, at start)
    # The door's answer (an HttpResponse) to a lease request refused before it
    # queued (serving/admission.py: its credentials), and the x-ms-version of an
    # answer serving builds in the door's shape (None, "": the JSON API's shape, serving's own).
    refused: Callable[[dict, Exception], Any] | None = None
    version: str = ""


@dataclass(frozen=True)
class Writer:
    """The storage layer's one write queue as serving's batches use it, and
    the engine's bounds on this process's writes."""

    # a batch's calls written together, each settled; on PostgreSQL a call
    # whose row is held is settled with ``retry_alone`` (nothing written)
    write_together: Callable[[Sequence], None]
    retry_alone: type[Exception]  # raised by a call's answer: not written, to be sent alone
    would_wait: type[Exception]  # raised under ``at_once()``: the writer not free this moment
    at_once: Callable[[], AbstractContextManager]  # writes in it wait for nothing
    received_at: Callable[[float], AbstractContextManager]  # this thread's writes wait from then
    writes_by: Callable[[float], AbstractContextManager]  # ... and must begin by then (PostgreSQL)
    commits_together: Callable[[], bool]  # whether batches commit together here (asked once)
    # whether the database locks rows, not itself (PostgreSQL): more lease threads, one turn per row,
    # batches that wait for no row (asked once)
    row_locks: Callable[[], bool]
    server_process: Callable[[], None]  # this process serves: every statement and lock wait bounded
