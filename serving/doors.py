"""What the wiring (config/asgi.py) hands serving, so that it receives, admits and sends requests
without importing a door, the storage layer or an engine: each door's lean lease path (``Door``: which
requests it takes and its answer to one, written by the write queue with others'; its answer to a
request serving refused) and the database's bounds on this process's work (``Database``). Serving
decides that a request is refused and with what (leases/domain/refusals.py); the door renders it.
docs/development/architecture.md ("serving and the doors") tells who hands what."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from leases.domain.refusals import Refusal


class Door(Protocol):
    """A door's lean lease path: its usual lease request answered without
    Django's handler, its write made by the write queue with others'."""

    @property
    def name(self) -> str: ...  # which requests it looks at (``door_of``)

    @property
    def takes_waits(self) -> bool: ...  # False: a request it takes asks no wait, serving looks for none

    def usable(self) -> bool: ...  # whether it may answer here (asked once, at start)

    def asks_wait(self, environ: dict, body: bytes) -> bool: ...  # whether a lease request asks to wait

    def takes(self, environ: dict, body) -> Any | None: ...  # the request's names; None: the general path's

    # From the event loop: ``finish`` of the answer (an HttpResponse, or None: declined, nothing written),
    # both made where it was written, once its write is committed; None: the general path's (declined, or
    # this database makes no writes together).
    def answer(self, environ: dict, names, *, principal: str, idle: Callable[[], bool],
               finish: Callable[[Any], Any]) -> Awaitable[Any]: ...

    # The door's whole answer to a request serving refused (``refused``: what with), in its protocol's shape:
    # status, headers, body. ``environ``: the request's, or None before it was routed (the front's limits).
    def refusal(self, refused: Refusal, environ: dict | None) -> tuple[int, list[tuple[str, str]], bytes]: ...


def _always() -> bool:
    return True


@dataclass(frozen=True, eq=False)  # each one itself: a request remembers the one that took it
class LeanDoor:
    """A Door made of a door's functions (the wiring's)."""

    name: str
    takes: Callable[[dict, Any], Any]
    answer: Callable[..., Awaitable[Any]]
    refusal: Callable[[Refusal, dict | None], tuple[int, list[tuple[str, str]], bytes]]
    asks_wait: Callable[[dict, bytes], bool]
    takes_waits: bool = True
    usable: Callable[[], bool] = _always


class Database(Protocol):
    """The database's bounds on this process's work."""

    def serving(self) -> None: ...  # this process serves: every statement and lock wait bounded

    # whether the database locks rows, not itself: more threads, one turn per row (asked once)
    def locks_rows(self) -> bool: ...

    # this thread's waits for the writer counted from ``received_at`` (time.monotonic()); a write
    # (``reads_only`` False) begun past the write wait from then refused
    def bounded(self, received_at: float, *, reads_only: bool) -> AbstractContextManager: ...

    def close(self) -> None: ...  # this process stops serving: the write queue's threads end
