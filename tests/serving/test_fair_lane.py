"""The lease lane shared by principals in turn (serving/lanes.py): a
principal's burst delays another's request by one request per principal
waiting, not by the whole burst."""

from __future__ import annotations

import asyncio

from serving.lanes import FairGate


def test_a_burst_of_one_principal_waits_behind_another_principals_request():
    async def run() -> list[str]:
        gate, order = FairGate(1), []
        release = asyncio.Event()

        async def request(principal: str, n: int) -> None:
            async with gate.turn(principal):
                order.append(f"{principal}{n}")
                await release.wait()  # holds its place until the test lets the lane go on

        tasks = [asyncio.ensure_future(request("burst", n)) for n in range(50)]
        await asyncio.sleep(0)  # the burst queued first, one of them in the lane
        tasks.append(asyncio.ensure_future(request("renewal", 0)))
        while len(order) < 51:
            await asyncio.sleep(0)
            if order and not release.is_set():
                release.set()
                await asyncio.sleep(0)
                release.clear()
        await asyncio.gather(*tasks)
        return order

    order = asyncio.run(run())
    assert sorted(order) == sorted([f"burst{n}" for n in range(50)] + ["renewal0"])
    assert order.index("renewal0") <= 2, order[:5]  # behind one burst request in the lane, at most one more
    assert [o for o in order if o.startswith("burst")] == [f"burst{n}" for n in range(50)]  # each in its order


def test_a_cancelled_waiter_gives_its_place_back():
    async def run() -> int:
        gate = FairGate(1)
        held = asyncio.Event()
        done = asyncio.Event()

        async def holder() -> None:
            async with gate.turn("a"):
                held.set()
                await done.wait()

        first = asyncio.ensure_future(holder())
        await held.wait()
        waiter = asyncio.ensure_future(gate.turn("b").__aenter__())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        done.set()
        await first
        async with gate.turn("c"):  # the lane is free again: no place leaked
            return gate.busy

    assert asyncio.run(run()) == 1

