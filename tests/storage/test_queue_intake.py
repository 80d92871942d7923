"""Who writes a lease request submitted to the write queue from the event loop (leases/storage/
queue_intake.py): the loop itself when the request is all the worker is serving and the writer is
free, else the queue's thread -- which may wait for the writer, while the loop goes on with other
work. Real SQLite file, a real asyncio loop, the Azure door's lean calls; only the queue thread's
batches are counted."""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from leases.azure import lean as azure_lean
from leases.models import LeaseEvent
from leases.services import Actor, LeaseResult, ResourceRef
from leases.storage.queue_intake import Intake, fair_share
from leases.storage.write_queue import queue_for
from tests.storage import writer_lock_file
from tests.azure.test_azure_lean import environ

REF = ResourceRef("devstoreaccount1", "inline", "b")
ACTOR = Actor(name="account:devstoreaccount1", via="azure")
LEASE_ID = "ca761232-ed42-11ce-bacd-00aa0057b223"


class CountedExecutor(ThreadPoolExecutor):
    """The queue's one thread, counting the batches handed to it."""

    def __init__(self):
        super().__init__(1, thread_name_prefix="lease-test")
        self.batches = 0

    def submit(self, fn, /, *args, **kwargs):
        self.batches += 1
        return super().submit(fn, *args, **kwargs)

    def close(self):
        super().submit(lambda: connection.close()).result(30)  # the thread's own connection
        self.shutdown()


@pytest.fixture
def queue_thread(make_blob, monkeypatch, no_background_checkpoints):
    from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
    from leases import services

    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "write_wait", 10)
    make_blob(REF, ACTOR)
    services.account_ensure(name=DEV_ACCOUNT, key1=DEV_KEY)
    executor = CountedExecutor()
    yield executor
    executor.close()


class _Intake:
    """An intake of the test database's write queue whose thread is ``executor``, as a worker's
    door submits to it: ``in_flight`` requests being served (1: the loop may write it itself)."""

    def __init__(self, executor, in_flight: int):
        queue = queue_for()
        assert queue is not None  # SQLite on a file
        self.intake = Intake(queue, inline=True)
        self.intake.thread.shutdown()
        self.intake.thread = executor
        self.in_flight = in_flight

    def submit(self, environ, names):
        return self.intake.submit(azure_lean.checked, (environ, names), principal="",
                                  received_at=environ["leasehold.received_at"], idle=lambda: self.in_flight == 1)


def _batcher(executor, in_flight: int) -> _Intake:
    return _Intake(executor, in_flight)


def _acquire_request(blob: str = "b") -> tuple[dict, tuple[str, str, str | None]]:
    import time

    env = environ(f"/devstoreaccount1/inline/{blob}", {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15",
                                                 "x-ms-proposed-lease-id": LEASE_ID})
    env["leasehold.received_at"] = time.monotonic()
    target = azure_lean.takes(dict(env))
    assert target is not None  # a lease request the lean path takes
    return env, target


def _answered(response) -> tuple[int, str | None]:
    return response.status_code, response.get("x-ms-lease-id")


def test_a_lone_request_is_written_by_the_loop(queue_thread):
    batcher = _batcher(queue_thread, in_flight=1)
    answer = asyncio.run(batcher.submit(*_acquire_request()))
    assert _answered(answer) == (201, LEASE_ID)
    assert queue_thread.batches == 0  # no hand-over to the queue's thread
    assert LeaseEvent.objects.filter(action="acquire", outcome="success").count() == 1


def test_with_other_requests_in_flight_the_queues_thread_writes(queue_thread):
    batcher = _batcher(queue_thread, in_flight=2)
    answer = asyncio.run(batcher.submit(*_acquire_request()))
    assert _answered(answer) == (201, LEASE_ID)
    assert queue_thread.batches == 1


