"""The write queue's intake on PostgreSQL (leases/storage/queue_intake.py): its batch waits for no
row, and a request whose row another session holds is made alone by the intake itself, in a thread
that may wait for the row, while the rest of its batch is answered. Real PostgreSQL, a real asyncio
loop, lease writes as the doors submit them (services.LeaseWrite); handshakes, not delays."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import connection

from leases import services
from leases.models import LeaseEvent
from leases.services import Actor, LeaseResult, ResourceRef
from leases.storage.queue_intake import Intake
from leases.storage.write_queue import queue_for

pytestmark = pytest.mark.also_postgres

ACTOR = Actor(name="account:devstoreaccount1", via="azure")


class _Call:
    """A door's call as the intake sees it: one lease write, its outcome as its answer."""

    def __init__(self, request: dict):
        self.lease = services.LeaseWrite(request)
        self.outcome: object = None

    def writes(self):
        return self.lease.write

    def written(self, result, error):
        self.outcome = self.lease.outcome(result, error)

    def answer(self):
        return self.outcome


def _checked(requests: list[dict]) -> list[_Call]:
    return [_Call(request) for request in requests]


def _waiting_on_a_lock(watcher) -> bool:
    return watcher.execute("SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                           " AND wait_event_type = 'Lock'").fetchone() is not None


def test_a_request_whose_row_is_held_is_made_alone_by_the_intake(make_blob):
    """Another session holds one blob's row: a renewal of it and an acquire
    of another blob, submitted together from the loop. The acquire is
    answered while the row is still held (its batch did not wait for the
    row); the renewal, made alone by the intake in a thread of its own, waits
    for the row and is answered once it is let go: a result, written once."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's")
    import psycopg

    held = make_blob(ResourceRef("devstoreaccount1", "intake-held", "held"), ACTOR)
    free = make_blob(ResourceRef("devstoreaccount1", "intake-free", "free"), ACTOR)
    lease_id = services.lease_acquire(ref=held, actor=ACTOR, duration=60).resource.lease_id
    events = LeaseEvent.objects.filter(blob="held").count()
    queue = queue_for()
    assert queue is not None and queue.rows_locked
    intake = Intake(queue, inline=True)  # inline asked, never on PostgreSQL
    conninfo = {"conninfo": connection.settings_dict["OPTIONS"]["conninfo"], "dbname": connection.settings_dict["NAME"]}
    order: list[str] = []
    with psycopg.connect(**conninfo) as holder:
        holder.execute("SELECT 1 FROM leases_blob WHERE name = 'held' FOR UPDATE")

        def let_go_once_the_renewal_waits(acquired: threading.Event) -> None:
            try:
                with psycopg.connect(**conninfo, autocommit=True) as watcher:
                    deadline = time.monotonic() + 20
                    while time.monotonic() < deadline and not (acquired.is_set() and _waiting_on_a_lock(watcher)):
                        time.sleep(0.01)
            finally:
                order.append("let go")
                holder.rollback()

        async def main():
            renew = asyncio.ensure_future(intake.submit(
                _checked, {"action": "renew", "ref": held, "actor": ACTOR, "lease_id": lease_id},
                principal="a", received_at=time.monotonic()))
            acquire = asyncio.ensure_future(intake.submit(
                _checked, {"action": "acquire", "ref": free, "actor": ACTOR, "duration": 15},
                principal="b", received_at=time.monotonic()))
            acquired = threading.Event()
            watching = threading.Thread(target=let_go_once_the_renewal_waits, args=(acquired,))
            watching.start()
            try:
                acquire_answer = await acquire
                order.append("acquired")
                acquired.set()
                return acquire_answer, await renew
            finally:
                await asyncio.get_running_loop().run_in_executor(None, watching.join)

        try:
            acquire_answer, renew_answer = asyncio.run(main())
        finally:
            intake.close(wait=True)
    assert order == ["acquired", "let go"]  # the acquire's batch did not wait for the held row
    assert isinstance(acquire_answer, LeaseResult) and isinstance(renew_answer, LeaseResult), (acquire_answer,
                                                                                              renew_answer)
    assert LeaseEvent.objects.filter(blob="held", action="renew").count() == 1
    assert LeaseEvent.objects.filter(blob="held").count() == events + 1
