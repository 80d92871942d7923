"""do_once: run an initialisation exactly once across all instances, the seed's
pattern on a blob whose metadata records progress (``progress=done``): whoever
gets the lease runs the function and marks the blob done under the lease,
everyone else waits until it is done (client/README.md). This is the sync
shell; what to do next is decided by ``core.Once``."""

from __future__ import annotations

from typing import Callable

from ._common import is_not_found
from .clock import SYSTEM_CLOCK, SystemClock
from .core import DONE, PROGRESS_KEY, Once
from .lease import AutoRenewLease

__all__ = ["DONE", "PROGRESS_KEY", "do_once", "read_metadata"]


def read_metadata(blob_client) -> dict | None:
    """The blob's metadata, or None if it does not exist."""
    try:
        return dict(blob_client.get_blob_properties().metadata or {})
    except Exception as exc:  # noqa: BLE001
        if is_not_found(exc):
            return None
        raise


def do_once(blob_client, fn: Callable[[], object], *, duration: int = 60, poll_interval: float = 5.0,
            key: str = PROGRESS_KEY, clock: SystemClock = SYSTEM_CLOCK, **lease_options) -> bool:
    """Run ``fn()`` once across every caller sharing ``blob_client``'s blob,
    and return only when it has been run (by anyone). Returns True if this
    call ran it. If ``fn`` raises, the error propagates, the blob is not
    marked done and another caller (or a later call) runs it instead."""
    once = Once(key=key, poll_interval=poll_interval, lease_options=lease_options)
    while not once.done(read_metadata(blob_client)):
        with AutoRenewLease(blob_client, duration, clock=clock, **once.options()) as lease:
            if lease.has_lease:
                # Read again under the lease: another runner may have finished
                # between our read and our acquire.
                metadata = read_metadata(blob_client) or {}
                if once.done(metadata):
                    return False
                fn()
                # Under the lease: refused (412) if it was lost meanwhile.
                blob_client.set_blob_metadata(once.finished(metadata), lease=lease.lease_id)
                return True
        delay = once.not_acquired(lease.server_waits)
        if delay:
            clock.sleep(delay)
    return False
