"""Leader election for asyncio: ``leasehold_client.leader``'s election
(``Leadership``) on asyncio events and the aio AutoRenewLease, with
``terms()`` as an async iterator and callbacks that may be coroutine functions."""

from __future__ import annotations

import asyncio
import inspect
from typing import AsyncIterator, Callable

from ..leader import Leadership
from .lease import AutoRenewLease


class LeaderElection(Leadership):
    """Leader election with asyncio: ``async for term in election.terms()`` or ``await election.run(...)``."""

    LEASE = AutoRenewLease
    EVENT = asyncio.Event
    term: AutoRenewLease | None

    async def campaign(self) -> AutoRenewLease | None:
        term = self._candidate()
        if term is None or not await term.acquire():
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
