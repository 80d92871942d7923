"""Rate limits: per principal, on the lease clock, and exact across
processes sharing the counter file, or (PostgreSQL) the database."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from rest_framework.settings import api_settings

from django.db import connection

from leases.api.throttling import DatabaseCounter, SlidingWindowCounter, counter
from tests.api.helpers import API, make_container

pytestmark = pytest.mark.also_postgres
# The counter file of a server on SQLite: nothing of the run's database, so not again on PostgreSQL.
sqlite_counter = pytest.mark.skipif(connection.vendor == "postgresql", reason="the SQLite counter file only")

WINDOW_START = datetime(2030, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.fixture
def three_per_minute(settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api": "3/minute"}}
    assert api_settings.DEFAULT_THROTTLE_RATES == {"api": "3/minute"}


def test_a_principal_over_its_rate_gets_429_with_retry_after(client_with, three_per_minute, clock):
    clock.freeze(WINDOW_START)
    alice, bob = client_with("leases.view_container"), client_with("leases.view_container")
    assert [alice.get(f"{API}/containers/").status_code for _ in range(3)] == [200, 200, 200]
    refused = alice.get(f"{API}/containers/")
    assert (refused.status_code, refused.json()["code"]) == (429, "TooManyRequests")
    assert refused["Retry-After"] == "60"  # the whole window's hits weigh on until it has slid past
    assert bob.get(f"{API}/containers/").status_code == 200  # counted per principal
    clock.advance(59)
    assert alice.get(f"{API}/containers/").status_code == 429
    clock.advance(2)
    assert alice.get(f"{API}/containers/").status_code == 200


def test_an_empty_rate_means_no_limit(client_with, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api": ""}}
    alice = client_with("leases.view_container")
    assert {alice.get(f"{API}/containers/").status_code for _ in range(5)} == {200}
    assert not (Path(settings.LEASEHOLD_THROTTLE_DATABASE)).exists()  # nothing was counted


def test_refusals_count_too_but_refused_requests_do_not(client_with, three_per_minute, clock):
    """A refused lease action is a request like any other; a 429 is not."""
    clock.freeze(WINDOW_START)
    make_container("box")
    alice = client_with("leases.change_container")
    statuses = [alice.post(f"{API}/leases/renew/devstoreaccount1/box", {}, format="json").status_code
                for _ in range(5)]
    assert statuses == [400, 400, 400, 429, 429]


@pytest.mark.parametrize("kind", ["file", "database"])
def test_the_window_slides(tmp_path, kind, request):
    if kind == "database":
        request.getfixturevalue("db")
    counter = SlidingWindowCounter(str(tmp_path / "t.sqlite3")) if kind == "file" else DatabaseCounter()
    start = WINDOW_START.timestamp()
    assert [counter.hit("k", limit=4, period=60, now=start + 50) for _ in range(4)] == [None] * 4
    # 2 s into the next window, 58/60 of the previous one still counts: 4 * 58/60 < 4.
    assert counter.hit("k", limit=4, period=60, now=start + 62) is None
    # Now 4 * 58/60 + 1 >= 4, until the previous window weighs less than 3/4: at start + 75.
    wait = counter.hit("k", limit=4, period=60, now=start + 62)
    assert wait is not None and wait == pytest.approx(13)
    assert counter.hit("k", limit=4, period=60, now=start + 62 + wait - 0.5) is not None
    assert counter.hit("k", limit=4, period=60, now=start + 62 + wait + 0.01) is None


CHILD = """
import sys, time
from pathlib import Path
import django
django.setup()
from leases.api.throttling import SlidingWindowCounter
path, folder, me, now = sys.argv[1], Path(sys.argv[2]), sys.argv[3], float(sys.argv[4])
counter = SlidingWindowCounter(path)
counter._connection()  # the file open and in WAL mode before the race
print("ready", flush=True)
while not (folder / "go").exists():
    time.sleep(0.0005)
hit = lambda: counter.hit("shared", limit=LIMIT, period=3600, now=now) is None
admitted = int(hit())
(folder / f"hit-{me}").touch()  # every process has hit once before any goes on: they hammer together
while len(list(folder.glob("hit-*"))) < 4:
    time.sleep(0.0005)
