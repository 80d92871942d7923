"""The threads that serve requests (serving/asgi.py). A lane is a fixed set of single-thread
executors for one kind of request (lease actions, reads, other writes, uploads), so that no kind
queues behind another. On PostgreSQL a write waits for its row's lock, not the database's, and a
lane's thread waiting on a row that another session keeps locked (an operator's open transaction, a
stuck client) waits up to LEASEHOLD_WRITE_WAIT: requests for that row then queue here
(``OnePerRow``), on the event loop, holding no thread; the row takes one thread of its lane, and
requests for other rows get the others. They would have waited for each other on the row lock
anyway."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from concurrent.futures import ThreadPoolExecutor

from leases.domain import paths

API_LEASES = paths.API_LEASES
PRINCIPAL = "leasehold.principal"  # environ: who sent a lease request (serving/admission.py)


class Lane:
    """A fixed set of single-thread executors; a request takes the least
    loaded one and keeps it until its response is sent."""

    def __init__(self, name: str, *, threads: int):
        self.name = name
        self.executors = [ThreadPoolExecutor(1, thread_name_prefix=f"{name}-{i}") for i in range(threads)]
        self.load = [0] * threads

    def take(self) -> int:
        index = min(range(len(self.load)), key=self.load.__getitem__)
        self.load[index] += 1
        return index

    def give_back(self, index: int) -> None:
        self.load[index] -= 1

    def shutdown(self) -> None:
        for executor in self.executors:
            executor.shutdown(wait=False, cancel_futures=True)


def row_of(path: str) -> str:
    """The resource a write names: the Azure path, or the JSON API's lease
    path without its action (/api/v1/leases/renew/a/c/b -> /a/c/b)."""
    if path.startswith(API_LEASES):
        return "/" + path[len(API_LEASES):].partition("/")[2]
    return path


class OnePerRow:
    def __init__(self):
        self.rows: dict[str, list] = {}  # a row's path -> [its asyncio.Lock, requests using it]

    @contextlib.asynccontextmanager
    async def turn(self, row: str):
        """Wait for the row's turn (its earlier requests answered)."""
        entry = self.rows.get(row)
        if entry is None:
            entry = self.rows[row] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self.rows[row]


class FairGate:
    """The lease lane shared by principals in turn (round robin), not first
    come first served: at most ``slots`` requests are in the lane's threads
    (running or queued there) at once; when one leaves, the next principal
    in turn gets its place, each principal's requests in their order. So a
    principal's burst delays another principal's request by at most one
    request of each principal then waiting, plus the ``slots`` already in
    the threads."""

    def __init__(self, slots: int):
        self.slots = slots
        self.busy = 0
        self.queues: dict[str, collections.deque] = {}  # principal -> waiting futures; order = turn

    @contextlib.asynccontextmanager
    async def turn(self, principal: str):
        if self.busy < self.slots and not self.queues:
            self.busy += 1
        else:
            future = asyncio.get_running_loop().create_future()
            self.queues.setdefault(principal, collections.deque()).append(future)
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():  # given a place, then cancelled
                    self._leave()
                else:
                    self._forget(principal, future)
                raise
        try:
            yield
        finally:
            self._leave()

    def waiting(self) -> int:
        return sum(len(queue) for queue in self.queues.values())

    def _forget(self, principal: str, future) -> None:
        queue = self.queues.get(principal)
        if queue is not None:
            with contextlib.suppress(ValueError):
                queue.remove(future)
            if not queue:
                del self.queues[principal]

    def _leave(self) -> None:
        self.busy -= 1
        while self.queues and self.busy < self.slots:
            principal = next(iter(self.queues))
            queue = self.queues.pop(principal)
            future = queue.popleft()
            if queue:  # its next request goes to the back of the turn
                self.queues[principal] = queue
            if future.done():
                continue
            self.busy += 1
            future.set_result(None)

