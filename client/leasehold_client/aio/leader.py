"""Leader election for asyncio: see leasehold_client.leader.

    election = LeaderElection(blob_client, duration=15)
    async for term in election.terms():
        while not term.lost.is_set():
            await lead(fencing_token=term.generation)
"""

from __future__ import annotations

import asyncio
import inspect
from typing import AsyncIterator, Callable

from ..clock import SYSTEM_CLOCK, SystemClock
from ..leader import Leadership
from .lease import AutoRenewLease


class LeaderElection(Leadership):
    def __init__(self, client, *, duration: int = 15, poll_interval: float | None = None,
                 clock: SystemClock = SYSTEM_CLOCK, **lease_options):
        self.client = client
        self.duration = duration
        self.poll_interval = poll_interval
        self.clock = clock
        self.lease_options = lease_options
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self.term: AutoRenewLease | None = None
        self.transitions = 0

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    async def campaign(self) -> AutoRenewLease | None:
        if self._stop.is_set():
            return None
        self._wake.clear()
        term = AutoRenewLease(self.client, self.duration, timeout=None, cancel=self._stop,
                              poll_interval=self.poll_interval, clock=self.clock,
                              on_lost=lambda _: self._wake.set(), **self.lease_options)
        if not await term.acquire():
            return None
        if self._stop.is_set():
            await term.release()
            return None
        self._elected(term)
        return term

    async def terms(self) -> AsyncIterator[AutoRenewLease]:
        while True:
            term = await self.campaign()
            if term is None:
                return
            try:
                yield term
            finally:
                await term.release()
                self._deposed()

    async def run(self, on_elected: Callable, on_deposed: Callable | None = None) -> None:
        """on_elected(term) / on_deposed(term), plain or coroutine functions; until stop()."""
        async for term in self.terms():
            try:
                await _call(on_elected, term)
                while not self._wake.is_set():
                    await self.clock.wait_async(self._wake, 3600)
            finally:
                if on_deposed is not None:
                    await _call(on_deposed, term)


async def _call(fn, *args):
    result = fn(*args)
    if inspect.isawaitable(result):
        await result


def leader(client, **options) -> AsyncIterator[AutoRenewLease]:
    return LeaderElection(client, **options).terms()