print(admitted + sum(hit() for _ in range(LIMIT - 1)))
"""
LIMIT = 200  # each process tries as many hits as the limit


@sqlite_counter
def test_the_limit_is_exact_across_processes(tmp_path):
    """Four processes hammer one key at once, each trying as many hits as
    the limit: exactly the limit is admitted (a get-then-set cache counter
    would let overlapping hits through). Each waits for the go file once
    all are ready, and goes on past its first hit only once every process
    has made its own, so that the hits overlap."""
    children = [subprocess.Popen([sys.executable, "-c", CHILD.replace("LIMIT", str(LIMIT)), str(tmp_path / "t.sqlite3"),
                                  str(tmp_path), str(n), str(WINDOW_START.timestamp())], stdout=subprocess.PIPE,
                                 text=True, cwd=Path(__file__).resolve().parents[2])
                for n in range(4)]
    for child in children:  # Django set up and the counter file open in each
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    (tmp_path / "go").touch()
    admitted = [int(child.communicate(timeout=60)[0]) for child in children]
    assert sum(admitted) == LIMIT and all(child.returncode == 0 for child in children), admitted


OPENER = """
import os, sys, time
import django
django.setup()
from leases.api.throttling import SlidingWindowCounter
folder, rounds = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
for n in range(rounds):  # each round a new file: the processes race to make it a WAL database
    while not os.path.exists(f"{folder}/go-{n}"):
        time.sleep(0.0005)
    SlidingWindowCounter(f"{folder}/t-{n}.sqlite3")._connection()
