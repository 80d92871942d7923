"""The admin while another process holds the database's writer longer than
LEASEHOLD_WRITE_WAIT: a page saying the database is busy (503), and nothing
changed; the same action goes through once the writer is free."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from django.db import connection

from leases.domain import fingerprints, machine
from leases.admin import lease_actions
from leases.models import LeaseEvent
from engines.sqlite.base import writer_lock_path



BLOBS = "/admin/leases/blob/"

# A second process holding the writer, as another program (or another
# server's long write) would: SQLite's own lock (BEGIN IMMEDIATE on the
# file), or the server processes' writer flock beside it.
HOLDERS = {
    "sqlite": "import sqlite3, sys\n"
              "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
              "c.execute('BEGIN IMMEDIATE')\n"
              "print('held', flush=True)\n"
              "sys.stdin.read()\n",
    "flock": "import fcntl, os, sys\n"
             "fd = os.open(sys.argv[1] + '.writer-lock', os.O_RDWR | os.O_CREAT)\n"
             "fcntl.flock(fd, fcntl.LOCK_EX)\n"
             "print('held', flush=True)\n"
             "sys.stdin.read()\n",
}


class Holder:
    def __init__(self, kind: str):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDERS[kind], str(connection.settings_dict["NAME"])],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None  # spawned with a pipe
        assert self.proc.stdout.readline().strip() == "held"

    def let_go(self) -> None:
        if self.proc.poll() is None:
            self.proc.communicate(timeout=10)  # its stdin closed: it lets go and exits


@pytest.fixture
def short_wait(transactional_db, monkeypatch):
    """LEASEHOLD_WRITE_WAIT of 0.3 s, on a connection opened with it."""
    if connection.vendor != "sqlite" or writer_lock_path(str(connection.settings_dict["NAME"])) is None:
        pytest.skip("the writer lock is SQLite's")
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "write_wait", 0.3)
    connection.close()  # the busy timeout is set when a connection opens
    yield
    connection.close()


@pytest.fixture(params=sorted(HOLDERS))
def hold(request, short_wait):
    """hold() -> a Holder of the kind the test is run for (after the
    staff user logged in: a login writes its session)."""
    started: list[Holder] = []

    def hold() -> Holder:
        started.append(Holder(request.param))
        return started[-1]

    yield hold
    for held in started:
        held.let_go()


def _state(estate, name: str):
    obj = estate.blobs[name]
    obj.refresh_from_db()
    return obj.lease_state, obj.lease_generation, obj.lease_break_at


def _busy_page(response) -> str:
    assert response.status_code == 503, response.status_code
    assert response["Retry-After"] == "1"
    html = response.content.decode()
    assert "The database is busy; try again." in html and "nothing was changed" in html
    return html


def test_a_break_while_the_writer_is_busy_says_so_and_changes_nothing(client, breaker, estate, hold):
    client.force_login(breaker)
    holder = hold()
    obj = estate.blobs["leased"]
    before = _state(estate, "leased")
    events = LeaseEvent.objects.count()
    form = {"when": "now", "reason": "stuck", "seen": f"{obj.pk}:{obj.lease_generation}"}
    _busy_page(client.post(f"{BLOBS}{obj.pk}/break/", form))
    assert _state(estate, "leased") == before
    assert LeaseEvent.objects.count() == events
    holder.let_go()
    assert client.post(f"{BLOBS}{obj.pk}/break/", form).status_code == 302
    assert _state(estate, "leased")[0] == machine.BROKEN


def test_a_bulk_break_while_the_writer_is_busy_changes_nothing(client, breaker, estate, hold):
    client.force_login(breaker)
    hold()
    leased, infinite = estate.blobs["leased"], estate.blobs["infinite"]
    before = [_state(estate, "leased"), _state(estate, "infinite")]
    response = client.post(BLOBS, {"action": "break_leases", "_selected_action": [str(leased.pk), str(infinite.pk)],
                                   "post": "yes", "when": "now",
                                   "seen": [f"{o.pk}:{o.lease_generation}" for o in (leased, infinite)]})
    _busy_page(response)
    assert [_state(estate, "leased"), _state(estate, "infinite")] == before
    assert not LeaseEvent.objects.filter(via="admin").exists()


def test_a_bulk_break_the_writer_stops_halfway_reports_what_was_and_was_not_broken(
        client, breaker, estate, short_wait, monkeypatch):
    """The first lease is broken, then another process takes the writer:
    the rest are reported not broken (busy), not a server error."""
    client.force_login(breaker)
    holders: list[Holder] = []
    real_break = lease_actions.lease_break

    def lease_break(**kwargs):
        result = real_break(**kwargs)
        if not holders:
            holders.append(Holder("sqlite"))  # from now on the writer is busy
        return result

    monkeypatch.setattr(lease_actions, "lease_break", lease_break)
    leased, infinite = estate.blobs["leased"], estate.blobs["infinite"]
    before_infinite = _state(estate, "infinite")
    try:
        response = client.post(BLOBS, {
            "action": "break_leases", "_selected_action": [str(leased.pk), str(infinite.pk)], "post": "yes",
            "when": "now", "seen": [f"{o.pk}:{o.lease_generation}" for o in (leased, infinite)]})
        assert response.status_code == 302
    finally:
        for held in holders:
            held.let_go()
    page = client.get(BLOBS).content.decode()
    assert "Broke the lease of 1 blob." in page
    assert re.search(r"Not broken, the database was busy: opsstore/orders/\w+\.txt\. The database is busy; try again\.",
                     page)
    broken = [name for name in ("leased", "infinite") if _state(estate, name)[0] == machine.BROKEN]
    assert len(broken) == 1
    other = "infinite" if broken == ["leased"] else "leased"
    if other == "infinite":
        assert _state(estate, "infinite") == before_infinite
    assert LeaseEvent.objects.filter(via="admin", action="break").count() == 1


def test_a_release_while_the_writer_is_busy_says_so_and_changes_nothing(client, superuser, estate, hold):
    client.force_login(superuser)
    obj = estate.blobs["leased"]
    before = _state(estate, "leased")
    hold()
    _busy_page(client.post(f"{BLOBS}{obj.pk}/release/", {"fingerprint": fingerprints.of(obj.lease_id), "reason": "done"}))
    assert _state(estate, "leased") == before
    assert not LeaseEvent.objects.filter(via="admin").exists()
