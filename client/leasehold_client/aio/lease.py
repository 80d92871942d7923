"""AutoRenewLease for asyncio (``azure.storage.blob.aio`` clients, ``async
with``): the same decisions (``core.LeaseCore``) and checks (``LeaseHandle``)
as ``leasehold_client.lease``, with renewal and the deadline watch in tasks,
``lost`` an asyncio.Event and ``on_lost`` a plain or coroutine function."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from typing import Callable

from azure.storage.blob.aio import BlobLeaseClient

from .._common import generation_of, is_transient
from ..clock import SYSTEM_CLOCK, SystemClock
from ..core import DEADLINE_PASSED, NO_SDK_RETRY, Do, already_there, creates_container, describe, is_blob
from ..lease import LeaseHandle

log = logging.getLogger("leasehold_client")


class AutoRenewLease(LeaseHandle):
    """A lease on an aio BlobClient or ContainerClient, renewed by a task while held."""

    KIND = "aio AutoRenewLease"

    def __init__(self, client, duration: int = 60, *, timeout: float | None = 0.0,
                 renew_interval: float | None = None, safety_margin: float | None = None,
                 poll_interval: float | None = None, on_lost: Callable | None = None,
                 create: bool = True, lease_id: str | None = None, cancel: asyncio.Event | None = None,
                 clock: SystemClock = SYSTEM_CLOCK):
        super().__init__(client, duration, timeout=timeout, renew_interval=renew_interval, safety_margin=safety_margin,
                         poll_interval=poll_interval, create=create, lease_id=lease_id, on_lost=on_lost, clock=clock)
        self.cancel = cancel or asyncio.Event()
        self.lost = asyncio.Event()
        self._lease = BlobLeaseClient(client, lease_id=self.lease_id)
        self._state = contextlib.nullcontext()  # one event loop: the core's state needs no lock
        self._io = asyncio.Lock()
        self._done = asyncio.Event()
        self._tasks: list[asyncio.Future] = []

    async def acquire(self) -> bool:
        """Try to acquire (waiting up to ``timeout``); whether it was acquired."""
        acquiring = self.start_acquire(self.clock.monotonic())
        if acquiring is None:
            return True
        while True:
            seen: dict = {}
            sent = self.clock.monotonic()
            options = acquiring.options(sent, self.cancel.is_set(), time.monotonic())
            try:
                await self._lease.acquire(lease_duration=self.timing.duration, **options,
                                          raw_response_hook=lambda r: seen.update(response=r.http_response),
                                          **NO_SDK_RETRY)
            except Exception as exc:  # noqa: BLE001  classified by the core
                step = acquiring.failed(exc, self.clock.monotonic(), time.monotonic())
                if step.do is Do.CREATE:
                    await self._create_missing(exc)
                elif step.do is Do.RAISE:
                    raise
                elif step.do is Do.GIVE_UP or await self.clock.wait_async(self.cancel, step.delay):
                    return False
                continue
            response = seen.get("response")
            if self.granted(sent, generation_of(response) if response is not None else None):
                for coro in (self._keep(), self._watch()):
                    self._tasks.append(self.clock.enlist(asyncio.create_task(coro)))
            self._log_granted("acquired", sent)
            return True

    async def _create_missing(self, exc) -> None:
        if creates_container(self.client, exc):
            container = self.client._get_container_client() if is_blob(self.client) else self.client
            await _ignore_exists(container.create_container())
        if is_blob(self.client):
            await _ignore_exists(self.client.upload_blob(b"", overwrite=False))

    def _called_back(self, result: object) -> None:
        if inspect.isawaitable(result):
            self._tasks.append(asyncio.ensure_future(result))

    async def _watch(self) -> None:
        while not self._done.is_set():
            left = self.watch(self.clock.monotonic())
            if left is None:
                self._mark_lost(DEADLINE_PASSED)
                return
            await self.clock.wait_async(self._done, left)

    async def _keep(self) -> None:
        clock = self.clock
        while not await clock.wait_async(self._done, self.next_renewal - clock.monotonic()):
            while not await self._renew(clock.monotonic()):
                pass

    async def _renew(self, sent: float) -> bool:
        """One renew request; whether the renewer goes back to sleep (renewed,
        or ended) rather than trying again now."""
        try:
            async with self._io:
                if self._done.is_set():
                    return True
                await asyncio.wait_for(self._lease.renew(**NO_SDK_RETRY), self.renewal_timeout(sent))
        except Exception as exc:  # noqa: BLE001  classified by the core
            if self._done.is_set():
                return True
            transient = is_transient(exc) or isinstance(exc, asyncio.TimeoutError)
            verdict = self.renewal_failed(exc, self.clock.monotonic(), transient)
            if isinstance(verdict, str):
                self._mark_lost(verdict)
                return True
            log.info("renewal of lease %s failed, retrying: %s", self.lease_id, describe(exc))
            return await self.clock.wait_async(self._done, verdict)
        if self.renewed(sent):
            self._log_granted("renewed", sent)
        return True

    async def release(self) -> None:
        """Stop renewing and release the lease (errors logged, not raised)."""
        if not self.releasing():
            return
        self._done.set()
        async with self._io:
            try:
                await self._lease.release(**NO_SDK_RETRY)
            except Exception as exc:  # noqa: BLE001
                log.info("release of lease %s failed: %s", self.lease_id, describe(exc))
        current = asyncio.current_task()
        await asyncio.gather(*(t for t in self._tasks if t is not current), return_exceptions=True)

    async def __aenter__(self) -> "AutoRenewLease":
        await self.acquire()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.release()


async def _ignore_exists(create) -> None:
    try:
        await create
    except Exception as err:  # noqa: BLE001
        if not already_there(err):
            raise
