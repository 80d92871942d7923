"""Lease history is append-only in the database itself: UPDATE, DELETE and
REPLACE of events are refused by triggers (migration 0004) whatever code
sends them, except a DELETE of events older than the retention horizon,
which only moves forwards; the ORM's bulk delete and update refuse too; and
attempts through the API and the admin are refused and recorded."""

from __future__ import annotations

import importlib
import uuid
from datetime import timedelta

import pytest
from django.db import DatabaseError, IntegrityError, ProgrammingError, connection, transaction

from leases.domain.errors import LeaseholdError
from leases.operations import retention
from leases import services
from leases.models import HistoryHorizon, LeaseEvent
from leases.services import Actor, ResourceRef
from tests.api.helpers import API, DEV_ACCOUNT, make_container

_triggers = importlib.import_module("leases.migrations.0005_history_append_only")
REFUSED, REFUSED_DELETE, REFUSED_HORIZON = _triggers.REFUSED, _triggers.REFUSED_DELETE, _triggers.REFUSED_HORIZON

# Its API checks count requests in a throttle file of their own, as every API test does.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("throttle_file"), pytest.mark.also_postgres]
APP = Actor(name="account:devstoreaccount1", via="azure")


@pytest.fixture
def events(accounts, clock):
    """Two events: an acquire, then a renew an hour later."""
    clock.freeze()
    make_container("box")
    result = services.lease_acquire(ref=ResourceRef(DEV_ACCOUNT, "box"), actor=APP, duration=60)
    clock.advance(3600)
    services.lease_renew(ref=ResourceRef(DEV_ACCOUNT, "box"), actor=APP, lease_id=result.lease_id)
    first, second = LeaseEvent.objects.filter(action__in=("acquire", "renew")).order_by("id")
    return first, second


# What a trigger's refusal is: SQLite's RAISE(ABORT) is a constraint failure
# (IntegrityError); PostgreSQL's RAISE EXCEPTION is SQLSTATE P0001
# raise_exception (psycopg: ProgrammingError). A syntax error, a missing table or a
# lock timeout is a DatabaseError too, and must not pass for a refusal.
REFUSALS = {"sqlite": (IntegrityError, None), "postgresql": (ProgrammingError, "P0001")}
TRIGGER_MESSAGES = (REFUSED, REFUSED_DELETE, REFUSED_HORIZON)


def refused(sql: str, params=()):
    """Run ``sql``; assert a history trigger refused it (its error class,
    SQLSTATE and one of its messages); return the message."""
    with pytest.raises(DatabaseError) as info:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, params)
    kind, sqlstate = REFUSALS[connection.vendor]
    assert type(info.value) is kind, repr(info.value)
    if sqlstate is not None:
        assert info.value.__cause__.sqlstate == sqlstate, repr(info.value.__cause__)
    message = str(info.value)
    assert any(text in message for text in TRIGGER_MESSAGES), message
    return message


def count() -> int:
    return LeaseEvent.objects.count()


def test_sql_update_is_refused(events):
    first, _ = events
    assert "append-only" in refused("UPDATE leases_leaseevent SET actor = 'forged' WHERE id = %s", [first.id])
    assert LeaseEvent.objects.get(pk=first.pk).actor == APP.name


def test_sql_delete_is_refused_without_a_horizon(events):
    before = count()
    assert not HistoryHorizon.objects.exists()
    assert "retention horizon" in refused("DELETE FROM leases_leaseevent")
    assert count() == before


@pytest.mark.skipif("connection.vendor != 'sqlite'")
def test_insert_or_replace_of_an_event_is_refused(events):
    first, _ = events
    message = refused(
        "INSERT OR REPLACE INTO leases_leaseevent (id, occurred_at, action, outcome, resource_type, account, "
        "container, blob, status_code, error_code, actor, via, reason, request_id, client_request_id, "
        "remote_addr, user_agent, state_before, state_after) "
        "SELECT id, occurred_at, action, outcome, resource_type, account, container, blob, status_code, "
        "error_code, 'forged', via, reason, request_id, client_request_id, remote_addr, user_agent, "
        "state_before, state_after FROM leases_leaseevent WHERE id = %s", [first.id])
    assert "append-only" in message
    assert LeaseEvent.objects.get(pk=first.pk).actor == APP.name


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_upsert_and_truncate_are_refused_on_postgresql(events):
    first, _ = events
    assert REFUSED == refused("INSERT INTO leases_leaseevent SELECT * FROM leases_leaseevent WHERE id = %s "
                              "ON CONFLICT (id) DO UPDATE SET actor = 'forged'", [first.id]).splitlines()[0]
    assert REFUSED == refused("TRUNCATE leases_leaseevent").splitlines()[0]
    assert LeaseEvent.objects.get(pk=first.pk).actor == APP.name


def test_delete_only_before_the_horizon(events):
    first, second = events
    with transaction.atomic():
        retention.advance_horizon(first.occurred_at + timedelta(seconds=1))
    # The younger event stays, whatever the statement asks for.
    refused("DELETE FROM leases_leaseevent WHERE id = %s", [second.id])
    refused("DELETE FROM leases_leaseevent")  # all or nothing: the statement fails as a whole
    assert LeaseEvent.objects.filter(pk__in=[first.pk, second.pk]).count() == 2
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM leases_leaseevent WHERE id = %s", [first.id])
    assert list(LeaseEvent.objects.filter(pk__in=[first.pk, second.pk])) == [second]


