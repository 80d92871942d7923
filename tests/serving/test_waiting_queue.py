"""The waiting acquires of one worker (serving/waiting.py), without a server:
a signal wakes only the first waiter of its resource, a signal that arrives
between attempts is not lost, the next waiter is woken when the first one
leaves with anything but "still held", the blocking state's end wakes the
first waiter by itself (on the clock seam), and the bound per principal; on
PostgreSQL, that a worker listens for releases only while it holds waiters."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection

from serving import waiting
from serving.waiting import Waiters
from leases.domain import clock
from leases.domain.waiting import Wait


def _waiting(waiters: Waiters, key: str = "k", *, wait: float = 5.0, ends_at=None) -> Wait:
    w = Wait(waiters)
    w.key, w.ends_at, w.seq = key, ends_at, waiters.seq
    w.until = time.monotonic() + wait
    return w


def test_a_signal_wakes_only_the_first_waiter_and_the_next_when_the_first_leaves():
    async def scenario():
        waiters = Waiters(bound=10)
        never = asyncio.get_running_loop().create_future()
        first, second = _waiting(waiters), _waiting(waiters)
        one = asyncio.ensure_future(waiters.wait(first, never))
        two = asyncio.ensure_future(waiters.wait(second, never))
        await asyncio.sleep(0.01)
        waiters.signal("other")  # another resource: nobody here
        waiters.signal("k")
        await asyncio.sleep(0.01)
        assert one.done() and one.result() == "woken" and not two.done()
        waiters.leave(first, held=False)  # granted: the next learns the new state
        await asyncio.sleep(0.01)
        assert two.result() == "woken"
        waiters.leave(second, held=True)
        assert waiters.queues == {}

    asyncio.run(scenario())


def test_a_signal_between_two_attempts_is_not_lost():
    async def scenario():
        waiters = Waiters(bound=10)
        w = _waiting(waiters)
        waiters.signal("k")  # while its attempt ran (seq taken before it)
        assert await waiters.wait(w, asyncio.get_running_loop().create_future()) == "woken"

    asyncio.run(scenario())


def test_the_blocking_states_end_wakes_the_first_waiter_and_the_wait_runs_out():
    async def scenario():
        waiters = Waiters(bound=10)
        never = asyncio.get_running_loop().create_future()
        ends = clock.freeze() + timedelta(seconds=0.05)
        assert await waiters.wait(_waiting(waiters, ends_at=ends), never) == "woken"
        assert await waiters.wait(_waiting(waiters, "j", wait=0.05), never) == "timeout"
        gone = asyncio.get_running_loop().create_future()
        gone.set_result(None)
        assert await waiters.wait(_waiting(waiters, "g"), gone) == "gone"

    try:
        asyncio.run(scenario())
    finally:
        clock.reset()


def test_waiters_are_bounded_per_principal():
    waiters = Waiters(bound=2)
    assert waiters.reserve("a") and waiters.reserve("a") and not waiters.reserve("a") and waiters.reserve("b")
    waiters.release("a")
    assert waiters.reserve("a")


@pytest.mark.also_postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_worker_listens_only_while_it_holds_waiters(monkeypatch):
    """No LISTEN until a waiter waits; then one, and the waiter tries again
    once it is in place (a release just before it is not lost); a NOTIFY
    from another session wakes it; the LISTEN ends LISTEN_LINGER after the
    last waiter left."""
    if connection.vendor != "postgresql":
        pytest.skip("NOTIFY is PostgreSQL's")
    import psycopg

    from engines.postgres.base import side_connection
    from leases.services import wakeups

    monkeypatch.setattr(waiting, "LISTEN_LINGER", 0.3)
    monkeypatch.setattr(wakeups, "LISTEN_CHECK", 0.05)
    conninfo, params = side_connection(settings.DATABASES["default"])

    async def scenario():
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **params) as other:
            async def listeners() -> int:
                cursor = await other.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND query = %s", [f"LISTEN {wakeups.CHANNEL}"])
                [(count,)] = await cursor.fetchall()
                return count

            waiters = Waiters(bound=10)
            waiters.start()
            never = asyncio.get_running_loop().create_future()
            assert waiters.on_database and waiters.listening is None and await listeners() == 0
            w = _waiting(waiters, "k", wait=10)
            assert await asyncio.wait_for(waiters.wait(w, never), 5) == "woken"  # once listening
            assert waiters.listening is not None and await listeners() == 1
            w.seq = waiters.seq  # its next attempt was refused too: it waits again
            again = asyncio.ensure_future(waiters.wait(w, never))
            await asyncio.sleep(0.05)
            assert not again.done()
            await other.execute("SELECT pg_notify(%s, %s)", [wakeups.CHANNEL, "k"])
            assert await asyncio.wait_for(again, 5) == "woken"
            waiters.leave(w, held=False)
            deadline = time.monotonic() + 5
            while waiters.listening is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert waiters.listening is None, "still listening with no waiter, past the linger"
            while await listeners() and time.monotonic() < deadline:  # the session's end, as PostgreSQL sees it
                await asyncio.sleep(0.05)
            assert await listeners() == 0
            waiters.close()

    asyncio.run(scenario())
