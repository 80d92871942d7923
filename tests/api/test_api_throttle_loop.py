"""The JSON API's rate limit never holds up the event loop: the lean path's count, which the loop
runs when it writes a lone lease request itself (leases/storage/queue_intake.py), finds the counter
file's lock held by another process busy at once, counts nothing and leaves the request to the DRF
view, whose count may wait, in a lane thread."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading

import pytest
from django.db import connection
from rest_framework.settings import api_settings

from leases.api import lean as api_lean, throttling
from tests.api.test_api_lean import A, BLOB, environ, lean_state  # noqa: F401  (lean_state: a fixture)

pytestmark = pytest.mark.skipif(connection.vendor == "postgresql", reason="the SQLite counter file only")

# Another process counting: it holds the counter file's write lock until told to let go.
HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""
BOUND = 20  # seconds the test lets the lean path's check take before it lets the holder go


def test_the_lean_paths_count_never_waits_for_another_process_holding_the_counter_file(lean_state, settings,  # noqa: F811
                                                                                       monkeypatch):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api": "3/minute"}}
    api_settings.reload()
    monkeypatch.setattr(throttling, "BUSY_TIMEOUT_MS", 600_000)  # a count that waits would outlast the bound
    path = settings.LEASEHOLD_THROTTLE_DATABASE
    throttling.counter().hit("made", limit=10, period=60, now=1000.0)  # the file, as another process made it
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    held_up, checked = threading.Event(), threading.Event()

    def let_go() -> None:
        if holder.poll() is None:
            assert holder.stdin is not None
            holder.stdin.write("\n")
            holder.stdin.flush()

    def watchdog() -> None:  # a check still waiting at the bound waits for the holder: let it go, and say so
        if not checked.wait(BOUND):
            held_up.set()
            let_go()

    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        env = environ("acquire", BLOB, {"duration": 15, "proposed_lease_id": A}, token=lean_state["all"])
        lease = api_lean.takes(env, env["wsgi.input"].getvalue())
        assert lease is not None
        dog = threading.Thread(target=watchdog)
        dog.start()
        try:
            call, = api_lean.checked([(env, lease)])  # what the loop runs before it writes a request itself
        finally:
            checked.set()
            dog.join()
        assert not held_up.is_set(), "the lean path's count waited for the counter file's lock"
        assert call.declined and call.answer() is None  # the view's to count and answer
    finally:
        let_go()
        holder.wait(timeout=30)
        api_settings.reload()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM hits WHERE key LIKE 'api:%'").fetchone() == (0,)  # nothing counted
