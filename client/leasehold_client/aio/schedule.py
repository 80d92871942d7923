"""once_per for asyncio: the same decisions (``core.Periods``) as
``leasehold_client.schedule``, with ``fn`` a plain or coroutine function."""

from __future__ import annotations

import asyncio
import logging

from ..schedule import OncePerJob
from .lease import AutoRenewLease
from .once import call, read_metadata

log = logging.getLogger("leasehold_client")


class OncePer(OncePerJob):
    """Run ``fn`` (plain or coroutine function) once per ``period`` across instances."""

    async def due(self) -> bool:
        return self.is_due(await read_metadata(self.blob_client), self.slot())

    async def tick(self) -> bool:
        slot = self.slot()
        if not await self.due():
            return False
        async with AutoRenewLease(self.blob_client, self.duration, clock=self.clock, **self.lease_options) as lease:
            if not lease.has_lease:
                return False
            metadata = await read_metadata(self.blob_client) or {}
            if not self.is_due(metadata, slot):
                return False
            self.running_slot = slot
            await call(self.fn)
            await self.blob_client.set_blob_metadata(self.record(metadata, slot, self.clock.time()),
                                                     lease=lease.lease_id)
            self.runs += 1
            return True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.tick()
                pending = await self.due()
            except Exception:  # noqa: BLE001
                log.exception("once_per job failed")
                pending = True
            await self.clock.wait_async(stop, self.pause(pending, self.clock.time()))

    __call__ = tick


def once_per(blob_client, period: float, **options):
    """Decorator: ``@once_per(blob_client, 3600)`` over a plain or async function."""
    return lambda fn: OncePer(blob_client, period, fn, **options)
