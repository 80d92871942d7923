"""The asyncio forms (leasehold_client.aio, on azure.storage.blob.aio) against
Leasehold (time moved, not slept) and Azurite (real time, short)."""

from __future__ import annotations

import asyncio
import math

import pytest
from azure.storage.blob.aio import BlobClient, BlobLeaseClient

from leasehold_client import LeaseLostError
from leasehold_client.aio import AutoRenewLease, LeaderElection, OncePer, do_once
from tests.client.helpers import Partition


class Aio:
    """aio clients of one backend (closed at the end), and time moved from a coroutine."""

    def __init__(self, backend):
        self.backend = backend
        self.clock = backend.clock
        self.clients = []

    def blob(self, container, name, **kwargs) -> BlobClient:
        client = BlobClient.from_connection_string(self.backend.connection_string, container, name, retry_total=0,
                                                   **kwargs)
        self.clients.append(client)
        return client

    async def advance(self, seconds):
        if self.backend.fake_time:
            self.clock.advance(seconds)
            await self.clock.settle_async()
        else:
            await asyncio.sleep(seconds)

    async def run_until(self, done, *, step=0.5, limit=120.0):
        start = self.clock.monotonic()
        while not done():
            assert self.clock.monotonic() - start <= limit, f"not done within {limit} s"
            await self.advance(step)
        return self.clock.monotonic() - start

    def task(self, coro):
        return self.clock.enlist(asyncio.create_task(coro))

    async def close(self):
        for client in self.clients:
            await client.close()


def run(backend, scenario):
    async def main():
        aio = Aio(backend)
        try:
            await scenario(aio)
        finally:
            await aio.close()
    asyncio.run(main())


def test_aio_lease_nonblocking_renews_and_releases_on_error(backend):
    async def scenario(aio):
        container, name = backend.names()
        interval = 5.0 if backend.fake_time else 0.5
        with pytest.raises(KeyError):
            async with AutoRenewLease(aio.blob(container, name), 15, renew_interval=interval,
                                      clock=aio.clock) as lease:
                assert lease.has_lease
                async with AutoRenewLease(aio.blob(container, name), 15, clock=aio.clock) as other:
                    assert not other.has_lease
                await aio.run_until(lambda: lease.renewals >= 2, step=1.0 if backend.fake_time else 0.1)
                lease.check()
                if backend.fake_time:
                    assert lease.generation == 1
                raise KeyError("the block fails")
        props = await aio.blob(container, name).get_blob_properties()
        assert props.lease.state == "available"
        with pytest.raises(LeaseLostError, match="released"):
            lease.check()
    run(backend, scenario)


def test_aio_broken_lease_is_noticed_within_one_renewal_interval(backend):
    async def scenario(aio):
        container, name = backend.names()
        interval = 5.0 if backend.fake_time else 1.0
        losses = []

        async def on_lost(lease):
            losses.append(lease)

        async with AutoRenewLease(aio.blob(container, name), 15, renew_interval=interval, clock=aio.clock,
                                  on_lost=on_lost) as lease:
            await aio.advance(0.5)
            await BlobLeaseClient(aio.blob(container, name)).break_lease(lease_break_period=0)
            took = await aio.run_until(lease.lost.is_set, step=0.25 if backend.fake_time else 0.05,
                                       limit=2 * interval)
            assert took <= interval + 0.5
            await asyncio.sleep(0)  # the async callback's task
            assert losses == [lease]
            with pytest.raises(LeaseLostError, match="renewal refused"):
                lease.check()
    run(backend, scenario)


def test_aio_two_instances_racing_do_once_run_fn_once(backend):
    async def scenario(aio):
        container, name = backend.names()
        calls = []

        async def initialise():
            calls.append(1)
            await asyncio.sleep(0.2)

        tasks = [aio.task(do_once(aio.blob(container, name), initialise, poll_interval=1, clock=aio.clock))
                 for _ in range(2)]
        await aio.run_until(lambda: all(t.done() for t in tasks), step=0.25, limit=60)
        assert sorted([t.result() for t in tasks]) == [False, True]
        assert len(calls) == 1
    run(backend, scenario)


def test_aio_once_per_runs_once_per_period_across_three_instances(leasehold):
    async def scenario(aio):
        container, name = leasehold.names()
        period = 60.0
        runs = []

        def job(i):
            async def report():
                runs.append(math.floor(aio.clock.time() / period))
            return OncePer(aio.blob(container, name), period, report, poll_interval=15, clock=aio.clock)

        stop = asyncio.Event()
        tasks = [aio.task(job(i).run(stop)) for i in range(3)]
        await aio.run_until(lambda: bool(runs) and math.floor(aio.clock.time() / period) >= runs[0] + 3,
                            step=3, limit=400)
        stop.set()
        await asyncio.gather(*tasks)
        assert runs == list(range(runs[0], runs[0] + len(runs))) and len(runs) >= 3
    run(leasehold, scenario)


def test_aio_partitioned_leader_steps_down_before_the_next_is_elected(leasehold):
    async def scenario(aio):
        container, name = leasehold.names()
        partition = Partition()
        old = LeaderElection(aio.blob(container, name, raw_request_hook=partition), duration=15, safety_margin=2,
                             clock=aio.clock)
        new = LeaderElection(aio.blob(container, name), duration=15, poll_interval=1, clock=aio.clock)
        terms: dict[str, AutoRenewLease] = {}

        async def new_elected(term):
            with pytest.raises(LeaseLostError):
                terms["old"].check()  # already refuses to act
            terms["new"] = term

        old_task = aio.task(old.run(lambda term: terms.setdefault("old", term)))
        await aio.run_until(lambda: "old" in terms)
        new_task = aio.task(new.run(new_elected))
        await aio.advance(6)
        assert "new" not in terms and terms["old"].renewals >= 1
        assert (old.is_leader, new.is_leader, old.transitions, new.transitions) == (True, False, 1, 0)
        partition.blocked = True
        await aio.run_until(lambda: "new" in terms)
        old_term, new_term = terms["old"], terms["new"]
        assert new_term.acquired_at is not None and old_term.lost_at is not None
        assert new_term.acquired_at - old_term.lost_at >= 1.5
        assert old_term.generation is not None and new_term.generation == old_term.generation + 1
        assert (old.is_leader, new.is_leader, new.transitions) == (False, True, 1)
        old.stop()
        new.stop()
        await asyncio.gather(old_task, new_task)
        assert (old.is_leader, new.is_leader, old.transitions, new.transitions) == (False, False, 2, 2)
    run(leasehold, scenario)
