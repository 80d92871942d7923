"""Helpers for the client-helper tests (leasehold_client); the fixtures
(``backend``, ``leasehold``, ``azurite``, ``mclock``) are in conftest.py.

Two backends: the live in-process Leasehold server, whose clock is frozen and
moved together with the client's ManualClock (no sleeping), and Azurite
started from bench/node_modules (``make azurite``), where time is real and
waits are kept short."""

from __future__ import annotations

import sys
import threading
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from azure.core.exceptions import ServiceRequestError
from azure.storage.blob import BlobClient, BlobServiceClient

from leasehold_client.clock import ManualClock, SystemClock

REPO = Path(__file__).resolve().parents[2]
AZURITE_MAIN = REPO / "bench" / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"


@dataclass
class Backend:
    """A server and the clock the client helpers run on against it.

    advance(seconds): on Leasehold moves the frozen server clock and the
    client's ManualClock together, then lets the woken helper threads act;
    on Azurite sleeps (real time: keep it short)."""

    name: str
    connection_string: str
    clock: SystemClock
    advance: Callable[[float], None]

    @property
    def fake_time(self) -> bool:
        return isinstance(self.clock, ManualClock)

    def service(self, **kwargs) -> BlobServiceClient:
        return BlobServiceClient.from_connection_string(self.connection_string, retry_total=0, **kwargs)

    def blob(self, container: str, blob: str, **kwargs) -> BlobClient:
        """A client of its own (as another instance would have)."""
        return BlobClient.from_connection_string(self.connection_string, container, blob, retry_total=0, **kwargs)

    def start(self, target, *args) -> threading.Thread:
        """A thread (an instance of a service), counted by the clock from its start."""
        thread = self.clock.enlist(threading.Thread(target=target, args=args, daemon=True))
        thread.start()
        return thread

    def names(self) -> tuple[str, str]:
        return f"c{uuid.uuid4().hex[:12]}", "locks/job.lock"

    def run_until(self, done: Callable[[], bool], *, step: float = 0.5, limit: float = 120.0) -> float:
        """Advance time by ``step`` until ``done()``; the time it took (fails past ``limit``)."""
        start = self.clock.monotonic()
        while not done():
            if self.clock.monotonic() - start > limit:
                # Where every thread stands: which helper did not get there.
                stacks = "\n".join("".join(traceback.format_stack(f)[-6:]) for f in sys._current_frames().values())
                raise AssertionError(f"not done within {limit} s of {self.name} time\n{stacks}")
            self.advance(step)
        return self.clock.monotonic() - start


class Partition:
    """A network partition for one client: while ``blocked``, every request
    fails before it leaves (the holder's process lives, its renewals and
    everything else stop reaching the server). Give it to the client as
    ``raw_request_hook=`` (the storage SDK takes no extra policies)."""

    def __init__(self):
        self.blocked = False
        self.refused = 0

    def __call__(self, request):
        if self.blocked:
            self.refused += 1
            raise ServiceRequestError("partitioned by the test")
