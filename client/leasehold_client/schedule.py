"""once_per: a job that runs once per period across any number of instances.

Periods are numbered slots of wall-clock time, ``floor(time() / period)``
(so ``period=3600`` means once per clock hour, UTC-aligned). The blob's
metadata keeps the last slot that ran (``lastrun``, with ``lastrunat`` for
people); an instance runs the job only under the blob's lease and only if the
current slot is newer, then records it under the same lease. If the runner
crashes, the slot stays unrecorded, its lease runs out, and another instance
polling the blob runs the job within the same period. A crash after the job
finished but before it was recorded runs it again: at least once per period,
exactly once unless a runner dies in that instant.

    @once_per(service.get_blob_client("jobs", "nightly-report"), 24 * 3600)
    def nightly_report():
        ...

    nightly_report.run(stop_event)      # in each instance; or .tick() from your own loop
"""

from __future__ import annotations

import logging
import math
import threading
from datetime import datetime, timezone
from typing import Callable

from ._common import jittered
from .clock import SYSTEM_CLOCK, SystemClock
from .lease import AutoRenewLease
from .once import read_metadata

log = logging.getLogger("leasehold_client")

LAST_RUN_KEY = "lastrun"


class OncePer:
    """Run ``fn`` at most once per ``period`` seconds of wall-clock time
    across every instance sharing the blob (and, barring crashes, at least once)."""

    def __init__(self, blob_client, period: float, fn: Callable[[], object], *, duration: int = 60,
                 poll_interval: float | None = None, key: str = LAST_RUN_KEY,
                 clock: SystemClock = SYSTEM_CLOCK, **lease_options):
        if period <= 0:
            raise ValueError("period must be positive")
        self.blob_client = blob_client
        self.period = float(period)
        self.fn = fn
        self.duration = duration
        # How often instances look whether this period's run happened yet
        # (someone else may be running it, or may have crashed).
        self.poll_interval = poll_interval if poll_interval is not None else min(self.period / 4, 15.0)
        self.key = key
        self.clock = clock
        self.lease_options = lease_options
        self.runs = 0  # times this instance ran fn
        self.running_slot: int | None = None

    def slot(self) -> int:
        return math.floor(self.clock.time() / self.period)

    def last_slot(self, metadata: dict | None = None) -> int | None:
        metadata = read_metadata(self.blob_client) if metadata is None else metadata
        try:
            return int(metadata[self.key]) if metadata and self.key in metadata else None
        except ValueError:
            return None

    def due(self) -> bool:
        last = self.last_slot()
        return last is None or last < self.slot()

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
            last = self.last_slot(metadata)
            if last is not None and last >= slot:
                return False
            self.running_slot = slot  # the period being run, for fn to read
            self.fn()
            metadata[self.key] = str(slot)
            metadata[self.key + "at"] = datetime.fromtimestamp(self.clock.time(), timezone.utc).isoformat()
            self.blob_client.set_blob_metadata(metadata, lease=lease.lease_id)
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
            to_next = (self.slot() + 1) * self.period - self.clock.time()
            wait = min(to_next, jittered(self.poll_interval)) if pending else to_next
            # A little past the boundary, spread, so instances do not all arrive at once.
            self.clock.wait(stop, max(0.0, wait) + (0 if pending else jittered(min(1.0, self.period / 20))))

    __call__ = tick


def once_per(blob_client, period: float, **options) -> Callable[[Callable[[], object]], OncePer]:
    """Decorator: ``@once_per(blob_client, 3600)`` turns a function into an
    ``OncePer`` job (call it or ``.tick()`` to run it if due; ``.run(stop)`` loops)."""
    return lambda fn: OncePer(blob_client, period, fn, **options)
