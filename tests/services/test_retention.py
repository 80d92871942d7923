"""History retention: the policy, the batches, the command, the background
pruner. Retention deletes exactly the events past the horizon, nothing else,
also while lease traffic runs; "who held it at T" keeps answering for the
kept period."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from leases.operations import duties, retention
from leases.services import selectors
from leases import services
from leases.models import HistoryHorizon, LeaseEvent
from leases import conf
from leases.conf.env import parse_duration
from leases.operations.retention import Policy
from leases.services import Actor, ResourceRef

pytestmark = pytest.mark.also_postgres

ACCOUNT = "devstoreaccount1"
APP = Actor(name=f"account:{ACCOUNT}", via="azure")
BOX = ResourceRef(ACCOUNT, "box")


@pytest.mark.parametrize("text, seconds", [("30d", 30 * 86400), ("7", 7 * 86400), ("12h", 43200), ("90m", 5400),
                                           ("60s", 60), ("1.5h", 5400), (" 2d ", 172800)])
def test_durations(text, seconds):
    assert parse_duration(text, "X") == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "forever", "FOREVER", None])
def test_keep_forever(text):
    assert parse_duration(text, "X") is None


@pytest.mark.parametrize("text", ["-1d", "7w", "abc", "1d2h", "d"])
def test_bad_durations_are_refused_with_the_variable_named(text):
    with pytest.raises(ValueError, match="LEASEHOLD_RETENTION_RENEWALS"):
        conf.load({"LEASEHOLD_RETENTION_RENEWALS": text})


def test_default_policy_keeps_renewals_a_day_and_everything_else_for_ever():
    policy = Policy.from_settings(conf.load({}))
    assert (policy.renewals, policy.events) == (timedelta(days=1), None)
    forever = Policy.from_settings(conf.load({"LEASEHOLD_RETENTION_RENEWALS": "forever"}))
    assert not forever.prunes and forever.horizon(services.clock.now()) is None


@pytest.fixture
def timeline(transactional_db, clock):
    """Events over three days at known times; returns (t0, now)."""
    t0 = clock.freeze()
    services.account_ensure(name=ACCOUNT, key1="a2V5")
    services.container_create(account=ACCOUNT, name="box")
    lease = services.lease_acquire(ref=BOX, actor=APP, duration=60).lease_id  # t0: acquire
    for _ in range(3):  # t0 + 30 s ... 90 s: renewals
        clock.advance(30)
        services.lease_renew(ref=BOX, actor=APP, lease_id=lease)
    with pytest.raises(Exception):
        services.lease_acquire(ref=BOX, actor=APP, duration=60)  # a refusal, t0 + 90 s
    clock.advance(2 * 86400)  # two days later
    lease = services.lease_acquire(ref=BOX, actor=APP, duration=-1).lease_id  # the old lease expired long ago
    clock.advance(7200)
    services.lease_renew(ref=BOX, actor=APP, lease_id=lease)
    return t0, clock.now()


def kept():
    return list(LeaseEvent.objects.order_by("id").values_list("action", "outcome", "occurred_at"))


def test_prune_deletes_exactly_the_events_past_each_retention(timeline):
    t0, now = timeline
    everything = kept()
    policy = Policy(renewals=timedelta(hours=1), events=timedelta(days=1), batch=2)
    deleted = retention.prune(policy, now=now, pace=False)
    expected = [e for e in everything if not (
        (e[0] == "renew" and e[1] == "success" and e[2] < now - timedelta(hours=1))
        or (not (e[0] == "renew" and e[1] == "success") and e[2] < now - timedelta(days=1)))]
    assert kept() == expected
    assert deleted == len(everything) - len(expected) > 0
    # Day one (acquire, renewals, refusal) is gone; the acquire of two hours ago and the renewal now stay.
    assert [(a, when) for a, _, when in expected] == [("acquire", now - timedelta(hours=2)), ("renew", now)]
    horizons = dict(HistoryHorizon.objects.values_list("id", "delete_before"))
    assert horizons == {HistoryHorizon.RENEWALS: now - timedelta(hours=1), HistoryHorizon.OTHERS: now - timedelta(days=1)}


def test_renewals_only_policy_keeps_every_other_event(timeline):
    _, now = timeline
    everything = kept()
    retention.prune(Policy(renewals=timedelta(minutes=1)), now=now, pace=False)
    assert kept() == [e for e in everything if e[0] != "renew" or e[2] == now]
    refusals = LeaseEvent.objects.filter(outcome="refused")
    assert refusals.count() == 1


def test_nothing_is_pruned_by_default(timeline):
    _, now = timeline
    everything = kept()
    assert retention.prune(Policy(), now=now, pace=False) == 0
    assert kept() == everything and not HistoryHorizon.objects.exists()


def test_holder_at_answers_for_the_kept_period(timeline):
    _, now = timeline
    retention.prune(Policy(renewals=timedelta(days=1), events=timedelta(days=1)), now=now, pace=False)
    assert LeaseEvent.objects.filter(occurred_at__lt=now - timedelta(days=1)).count() == 0
    held = selectors.holder_at(account=ACCOUNT, container="box", when=now - timedelta(minutes=1))
    assert held is not None and held["holder"] == APP.name and held["until"] is None


def test_the_command_prunes_by_the_policy_and_its_options(timeline, leasehold_env, capsys):
    _, now = timeline
    everything = kept()
    leasehold_env(LEASEHOLD_RETENTION_RENEWALS="forever")
    call_command("leasehold_prune")
    assert "keeps every event" in capsys.readouterr().out and kept() == everything
    leasehold_env(LEASEHOLD_RETENTION_RENEWALS="1m")
    call_command("leasehold_prune", "--no-pause")
    out = capsys.readouterr().out
    remaining = [e for e in everything if e[0] != "renew" or e[2] == now]
    assert f"Pruned {len(everything) - len(remaining)} lease events" in out
    assert kept() == remaining
    call_command("leasehold_prune", "--events", "1d", "--batch", "1", "--no-pause")
    assert kept() == [e for e in remaining if e[2] >= now - timedelta(days=1)]


@pytest.mark.parametrize("args", [["--events", "soon"], ["--renewals", "-3d"], ["--events", "1d", "--batch", "0"]])
def test_the_command_refuses_bad_options(transactional_db, args):
    with pytest.raises(CommandError):
        call_command("leasehold_prune", *args)


def test_prune_runs_beside_lease_traffic_and_deletes_only_past_the_horizon(transactional_db, clock):
    """A backlog of old events pruned in small batches while another thread
    renews leases: every renewal succeeds, every old event goes, every new
    event stays."""
    now = clock.freeze()
    services.account_ensure(name=ACCOUNT, key1="a2V5")
    services.container_create(account=ACCOUNT, name="box")
    old = now - timedelta(days=10)
    LeaseEvent.objects.bulk_create([
        LeaseEvent(occurred_at=old + timedelta(seconds=i), action="renew" if i % 3 else "acquire",
                   outcome="success", resource_type="container", account=ACCOUNT, container="old",
                   status_code=200) for i in range(3000)], batch_size=500)
    lease = services.lease_acquire(ref=BOX, actor=APP, duration=-1).lease_id
    renewals = 200
    errors: list[BaseException] = []

    def traffic():
        try:
            for _ in range(renewals):
                services.lease_renew(ref=BOX, actor=APP, lease_id=lease)
        except BaseException as err:  # noqa: BLE001 (reported below)
            errors.append(err)
        finally:
            connection.close()

    thread = threading.Thread(target=traffic)
    thread.start()
    deleted = retention.prune(Policy(renewals=timedelta(days=1), events=timedelta(days=1), batch=50, pause=0),
                              now=now)
    thread.join()
    assert errors == []
    assert deleted == 3000
    assert not LeaseEvent.objects.filter(container="old").exists()
    assert LeaseEvent.objects.filter(container="box", action="renew").count() == renewals
    assert LeaseEvent.objects.filter(container="box", action="acquire").count() == 1


def _in_thread(fn):
    """``fn()`` in a thread of its own, as another process would: its own
    database connection (closed after). Its result."""
    out = []

    def run():
        try:
            out.append(fn())
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return out[0]


def test_one_duty_holder_per_database(transactional_db):
    """The duty lock (pruning, blob GC) is the database's: held by one
    connection at a time, whichever process or instance it belongs to
    (a var dir of its own each: nothing of theirs is in the lock), free
    again once the holder lets go or its connection ends."""
    held = duties.DutyLock()
    assert held.acquire()
    try:
        assert _in_thread(lambda: duties.DutyLock().acquire()) is False
    finally:
        held.release()
    other = duties.DutyLock()
    assert _in_thread(other.acquire) is True  # and never released: its holder "died"
    if connection.vendor == "sqlite":
        other.release()  # as the kernel does when its process ends
    # On PostgreSQL the holder's connection ended with its thread, and its lock with it.
    again = duties.DutyLock()
    assert again.acquire(wait=5)
    again.release()
    if connection.vendor == "sqlite":  # keyed by the database file, not the var dir
        assert duties.lock_path() == f"{connection.settings_dict['NAME']}.retention.lock"


def test_pruners_take_turns(transactional_db, clock, monkeypatch):
    """Pruners of four processes, each trying every 10 ms: never two rounds
    at once, and pruning still gets done."""
    now = clock.freeze()
    LeaseEvent.objects.bulk_create([
        LeaseEvent(occurred_at=now - timedelta(days=2, seconds=i), action="renew", outcome="success",
                   resource_type="container", account=ACCOUNT, container="old", status_code=200) for i in range(40)])
    active, most, rounds = [0], [0], [0]
    guard = threading.Lock()
    real = retention.prune

    def watched(*args, **kwargs):
        with guard:
            active[0] += 1
            most[0] = max(most[0], active[0])
        try:
            threading.Event().wait(0.02)  # long enough for the others to try meanwhile
            return real(*args, now=now, pace=False)
        finally:
            with guard:
                active[0] -= 1
                rounds[0] += 1

    monkeypatch.setattr(retention, "prune", watched)
    pruners = [retention.Pruner(Policy(renewals=timedelta(days=1), batch=5), idle=0.01) for _ in range(4)]
    for pruner in pruners:
        pruner.start()
    try:
        for _ in range(500):
            if rounds[0] >= 12:
                break
            threading.Event().wait(0.01)
    finally:
        for pruner in pruners:
            pruner.stop()
        for pruner in pruners:
            pruner.join(10)
    assert rounds[0] >= 12 and most[0] == 1, (rounds, most)
    assert not LeaseEvent.objects.filter(container="old").exists()


def test_the_pruner_thread_prunes(transactional_db, clock, tmp_path):
    now = clock.freeze()
    LeaseEvent.objects.bulk_create([
        LeaseEvent(occurred_at=now - timedelta(days=2, seconds=i), action="renew", outcome="success",
                   resource_type="container", account=ACCOUNT, container="old", status_code=200) for i in range(10)])
    LeaseEvent.objects.create(occurred_at=now, action="renew", outcome="success", resource_type="container",
                              account=ACCOUNT, container="new", status_code=200)
    pruner = retention.Pruner(Policy(renewals=timedelta(days=1), batch=3, pause=0), idle=0.01)
    pruner.start()
    try:
        for _ in range(500):
            if not LeaseEvent.objects.filter(container="old").exists():
                break
            threading.Event().wait(0.01)
    finally:
        pruner.stop()
        pruner.join(10)
    assert list(LeaseEvent.objects.values_list("container", flat=True)) == ["new"]


# ------------------------------------------------------------------ backups (README: running it for months)

@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_online_backup_while_leases_are_renewed(transactional_db, clock, tmp_path, capsys):
    """manage.py leasehold_backup copies the database while another thread
    renews a lease: the copy is a consistent, migrated database with at
    least every event committed before it started."""
    import sqlite3

    from leases.api import health

    services.account_ensure(name=ACCOUNT, key1="a2V5")
    services.container_create(account=ACCOUNT, name="box")
    lease = services.lease_acquire(ref=BOX, actor=APP, duration=-1).lease_id
    stop = threading.Event()
    errors: list[BaseException] = []

    def traffic():
        try:
            while not stop.is_set():
                services.lease_renew(ref=BOX, actor=APP, lease_id=lease)
        except BaseException as err:  # noqa: BLE001 (reported below)
            errors.append(err)
        finally:
            connection.close()

    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        committed = LeaseEvent.objects.count()
        target = tmp_path / "backup.sqlite3"
        call_command("leasehold_backup", str(target))
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert "Backed up" in capsys.readouterr().out
    copy = sqlite3.connect(target)
    assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert copy.execute("SELECT count(*) FROM leases_leaseevent").fetchone()[0] >= committed
    copy.close()
    from django.db import connections

    from engines.sqlite.base import DatabaseWrapper

    probe = connections["probe"] = DatabaseWrapper({**connection.settings_dict, "NAME": str(target)}, alias="probe")
    try:
        assert health.readiness_problems(probe) == []  # migrated, triggers included
    finally:
        probe.close()
        del connections["probe"]


def test_backup_refuses_to_overwrite_the_database(transactional_db):
    expected = "must not overwrite" if connection.vendor == "sqlite" else "on PostgreSQL use pg_dump"
    with pytest.raises(CommandError, match=expected):
        call_command("leasehold_backup", str(connection.settings_dict["NAME"]))


@pytest.mark.processes
@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_the_production_server_prunes_in_the_background(tmp_path):
    """python -m config.serve with two workers and a retention policy: the
    old events go, the server's own recent ones stay, leases keep working."""
    import sqlite3
    import time as wall

    from tests import azure_raw
    from tests.processes.test_processes import Server

    server = Server(tmp_path, workers=2).migrate()
    server.env.update(LEASEHOLD_RETENTION_RENEWALS="1d", LEASEHOLD_RETENTION_EVENTS="2d",
                      LEASEHOLD_RETENTION_IDLE="0.2", LEASEHOLD_RETENTION_BATCH="100")
    db = sqlite3.connect(server.db)
    with db:
        db.executemany(
            "INSERT INTO leases_leaseevent (occurred_at, action, outcome, resource_type, account, container, blob, "
            "state_before, state_after, status_code, error_code, actor, via, reason, request_id, client_request_id, "
            "remote_addr, user_agent) VALUES (datetime('now', ?), ?, 'success', 'container', 'devstoreaccount1', "
            "'old', '', '', '', 200, '', '', '', '', '', '', '', '')",
            [(f"-{days} days", action) for days, action in ((3, "acquire"), (1.5, "renew"), (1.5, "acquire"))
             for _ in range(400)])
    server.start()
    try:
        base = server.url
        assert azure_raw.signed("PUT", base, "/devstoreaccount1/fresh?restype=container").status_code == 201
        assert azure_raw.lease(base, "/devstoreaccount1/fresh", "acquire", duration=-1).status_code == 201
        deadline = wall.monotonic() + 60
        left = None
        while wall.monotonic() < deadline:
            left = db.execute("SELECT action, count(*) FROM leases_leaseevent WHERE container = 'old' "
                              "GROUP BY action").fetchall()
            if left == [("acquire", 400)]:
                break
            wall.sleep(0.2)
        # 3-day-old events and 1.5-day-old renewals pruned; 1.5-day-old acquires kept (2 days).
        assert left == [("acquire", 400)]
        assert db.execute("SELECT count(*) FROM leases_leaseevent WHERE container = 'fresh'").fetchone()[0] == 1
        assert db.execute("SELECT delete_before > datetime('now', '-1 day', '-1 minute') FROM "
                          "leases_historyhorizon").fetchone()[0] == 1
    finally:
        server.kill()
        db.close()