def _with_the_writer_busy_until_the_thread_has_it(queue_thread, request) -> tuple[tuple, list[str], bool]:
    """``request`` submitted as a lone batch while another process holds the
    writer lock, which a coroutine on the loop lets go once the batch is the
    queue's thread's (a handshake, not a delay a loaded machine outruns; a timer
    lets it go after 15 s whatever happens). (The answer, who let the lock go,
    whether the answer had come before.)"""
    holder = os.open(writer_lock_file(), os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    released_by: list[str] = []
    guard = threading.Lock()

    def let_go(who: str) -> None:
        with guard:
            if not released_by:
                released_by.append(who)
                os.close(holder)

    safety = threading.Timer(15, let_go, ("timer",))
    safety.start()
    batcher = _batcher(queue_thread, in_flight=1)

    async def main():
        submitting = asyncio.ensure_future(batcher.submit(*request))
        while queue_thread.batches == 0 and not submitting.done():
            await asyncio.sleep(0.005)  # the loop runs this while the batch waits
        answered_before = submitting.done()
        let_go("loop")
        return await submitting, answered_before

    try:
        answer, answered_before = asyncio.run(main())
    finally:
        safety.cancel()
        let_go("test")
    return answer, released_by, answered_before


def test_a_busy_writer_sends_the_batch_to_the_thread_and_the_loop_goes_on(queue_thread):
    """Another process holds the writer lock: the loop does not wait for it,
    the queue's thread does, and writes once it is free. A handshake, not a
    count of ticks: the lock is let go by a coroutine on the loop, once the
    batch is the thread's; a loop that waited for the lock itself could not
    run it, and would answer 503 at the write wait (10 s here; a timer lets
    the lock go after 15 s whatever happens)."""
    answer, released_by, answered_before = _with_the_writer_busy_until_the_thread_has_it(queue_thread, _acquire_request())
    assert released_by == ["loop"] and not answered_before  # the loop ran on, the answer came after
    assert _answered(answer) == (201, LEASE_ID)
    assert queue_thread.batches == 1


@pytest.mark.parametrize("name", ["文件", "😀", "Überweisung"])
def test_a_name_outside_latin_1_is_checked_again_by_the_thread_after_the_loop_stood_aside(queue_thread, name):
    """The loop checks a lone request, finds the writer busy and hands the
    batch to the queue's thread, which checks it again: the second check must
    decode the same path (it encoded an already decoded one as Latin-1 and
    failed the whole batch with a 500)."""
    from leases import services

    services.blob_put(ref=ResourceRef("devstoreaccount1", "inline", name), actor=ACTOR, content=b"x")
    answer, released_by, _ = _with_the_writer_busy_until_the_thread_has_it(queue_thread, _acquire_request(name))
    assert released_by == ["loop"]  # the loop stood aside: the thread checked it again
    assert _answered(answer) == (201, LEASE_ID)
    assert queue_thread.batches == 1
    assert LeaseEvent.objects.filter(blob=name, action="acquire", outcome="success").count() == 1


def test_one_requests_failing_answer_is_its_own(queue_thread, monkeypatch):
    """Requests committed together: one whose answer fails (a bug) gets its
    error; the others of its batch get theirs."""
    from leases import services

    services.blob_put(ref=ResourceRef("devstoreaccount1", "inline", "c"), actor=ACTOR, content=b"x")
    real = azure_lean.LeaseCall.answer

    def answer(call):
        if call.request.path.endswith("/c"):
            raise RuntimeError("a bug in one answer")
        return real(call)

    monkeypatch.setattr(azure_lean.LeaseCall, "answer", answer)
    # Both arrive in one turn of the loop: one batch, handed to the thread.
    batcher = _Intake(queue_thread, in_flight=1)

    async def both():
        return await asyncio.gather(batcher.submit(*_acquire_request("b")), batcher.submit(*_acquire_request("c")),
                                    return_exceptions=True)

    first, second = asyncio.run(both())
    assert _answered(first) == (201, LEASE_ID)
    assert isinstance(second, RuntimeError)
    assert queue_thread.batches == 1


def test_a_member_whose_write_cannot_be_prepared_fails_alone_with_its_own_error(queue_thread, monkeypatch):
    """services.lease_actions_together: the failure of preparing one member's
    write is that member's answer, as raised (not a NameError of the closure
    that carries it), and the others are written."""
    from leases import services
    from leases.services import lease_actions

    services.blob_put(ref=ResourceRef("devstoreaccount1", "inline", "c"), actor=ACTOR, content=b"x")
    real = lease_actions._lease_write

    def prepare(**arguments):
        if arguments["ref"].blob == "c":
            raise RuntimeError("a bug preparing one write")
        return real(**arguments)

    monkeypatch.setattr(lease_actions, "_lease_write", prepare)
    requests = [dict(action="acquire", ref=ResourceRef("devstoreaccount1", "inline", name), actor=ACTOR,
                     duration=15, proposed_lease_id=None) for name in ("b", "c")]
    first, second = services.lease_actions_together(requests)
    assert isinstance(first, LeaseResult) and first.resource.lease_state == "leased"
    assert isinstance(second, RuntimeError) and str(second) == "a bug preparing one write"


def test_a_batch_takes_each_principal_in_turn():
    entries = [("a", n) for n in range(10)] + [("b", 0), ("c", 0), ("c", 1)]
    taken = fair_share(entries, 5, key=lambda entry: entry[0])
    assert taken == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("c", 1)]
    assert fair_share(entries, 100, key=lambda entry: entry[0])[-1] == ("a", 9)
