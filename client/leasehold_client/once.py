"""do_once: run an initialisation exactly once across all instances.

The seed's pattern: the blob's metadata records progress (``progress=done``);
whoever gets the lease runs the function and marks the blob done, under the
lease; everyone else polls (with jittered back-off) until it is done. If the
runner crashes, its lease runs out and the next instance to get it runs the
function again (so the function should tolerate a partial earlier run).

    from azure.storage.blob import BlobServiceClient
    from leasehold_client import do_once

    service = BlobServiceClient.from_connection_string("UseDevelopmentStorage=true")
    blob = service.get_blob_client("init", deployment_id)   # one blob per deployment
    do_once(blob, load_initial_data)
"""

from __future__ import annotations

from typing import Callable

from ._common import SERVER_WAIT, backoff, is_not_found
from .clock import SYSTEM_CLOCK, SystemClock
from .lease import AutoRenewLease

PROGRESS_KEY = "progress"  # lower case: metadata names lose their case on some servers
DONE = "done"


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
    attempt = 0
    waits = False  # Leasehold holds an acquire until the runner releases: no polling then
    while True:
        metadata = read_metadata(blob_client)
        if metadata is not None and metadata.get(key) == DONE:
            return False
        options = lease_options
        if waits:  # the acquire waits on the server, polling only where it cannot
            options = {"timeout": SERVER_WAIT, "poll_interval": poll_interval, **lease_options}
        with AutoRenewLease(blob_client, duration, clock=clock, **options) as lease:
            if lease.has_lease:
                # Read again under the lease: another runner may have finished
                # between our read and our acquire.
                metadata = read_metadata(blob_client) or {}
                if metadata.get(key) == DONE:
                    return False
                fn()
                metadata[key] = DONE
                # Under the lease: refused (412) if it was lost meanwhile.
                blob_client.set_blob_metadata(metadata, lease=lease.lease_id)
                return True
        waits = lease.server_waits
        if not waits:
            clock.sleep(backoff(attempt, first=0.5, cap=poll_interval))
            attempt += 1