@pytest.mark.parametrize("size, held, most, expected", [
    (25, retention.HOLD_TARGET / 4, 100, 50),  # fast deletes: grows, at most doubling
    (80, retention.HOLD_TARGET / 4, 100, 100),  # never past LEASEHOLD_RETENTION_BATCH
    (40, retention.HOLD_TARGET * 2, 100, 20),  # slow: shrinks towards the target
    (40, retention.HOLD_TARGET * 100, 100, 20),  # one very slow batch halves it, no more
    (1, retention.HOLD_TARGET * 100, 100, 1),  # never below one row
    (30, retention.HOLD_TARGET * 30 / 33, 100, 33),  # near the target: scaled to it
    (10, 0.0, 100, 20),  # nothing measurable: grows
])
def test_batches_are_sized_to_hold_the_write_lock_about_the_target(size, held, most, expected):
    assert retention.next_batch_size(size, held, most) == expected


def test_unpaced_pruning_uses_whole_batches(db, clock, monkeypatch):
    """A one-off run on a stopped server (leasehold_prune --no-pause) has
    nobody to make way for: every transaction deletes the full batch."""
    now = clock.freeze()
    LeaseEvent.objects.bulk_create([
        LeaseEvent(occurred_at=now - timedelta(days=2, seconds=i), action="renew", outcome="success",
                   resource_type="container", account=ACCOUNT, container="old", status_code=200) for i in range(7)])
    sizes = []
    real = retention._prune_batch

    def counting(policy, now, limit, floors=None):
        sizes.append(limit)
        return real(policy, now, limit, floors)

    monkeypatch.setattr(retention, "_prune_batch", counting)
    assert retention.prune(Policy(renewals=timedelta(days=1), batch=3), now=now, pace=False) == 7
    assert sizes == [3, 3, 3]


def test_batches_continue_where_the_last_stopped_without_skipping_ties(db, clock):
    """On PostgreSQL each batch starts from the newest event the previous one
    deleted: events sharing that instant are not skipped."""
    now = clock.freeze()
    LeaseEvent.objects.bulk_create([
        LeaseEvent(occurred_at=now - timedelta(days=2, seconds=i // 4), action="renew", outcome="success",
                   resource_type="container", account=ACCOUNT, container="old", status_code=200) for i in range(10)])
    assert retention.prune(Policy(renewals=timedelta(days=1), batch=3, pause=0), now=now) == 10
    assert not LeaseEvent.objects.filter(container="old").exists()