def test_each_kind_of_event_is_deleted_by_its_own_horizon(events, clock):
    """Issue 49: one horizon (now minus the shortest retention, renewals' day by default) let a
    writer delete any older event. Each kind now has its own: successful renewals by theirs, every
    other event (a refused renewal too) by the other, and no horizon means none of that kind."""
    acquire, renewal = events
    with pytest.raises(LeaseholdError):  # a renewal with the wrong lease id: refused, and recorded
        services.lease_renew(ref=ResourceRef(DEV_ACCOUNT, "box"), actor=APP, lease_id=uuid.UUID(int=1))
    refusal = LeaseEvent.objects.get(action="renew", outcome="refused")
    clock.advance(60)
    with transaction.atomic():
        retention.advance_horizon(clock.now(), HistoryHorizon.RENEWALS)
    for old in (acquire, refusal):  # older than the renewals' horizon, but not renewals
        assert "append-only" in refused("DELETE FROM leases_leaseevent WHERE id = %s", [old.id])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM leases_leaseevent WHERE id = %s", [renewal.id])
    assert set(LeaseEvent.objects.values_list("id", flat=True)) == {acquire.id, refusal.id}
    with transaction.atomic():
        retention.advance_horizon(acquire.occurred_at + timedelta(seconds=1), HistoryHorizon.OTHERS)
    refused("DELETE FROM leases_leaseevent WHERE id = %s", [refusal.id])  # younger than the others' horizon
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM leases_leaseevent WHERE id = %s", [acquire.id])
    assert list(LeaseEvent.objects.values_list("id", flat=True)) == [refusal.id]


def test_the_horizon_only_moves_forwards(events):
    first, _ = events
    later = first.occurred_at + timedelta(seconds=10)
    with transaction.atomic():
        retention.advance_horizon(later)
    # Asking the retention path for an earlier horizon leaves it where it is.
    with transaction.atomic():
        assert retention.advance_horizon(first.occurred_at) == later
    stamp = connection.ops.adapt_datetimefield_value(first.occurred_at)
    assert "forwards" in refused("UPDATE leases_historyhorizon SET delete_before = %s", [stamp])
    if connection.vendor == "sqlite":
        assert "forwards" in refused(
            "INSERT OR REPLACE INTO leases_historyhorizon (id, delete_before) VALUES (1, %s)", [stamp])
    assert HistoryHorizon.objects.get().delete_before == later


def test_orm_delete_and_update_refuse(events):
    first, _ = events
    before = count()
    with pytest.raises(PermissionError):
        LeaseEvent.objects.filter(pk=first.pk).delete()
    with pytest.raises(PermissionError):
        LeaseEvent.objects.all().delete()
    with pytest.raises(PermissionError):
        LeaseEvent.objects.filter(pk=first.pk).update(actor="forged")
    with pytest.raises(PermissionError):
        first.delete()
    first.actor = "forged"
    with pytest.raises(PermissionError):
        first.save()
    assert count() == before
    assert LeaseEvent.objects.get(pk=first.pk).actor == APP.name


def tamper_events():
    return list(LeaseEvent.objects.filter(resource_type="history").order_by("id").values(
        "action", "outcome", "status_code", "error_code", "actor", "via", "reason"))


@pytest.mark.parametrize("method", ["delete", "post", "put", "patch"])
@pytest.mark.parametrize("path", ["events/", "events/export/", "events/holder/"])
def test_api_refuses_and_records_history_changes(events, api, method, path):
    before = count()
    response = getattr(api, method)(f"{API}/{path}", {}, format="json")
    assert response.status_code == 405, response.content
    assert count() == before + 1
    assert tamper_events() == [{
        "action": "history-delete" if method == "delete" else "history-change", "outcome": "refused",
        "status_code": 405, "error_code": "HistoryIsAppendOnly", "actor": "token:root", "via": "api",
        "reason": f"{method.upper()} {API}/{path}"}]


def test_api_reads_are_not_recorded_as_tampering(events, api):
    assert api.get(f"{API}/events/").status_code == 200
    assert tamper_events() == []


def test_admin_refuses_and_records_history_changes(events, client, django_user_model):
    first, _ = events
    client.force_login(django_user_model.objects.create_superuser(username="root", password=None))
    change = f"/admin/leases/leaseevent/{first.pk}/change/"
    delete = f"/admin/leases/leaseevent/{first.pk}/delete/"
    assert client.get(change).status_code == 200  # viewing stays allowed
    assert client.post(change, {"actor": "forged"}).status_code == 403
    assert client.post(delete, {"post": "yes"}).status_code == 403
    assert LeaseEvent.objects.get(pk=first.pk).actor == APP.name
    assert tamper_events() == [
        {"action": "history-change", "outcome": "refused", "status_code": 403, "error_code": "HistoryIsAppendOnly",
         "actor": "user:root", "via": "admin", "reason": f"POST {change} (event {first.pk})"},
        {"action": "history-delete", "outcome": "refused", "status_code": 403, "error_code": "HistoryIsAppendOnly",
         "actor": "user:root", "via": "admin", "reason": f"POST {delete} (event {first.pk})"},
    ]
