"""Bounded waits for the writer lock (engines/sqlite/): the helper
thread that waits in flock() on a connection's behalf, and a service call
refused with WriterBusy, writing nothing, while another process's lock is
held."""

from __future__ import annotations

import fcntl
import os
import uuid

import pytest
from django.db import connection

from leases import services
from leases.models import LeaseEvent
from leases.services import Actor, ResourceRef
from engines.sqlite.base import FlockWaiter
from engines.writer_wait import WriterBusy, is_writer_busy
from leases.storage.write_refusals import server_busy
from tests.storage import lock_is_free, writer_lock_file

REF = ResourceRef("devstoreaccount1", "wait", "b")
ACTOR = Actor(name="account:devstoreaccount1", via="azure")


@pytest.fixture
def lock_file(tmp_path):
    return str(tmp_path / "db.writer-lock")


def test_a_waiter_that_gave_up_does_not_keep_or_steal_the_lock(lock_file):
    holder = os.open(lock_file, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    waiter = FlockWaiter(os.open(lock_file, os.O_RDWR))
    assert waiter.acquire(0.1) is False  # the helper stays blocked in flock
    os.close(holder)  # the holder lets go: the helper gets it, nobody waits, it lets go
    assert waiter.acquire(10) is True  # granted by the helper or taken directly
    assert not lock_is_free(lock_file)
    fcntl.flock(waiter.fd, fcntl.LOCK_UN)
    assert lock_is_free(lock_file)
    assert waiter.acquire(0) is True  # free: taken at once
    fcntl.flock(waiter.fd, fcntl.LOCK_UN)
    waiter.close()


def test_a_waiter_closed_while_its_helper_is_blocked_closes_later(lock_file):
    holder = os.open(lock_file, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    waiter = FlockWaiter(os.open(lock_file, os.O_RDWR))
    assert waiter.acquire(0.1) is False
    waiter.close()  # the helper still blocks on the descriptor: it is not closed yet
    os.fstat(waiter.fd)
    os.close(holder)
    helper = waiter.thread
    assert helper is not None  # started by the acquire that gave up
    helper.join(10)
    assert not helper.is_alive()
    assert lock_is_free(lock_file)  # the helper got the lock, then closed the descriptor


@pytest.fixture
def blob(make_blob):
    return make_blob(REF, ACTOR)


def test_a_writer_is_refused_in_bounded_time_and_writes_nothing(blob, monkeypatch):
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "write_wait", 0.2)
    path = writer_lock_file()
    holder = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another process's writer, as far as the server can tell
    before = LeaseEvent.objects.count()
    try:
        with pytest.raises(WriterBusy) as busy:
            services.lease_acquire(ref=REF, actor=ACTOR, duration=15, proposed_lease_id=uuid.uuid4())
        assert is_writer_busy(busy.value)
        err = server_busy(busy.value)
        assert (err.status, err.code, err.detail["retry_after"]) == (503, "ServerBusy", 1)
        assert LeaseEvent.objects.count() == before  # reads go on meanwhile
    finally:
        os.close(holder)
    result = services.lease_acquire(ref=REF, actor=ACTOR, duration=15, proposed_lease_id=uuid.uuid4())
    assert result.lease_id is not None
    assert LeaseEvent.objects.count() == before + 1
