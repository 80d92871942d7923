"""once_per for asyncio: see leasehold_client.schedule."""

from __future__ import annotations

import asyncio
import logging
import math
from datetime import datetime, timezone
from typing import Callable

from .._common import jittered
from ..clock import SYSTEM_CLOCK, SystemClock
from ..schedule import LAST_RUN_KEY
from .lease import AutoRenewLease
from .once import call, read_metadata

log = logging.getLogger("leasehold_client")


class OncePer:
    """Run ``fn`` (plain or coroutine function) once per ``period`` across instances."""

    def __init__(self, blob_client, period: float, fn: Callable, *, duration: int = 60,
                 poll_interval: float | None = None, key: str = LAST_RUN_KEY,
                 clock: SystemClock = SYSTEM_CLOCK, **lease_options):
        if period <= 0:
            raise ValueError("period must be positive")
        self.blob_client = blob_client
        self.period = float(period)
        self.fn = fn
        self.duration = duration
        self.poll_interval = poll_interval if poll_interval is not None else min(self.period / 4, 15.0)
        self.key = key
        self.clock = clock
        self.lease_options = lease_options
        self.runs = 0
        self.running_slot: int | None = None

    def slot(self) -> int:
        return math.floor(self.clock.time() / self.period)

    def _last(self, metadata: dict | None) -> int | None:
        try:
            return int(metadata[self.key]) if metadata and self.key in metadata else None
        except ValueError:
            return None

    async def due(self) -> bool:
        last = self._last(await read_metadata(self.blob_client))
        return last is None or last < self.slot()

    async def tick(self) -> bool:
        slot = self.slot()
        if not await self.due():
            return False
        async with AutoRenewLease(self.blob_client, self.duration, clock=self.clock, **self.lease_options) as lease:
            if not lease.has_lease:
                return False
            metadata = await read_metadata(self.blob_client) or {}
            last = self._last(metadata)
            if last is not None and last >= slot:
                return False
            self.running_slot = slot  # the period being run, for fn to read
            await call(self.fn)
            metadata[self.key] = str(slot)
            metadata[self.key + "at"] = datetime.fromtimestamp(self.clock.time(), timezone.utc).isoformat()
            await self.blob_client.set_blob_metadata(metadata, lease=lease.lease_id)
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
            to_next = (self.slot() + 1) * self.period - self.clock.time()
            wait = min(to_next, jittered(self.poll_interval)) if pending else to_next
            await self.clock.wait_async(stop, max(0.0, wait) + (0 if pending else jittered(min(1.0, self.period / 20))))

    __call__ = tick


def once_per(blob_client, period: float, **options):
    """Decorator: ``@once_per(blob_client, 3600)`` over a plain or async function."""
    return lambda fn: OncePer(blob_client, period, fn, **options)
