"""What the wiring (config/asgi.py) hands serving, so that it receives, admits and sends requests
without importing a door, the storage layer or an engine: each door's lean lease path (``Door``: which
requests it takes and its answer to one, written by the write queue with others'; its answer to a
request refused before it) and the database's bounds on this process's work (``Database``).
docs/development/architecture.md ("serving and the doors") tells who hands what."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from leases.domain import paths


def door_of(path: str) -> str:
    """The door a lease request's path is for: ``"api"`` or ``"azure"``."""
    return "api" if path.startswith(paths.API_LEASES) else "azure"


class Door(Protocol):
    """A door's lean lease path: its usual lease request answered without
    Django's handler, its write made by the write queue with others'."""

    @property
    def name(self) -> str: ...  # which requests it looks at (``door_of``)

    @property
    def takes_waits(self) -> bool: ...  # False: a request it takes asks no wait, serving looks for none

    @property
    def version(self) -> str: ...  # the x-ms-version of an answer in the door's shape ("": none)

    def usable(self) -> bool: ...  # whether it may answer here (asked once, at start)

    def takes(self, environ: dict, body) -> Any | None: ...  # the request's names; None: the general path's

    # From the event loop: ``finish`` of the answer (an HttpResponse, or None: declined, nothing written),
    # both made where it was written, once its write is committed; None: the general path's (declined, or
    # this database makes no writes together).
    def answer(self, environ: dict, names, *, principal: str, idle: Callable[[], bool],
               finish: Callable[[Any], Any]) -> Awaitable[Any]: ...

    # The door's answer (an HttpResponse) to a lease request refused before it queued (serving/admission.py:
    # its credentials); None: serving's own plain answer.
    def refused(self, environ: dict, error: Exception) -> Any | None: ...


def _always() -> bool:
    return True


@dataclass(frozen=True, eq=False)  # each one itself: a request remembers the one that took it
class LeanDoor:
    """A Door made of a door's functions (the wiring's)."""

    name: str
    takes: Callable[[dict, Any], Any]
    answer: Callable[..., Awaitable[Any]]
    takes_waits: bool = True
    usable: Callable[[], bool] = _always
    refused: Callable[[dict, Exception], Any] = lambda environ, error: None
    version: str = ""


class Database(Protocol):
    """The database's bounds on this process's work."""

    def serving(self) -> None: ...  # this process serves: every statement and lock wait bounded

    # whether the database locks rows, not itself: more threads, one turn per row (asked once)
    def locks_rows(self) -> bool: ...

    # this thread's waits for the writer counted from ``received_at`` (time.monotonic()); a write
    # (``reads_only`` False) begun past the write wait from then refused
    def bounded(self, received_at: float, *, reads_only: bool) -> AbstractContextManager: ...

    def close(self) -> None: ...  # this process stops serving: the write queue's threads end