print("ok")
"""


@sqlite_counter
def test_processes_opening_a_new_counter_file_together_all_get_it(tmp_path):
    """Workers starting together each open the new counter file at their
    first request: SQLite refuses all but one of the racing switches to WAL
    at once ("database is locked", no busy wait), which was a 500."""
    rounds = 30
    children = [subprocess.Popen([sys.executable, "-c", OPENER, str(tmp_path), str(rounds)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 cwd=Path(__file__).resolve().parents[2])
                for _ in range(8)]
    for child in children:  # Django set up in each
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    for n in range(rounds):
        (tmp_path / f"go-{n}").touch()
        time.sleep(0.03)  # each round a fresh race: all children done with the last file
    outcomes = [child.communicate(timeout=60) for child in children]
    assert all(out.strip() == "ok" for out, _ in outcomes), [err[-500:] for _, err in outcomes if err]


def test_on_postgresql_the_database_counts(db):
    """Instances on other hosts share the database, not a file."""
    assert isinstance(counter(), DatabaseCounter if connection.vendor == "postgresql" else SlidingWindowCounter)


def test_the_database_counter_is_exact_across_connections(transactional_db):
    """Four connections (as four instances would have) hit one key at once,
    each trying as many hits as the limit: exactly the limit is admitted and
    the refused hits are not counted. Each connects before the barrier and
    goes on past its first hit only once all have made theirs, so they race."""
    go, first = threading.Barrier(4), threading.Barrier(4)
    admitted = []

    def hammer():
        hit = lambda: DatabaseCounter().hit("shared", limit=50, period=3600, now=WINDOW_START.timestamp()) is None  # noqa: E731
        try:
            connection.ensure_connection()
            go.wait()
            mine = int(hit())
            first.wait()  # every connection has hit once before any goes on: they hammer together
            admitted.append(mine + sum(hit() for _ in range(49)))
        finally:
            connection.close()

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(admitted) == 50, admitted
    from leases.models import ApiRateCount

    assert ApiRateCount.objects.get(key="shared").count == 50


class _Spy:
    """A shared counter, its calls counted (what a process writes to it)."""

    def __init__(self, shared):
        self.shared, self.calls, self.path = shared, 0, getattr(shared, "path", "")

    def hit(self, *args, **kwargs):
        self.calls += 1
        return self.shared.hit(*args, **kwargs)

    def counted(self, *args, **kwargs):
        self.calls += 1
        return self.shared.counted(*args, **kwargs)


@pytest.mark.parametrize("kind", ["file", "database"])
def test_a_large_limit_is_counted_in_shares_within_one_percent_per_process(tmp_path, kind, request):
    """Two processes (two LocalShares on one shared counter), taking turns:
    each writes to the shared counter about once per 1% of the limit, not
    per hit; together they admit the limit, and at most 1% per process
    more; then both refuse."""
    from leases.api.throttling import LocalShares

    if kind == "database":
        request.getfixturevalue("db")
    shared = SlidingWindowCounter(str(tmp_path / "t.sqlite3")) if kind == "file" else DatabaseCounter()
    processes = [(LocalShares(), _Spy(shared)), (LocalShares(), _Spy(shared))]
    now, limit = WINDOW_START.timestamp() + 1, 1000
    admitted = 0
    for i in range(limit):
        shares, spy = processes[i % 2]
        admitted += shares.hit(spy, "k", limit=limit, period=60, now=now + i * 1e-4) is None
    assert admitted == limit
    assert all(spy.calls <= limit // 2 // 10 + 1 for _, spy in processes), [spy.calls for _, spy in processes]
    for i in range(limit, 2 * limit):  # past the limit each refusal is the shared counter's
        shares, spy = processes[i % 2]
        admitted += shares.hit(spy, "k", limit=limit, period=60, now=now + i * 1e-4) is None
    assert limit <= admitted <= limit * 1.02
    last = [shares.hit(spy, "k", limit=limit, period=60, now=now + 1) for shares, spy in processes]
    assert all(wait is not None and wait > 0 for wait in last)


def test_shares_are_handed_over_within_a_second(tmp_path):
    """A process's share is counted in the shared counter at its next hit a
    second later at the latest, however few hits it has made."""
    from leases.api.throttling import SYNC_SECONDS, LocalShares

    spy = _Spy(SlidingWindowCounter(str(tmp_path / "t.sqlite3")))
    shares, now = LocalShares(), WINDOW_START.timestamp() + 1
    assert [shares.hit(spy, "k", limit=1000, period=60, now=now) for _ in range(3)] == [None] * 3
    assert spy.calls == 1  # the first hit read the counts; two are this process's share
    assert shares.hit(spy, "k", limit=1000, period=60, now=now + SYNC_SECONDS) is None
    assert spy.calls == 2
    assert spy.shared.counted("k", limit=1000, period=60, now=now + SYNC_SECONDS)[2] == 5  # 4, and this one


def test_a_count_that_may_not_wait_finds_a_locked_counter_file_busy_at_once(tmp_path):
    """A count that may not wait (the lean path's, which the event loop may
    run) finds another holder of the counter file's lock CounterBusy at once,
    whether its thread has a connection yet or not, and counts nothing; a
    count that may wait (the view's, in a lane thread) waits for the lock and
    goes on; a free file is counted at once either way."""
    import sqlite3

    from leases.api.throttling import CounterBusy

    path = str(tmp_path / "t.sqlite3")
    SlidingWindowCounter(path).hit("made", limit=10, period=60, now=1000.0)  # the file, as another process made it
    counter = SlidingWindowCounter(path)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def refused_without_waiting() -> None:
        other.execute("BEGIN IMMEDIATE")  # another process's count in progress
        try:
            with pytest.raises(CounterBusy):
                counter.hit("p", limit=10, period=60, now=1000.0, waits=False)
        finally:
            other.execute("ROLLBACK")

    try:
        refused_without_waiting()  # no connection in this thread yet
        assert counter.hit("p", limit=10, period=60, now=1000.0, waits=False) is None  # the lock free: counted
        refused_without_waiting()  # with its connection
        other.execute("BEGIN IMMEDIATE")
        released_at: list[float] = []

        def release() -> None:
            released_at.append(time.monotonic())
            other.execute("COMMIT")

        released = threading.Timer(0.2, release)  # the other count's length, not a check
        released.start()
        assert counter.hit("p", limit=10, period=60, now=1000.0) is None  # may wait: waits for the lock
        answered_at = time.monotonic()
        released.join()
        assert released_at[0] <= answered_at  # it was answered only once the lock was let go
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()
    assert counter.counted("p", limit=10, period=60, now=1000.0)[2] == 3  # the refused tries counted nothing


def test_hits_a_process_admitted_on_its_own_are_kept_when_the_counter_is_busy(tmp_path):
    """The hits a process admits within its share of the limit are handed
    to the shared counter at the next sync. A sync that may not wait and
    finds the counter file busy (CounterBusy) loses none of them: the next
    sync counts them all."""
    import sqlite3

    from leases.api.throttling import CounterBusy, LocalShares

    path = str(tmp_path / "t.sqlite3")
    counter, shares = SlidingWindowCounter(path), LocalShares()
    limit, period = 1000, 60  # a share of 10 hits a process admits on its own
    assert shares.hit(counter, "p", limit=limit, period=period, now=1000.0) is None  # synced: 1 counted
    for i in range(5):
        assert shares.hit(counter, "p", limit=limit, period=period, now=1000.1 + i / 100) is None  # kept here
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(CounterBusy):  # a second later: a sync, refused
            shares.hit(counter, "p", limit=limit, period=period, now=1001.5, waits=False)
    finally:
        other.execute("ROLLBACK")
    assert shares.hit(counter, "p", limit=limit, period=period, now=1001.6) is None  # synced again
    total, = other.execute("SELECT sum(count) FROM hits WHERE key = 'p'").fetchone()
    other.close()
    assert total == 1 + 5 + 1
