"""once_per: a job that runs once per period of wall-clock time across any
number of instances, recorded in a blob's metadata under its lease, so that a
crashed runner's period is run by another instance within the same period
(client/README.md). This is the sync shell, and the constructor and period
arithmetic both shells share; the decisions are ``core.Periods``."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from .clock import SYSTEM_CLOCK, SystemClock
from .core import LAST_RUN_KEY, Periods
from .lease import AutoRenewLease
from .once import read_metadata

log = logging.getLogger("leasehold_client")

__all__ = ["LAST_RUN_KEY", "OncePer", "OncePerJob", "once_per"]


class OncePerJob(Periods):
    """What the sync and asyncio OncePer share: the job, its blob and lease
    options, and which period it is now."""

    def __init__(self, blob_client, period: float, fn: Callable[[], object], *, duration: int = 60,
                 poll_interval: float | None = None, key: str = LAST_RUN_KEY,
                 clock: SystemClock = SYSTEM_CLOCK, **lease_options):
        super().__init__(period, key=key, poll_interval=poll_interval)
        self.blob_client = blob_client
        self.fn = fn
        self.duration = duration
        self.clock = clock
        self.lease_options = lease_options
        self.runs = 0  # times this instance ran fn
        self.running_slot: int | None = None  # the period being run, for fn to read

    def slot(self) -> int:
        return self.slot_at(self.clock.time())


class OncePer(OncePerJob):
    """Run ``fn`` at most once per ``period`` seconds of wall-clock time
    across every instance sharing the blob (and, barring crashes, at least once)."""

    def last_slot(self, metadata: dict | None = None) -> int | None:
        return self.recorded(read_metadata(self.blob_client) if metadata is None else metadata)

    def due(self) -> bool:
        return self.is_due(read_metadata(self.blob_client), self.slot())

    def tick(self) -> bool:
        """Run the job if this period's run has not happened (anywhere);
        whether this call ran it. Never waits for the lease."""
        slot = self.slot()
        if not self.due():
            return False
        with AutoRenewLease(self.blob_client, self.duration, clock=self.clock, **self.lease_options) as lease:
            if not lease.has_lease:
                return False
            metadata = read_metadata(self.blob_client) or {}
            if not self.is_due(metadata, slot):
                return False
            self.running_slot = slot
            self.fn()
            self.blob_client.set_blob_metadata(self.record(metadata, slot, self.clock.time()), lease=lease.lease_id)
            self.runs += 1
            return True

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set: at each period's start, and every
        ``poll_interval`` while the current period's run is not recorded."""
        while not stop.is_set():
            try:
                self.tick()
                pending = self.due()
            except Exception:  # noqa: BLE001  a failed run is retried at the next poll
                log.exception("once_per job failed")
                pending = True
            self.clock.wait(stop, self.pause(pending, self.clock.time()))

    __call__ = tick


def once_per(blob_client, period: float, **options) -> Callable[[Callable[[], object]], OncePer]:
    """Decorator: ``@once_per(blob_client, 3600)`` turns a function into an
    ``OncePer`` job (call it or ``.tick()`` to run it if due; ``.run(stop)`` loops)."""
    return lambda fn: OncePer(blob_client, period, fn, **options)
