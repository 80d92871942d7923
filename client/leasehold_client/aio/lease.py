"""AutoRenewLease for asyncio (azure.storage.blob.aio clients).

    async with AutoRenewLease(blob_client, duration=15) as lease:
        if lease.has_lease:
            lease.check()
            ...

The same semantics as ``leasehold_client.AutoRenewLease`` (see there):
non-blocking by default, ``timeout=`` to wait, renewal and deadline watch in
background tasks, ``lost`` is an asyncio.Event, ``on_lost`` may be a plain
function or a coroutine function, release on exit.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import uuid
from typing import Callable

from azure.storage.blob.aio import BlobLeaseClient

from .._common import (
    INFINITE,
    LeaseLostError,
    Timing,
    ServerWait,
    backoff,
    generation_of,
    is_conflict,
    is_not_found,
    is_transient,
    jittered,
    retry_after,
)
from ..clock import SYSTEM_CLOCK, SystemClock
from ..lease import MAX_CREATES, NO_SDK_RETRY, _describe, _name

log = logging.getLogger("leasehold_client")


class AutoRenewLease:
    """A lease on an aio BlobClient or ContainerClient, renewed by a task while held."""

    def __init__(self, client, duration: int = 60, *, timeout: float | None = 0.0,
                 renew_interval: float | None = None, safety_margin: float | None = None,
                 poll_interval: float | None = None, on_lost: Callable | None = None,
                 create: bool = True, lease_id: str | None = None, cancel: asyncio.Event | None = None,
                 clock: SystemClock = SYSTEM_CLOCK):
        self.client = client
        self.timing = Timing.for_duration(duration, renew_interval, safety_margin)
        self.timeout = timeout
        self.poll_interval = float(poll_interval) if poll_interval is not None else (
            5.0 if duration == INFINITE else max(1.0, min(5.0, duration / 4)))
        self.on_lost = on_lost
        self.create = create
        self.clock = clock
        self.cancel = cancel or asyncio.Event()
        self.lease_id = lease_id or str(uuid.uuid4())
        self.generation: int | None = None
        self.has_lease = False
        self.renewals = 0
        self.acquired_at: float | None = None
        self.lost = asyncio.Event()
        self.lost_reason: str | None = None
        self.lost_at: float | None = None
        self._lease = BlobLeaseClient(client, lease_id=self.lease_id)
        self._server_wait = ServerWait()
        self._io = asyncio.Lock()
        self._done = asyncio.Event()
        self._released = False
        self._deadline = float("-inf")
        self._tasks: list[asyncio.Task] = []

    async def acquire(self) -> bool:
        if self._released:
            raise RuntimeError("this lease was released: use a new AutoRenewLease to acquire again")
        if self.has_lease:
            return True
        clock = self.clock
        until = None if self.timeout is None else clock.monotonic() + self.timeout
        attempt = creates = 0
        server_wait = self._server_wait  # Leasehold holds the request until the lease is free: no polling
        while True:
            seen: dict = {}
            sent = clock.monotonic()
            left = float("inf") if until is None else until - sent
            waiting = server_wait.options(0.0 if self.cancel.is_set() else left, time.monotonic())
            try:
                await self._lease.acquire(lease_duration=self.timing.duration, **waiting,
                                          raw_response_hook=lambda r: seen.update(response=r.http_response),
                                          **NO_SDK_RETRY)
            except Exception as exc:  # noqa: BLE001  classified below
                if is_not_found(exc) and self.create and creates < MAX_CREATES:
                    creates += 1
                    await self._create_missing(exc)
                    continue
                if is_conflict(exc) and server_wait.refused(exc, time.monotonic()):
                    delay = 0.0
                elif is_conflict(exc):
                    after = retry_after(exc)
                    # Retry-After (when the server says when it ends), never later
                    # than the next poll, plus a little jitter so waiters do not
                    # all arrive in the same instant.
                    delay = backoff(attempt, first=0.5, cap=self.poll_interval) if after is None else \
                        min(after, self.poll_interval) + jittered(min(1.0, self.poll_interval / 4))
                elif is_transient(exc):
                    delay = backoff(attempt, first=0.2, cap=self.poll_interval)
                else:
                    raise
                left = float("inf") if until is None else until - clock.monotonic()
                if left <= 0:
                    if is_conflict(exc):
                        return False
                    raise
                if await clock.wait_async(self.cancel, min(delay, left)):
                    return False
                attempt += 1
                continue
            self._granted(sent, seen.get("response"))
            return True

    async def _create_missing(self, exc) -> None:
        is_blob = hasattr(self.client, "blob_name")
        if not is_blob or getattr(exc, "error_code", None) == "ContainerNotFound":
            container = self.client._get_container_client() if is_blob else self.client
            await _ignore_exists(container.create_container())
        if is_blob:
            await _ignore_exists(self.client.upload_blob(b"", overwrite=False))

    def _granted(self, sent: float, response) -> None:
        self.has_lease = True
        self.acquired_at = sent
        self._deadline = self.timing.deadline(sent)
        self.generation = generation_of(response) if response is not None else None
        log.debug("lease %s acquired (sent at %.3f, local deadline %.3f)", self.lease_id, sent, self._deadline)
        if self.timing.duration != INFINITE:
            for coro in (self._keep(), self._watch()):
                self._tasks.append(self.clock.enlist(asyncio.create_task(coro)))

    @property
    def server_waits(self) -> bool:
        """Whether the server was found to hold an acquire until the lease is
        free (Leasehold): waiting for it then costs no polling."""
        return self._server_wait.worth_asking

    @property
    def held(self) -> bool:
        try:
            self.check()
            return True
        except LeaseLostError:
            return False

    def remaining(self) -> float:
        return self._deadline - self.clock.monotonic() if self.has_lease else 0.0

    def check(self) -> None:
        """Raise LeaseLostError unless the lease is still safely held."""
        if not self.has_lease:
            raise LeaseLostError("the lease was not acquired")
        if self._released:
            raise LeaseLostError("the lease was released")
        if not self.lost.is_set() and self.clock.monotonic() >= self._deadline:
            self._mark_lost("the local deadline passed without a renewal")
        if self.lost.is_set():
            raise LeaseLostError(self.lost_reason)

    def _mark_lost(self, reason: str) -> None:
        if self.lost.is_set() or self._released:
            return
        self.lost_reason = reason
        self.lost_at = self.clock.monotonic()
        self.lost.set()
        self._done.set()
        log.warning("lease %s on %s lost: %s", self.lease_id, _name(self.client), reason)
        if self.on_lost is not None:
            try:
                result = self.on_lost(self)
                if inspect.isawaitable(result):
                    self._tasks.append(asyncio.ensure_future(result))
            except Exception:  # noqa: BLE001
                log.exception("on_lost callback failed")

    async def _watch(self) -> None:
        while not self._done.is_set():
            left = self._deadline - self.clock.monotonic()
            if left <= 0:
                self._mark_lost("the local deadline passed without a renewal")
                return
            await self.clock.wait_async(self._done, left)

    async def _keep(self) -> None:
        clock, timing = self.clock, self.timing
        assert self.acquired_at is not None  # started by _granted, which set it
        next_at = self.acquired_at + timing.renew_interval
        while not await clock.wait_async(self._done, next_at - clock.monotonic()):
            attempt = 0
            while True:
                sent = clock.monotonic()
                limit = max(1.0, min(timing.renew_interval, self._deadline - sent))
                try:
                    async with self._io:
                        if self._done.is_set():
                            return
                        await asyncio.wait_for(self._lease.renew(**NO_SDK_RETRY), limit)
                except Exception as exc:  # noqa: BLE001  classified below
                    if self._done.is_set():
                        return
                    transient = is_transient(exc) or isinstance(exc, asyncio.TimeoutError)
                    if transient and clock.monotonic() < self._deadline:
                        log.info("renewal of lease %s failed, retrying: %s", self.lease_id, _describe(exc))
                        left = self._deadline - clock.monotonic()
                        if await clock.wait_async(self._done, min(
                                backoff(attempt, first=0.25, cap=timing.renew_interval / 4), max(0.0, left))):
                            return
                        attempt += 1
                        continue
                    if transient:
                        self._mark_lost(f"the local deadline passed without a renewal (last error: {_describe(exc)})")
                    else:
                        self._mark_lost(f"renewal refused: {_describe(exc)}")
                    return
                if self.lost.is_set():
                    return
                self._deadline = max(self._deadline, timing.deadline(sent))
                self.renewals += 1
                log.debug("lease %s renewed (sent at %.3f, local deadline %.3f)", self.lease_id, sent, self._deadline)
                next_at = sent + timing.renew_interval
                break

    async def release(self) -> None:
        """Stop renewing and release the lease (errors logged, not raised)."""
        if not self.has_lease or self._released:
            return
        self._released = True
        self._done.set()
        async with self._io:
            try:
                await self._lease.release(**NO_SDK_RETRY)
            except Exception as exc:  # noqa: BLE001
                log.info("release of lease %s failed: %s", self.lease_id, _describe(exc))
        current = asyncio.current_task()
        await asyncio.gather(*(t for t in self._tasks if t is not current), return_exceptions=True)

    async def __aenter__(self) -> "AutoRenewLease":
        await self.acquire()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.release()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "held" if self.has_lease and not self._released else "not held"
        return f"<aio AutoRenewLease {_name(self.client)} {state} id={self.lease_id} generation={self.generation}>"


async def _ignore_exists(create) -> None:
    try:
        await create
    except Exception as err:  # noqa: BLE001
        if getattr(err, "status_code", None) not in (409, 412):
            raise
