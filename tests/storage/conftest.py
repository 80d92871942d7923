"""Fixtures of the storage tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def no_background_checkpoints(monkeypatch):
    """This process's WAL checkpoint thread for the test's database
    (engines/sqlite/checkpoints.py) takes the writer lock for a
    moment every round (0.1 s): stopped for the test, and none started by a
    connection the test opens, so that "the lock is free" is about the
    transaction's own lock whatever the machine's load; started again after."""
    from django.db import connection

    from engines.sqlite.checkpoints import checkpointers, checkpointers_lock, ensure_checkpointer

    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "checkpoint_interval", 0)
    with checkpointers_lock:
        thread = checkpointers.pop((os.getpid(), str(connection.settings_dict["NAME"])), None)
    if thread is not None:
        thread.stop()
    yield
    if thread is not None:
        ensure_checkpointer(thread.path, thread.interval, thread.synchronous)
