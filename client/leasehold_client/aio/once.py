"""do_once for asyncio: the same decisions (``core.Once``) as
``leasehold_client.once``, with ``fn`` a plain or coroutine function."""

from __future__ import annotations

import inspect
from typing import Callable

from .._common import is_not_found
from ..clock import SYSTEM_CLOCK, SystemClock
from ..core import PROGRESS_KEY, Once
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
    once = Once(key=key, poll_interval=poll_interval, lease_options=lease_options)
    while not once.done(await read_metadata(blob_client)):
        async with AutoRenewLease(blob_client, duration, clock=clock, **once.options()) as lease:
            if lease.has_lease:
                metadata = await read_metadata(blob_client) or {}
                if once.done(metadata):
                    return False
                await call(fn)
                await blob_client.set_blob_metadata(once.finished(metadata), lease=lease.lease_id)
                return True
        delay = once.not_acquired(lease.server_waits)
        if delay:
            await clock.sleep_async(delay)
    return False
