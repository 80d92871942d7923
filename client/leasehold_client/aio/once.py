"""do_once for asyncio: see leasehold_client.once. ``fn`` may be a plain
function or a coroutine function."""

from __future__ import annotations

import inspect
from typing import Callable

from .._common import SERVER_WAIT, backoff, is_not_found
from ..clock import SYSTEM_CLOCK, SystemClock
from ..once import DONE, PROGRESS_KEY
from .lease import AutoRenewLease


async def read_metadata(blob_client) -> dict | None:
    try:
        return dict((await blob_client.get_blob_properties()).metadata or {})
    except Exception as exc:  # noqa: BLE001
        if is_not_found(exc):
            return None
        raise


async def call(fn):
    result = fn()
    return await result if inspect.isawaitable(result) else result


async def do_once(blob_client, fn: Callable, *, duration: int = 60, poll_interval: float = 5.0,
                  key: str = PROGRESS_KEY, clock: SystemClock = SYSTEM_CLOCK, **lease_options) -> bool:
    """Run ``fn()`` once across every caller sharing the blob; True if this call ran it."""
    attempt = 0
    waits = False  # Leasehold holds an acquire until the runner releases: no polling then
    while True:
        metadata = await read_metadata(blob_client)
        if metadata is not None and metadata.get(key) == DONE:
            return False
        options = lease_options
        if waits:  # the acquire waits on the server, polling only where it cannot
            options = {"timeout": SERVER_WAIT, "poll_interval": poll_interval, **lease_options}
        async with AutoRenewLease(blob_client, duration, clock=clock, **options) as lease:
            if lease.has_lease:
                metadata = await read_metadata(blob_client) or {}
                if metadata.get(key) == DONE:
                    return False
                await call(fn)
                metadata[key] = DONE
                await blob_client.set_blob_metadata(metadata, lease=lease.lease_id)
                return True
        waits = lease.server_waits
        if not waits:
            await clock.sleep_async(backoff(attempt, first=0.5, cap=poll_interval))
            attempt += 1
