"""Writes that must not wait (writer_wait.at_once, for the event loop's lease
batches, serving/lease_batch.py): when the writer is not free this moment --
our writer lock held by another process, SQLite's own lock held by another
program, or another thread of this process committing -- the transaction is
not begun and WouldWait is raised at once, nothing written, no lock kept;
the next write that may wait goes through."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
import uuid

import pytest
from django.db import connection

from leases import services
from leases.models import LeaseEvent
from leases.services import Actor, ResourceRef
from engines.writer_wait import WouldWait, at_once, must_not_wait
from leases.storage.transactions import write_transaction
from tests.storage import lock_is_free, writer_lock_file

REF = ResourceRef("devstoreaccount1", "atonce", "b")
ACTOR = Actor(name="account:devstoreaccount1", via="azure")
WAIT = 5.0  # the configured write wait: an answer "at once" comes long before it


@pytest.fixture
def blob(make_blob, monkeypatch, no_background_checkpoints):
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "write_wait", WAIT)
    return make_blob(REF, ACTOR)


def _acquire():
    return services.lease_acquire(ref=REF, actor=ACTOR, duration=15, proposed_lease_id=uuid.uuid4())


def _refused_at_once() -> float:
    before = LeaseEvent.objects.count()
    started = time.monotonic()
    with pytest.raises(WouldWait), at_once():
        _acquire()
    took = time.monotonic() - started
    assert LeaseEvent.objects.count() == before  # nothing written, not even a refusal
    assert not must_not_wait()  # the mode ends with its block
    return took


def test_our_writer_lock_held_elsewhere(blob):
    path = writer_lock_file()
    holder = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another process's writer, as far as the server can tell
    try:
        assert _refused_at_once() < WAIT / 2
    finally:
        os.close(holder)
    assert lock_is_free(path)
    with at_once():
        assert _acquire().lease_id is not None  # free now: written at once
    assert lock_is_free(path)


def test_sqlites_own_lock_held_by_another_program(blob):
    path = writer_lock_file()
    other = sqlite3.connect(str(connection.settings_dict["NAME"]), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # past our writer lock, as a stuck outside program would
    try:
        assert _refused_at_once() < WAIT / 2
        assert lock_is_free(path)  # our writer lock was let go with the BEGIN that failed
    finally:
        other.execute("ROLLBACK")
        other.close()
    with connection.cursor() as cursor:  # the busy timeout is the configured one again
        cursor.execute("PRAGMA busy_timeout")
        assert cursor.fetchone()[0] == connection._busy_ms
    assert _acquire().lease_id is not None


def test_another_thread_of_this_process_committing(blob):
    inside, release = threading.Event(), threading.Event()

    def long_write():
        from django.db import connection as conn  # the thread's own connection

        def work():
            inside.set()
            release.wait(30)

        try:
            write_transaction(work)
        finally:
            conn.close()

    thread = threading.Thread(target=long_write)
    thread.start()
    try:
        assert inside.wait(30)
        assert _refused_at_once() < WAIT / 2  # neither waits for that group nor joins it
    finally:
        release.set()
        thread.join(30)
    with at_once():
        assert _acquire().lease_id is not None
