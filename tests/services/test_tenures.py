"""Tenures (leases.models.Tenure) through every way a lease begins and ends, written by the lease
write itself; "who held R at T" answered from them, also after retention pruned the renewals
(issue 49's reproduction); the migration's replay of the history gives the same tenures; the
database refuses to change a settled tenure or delete one but by retention."""

from __future__ import annotations

import importlib
import uuid
from datetime import timedelta

import pytest
from django.apps import apps as django_apps
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from leases import services
from leases.domain import fingerprints
from leases.models import HistoryHorizon, LeaseEvent, Tenure
from leases.services import Actor, LeaseholdError, ResourceRef
from leases.models.tenure import end_q, held_at_q
from leases.services.selectors import holder_at

pytestmark = pytest.mark.also_postgres

ACCOUNT = "devstoreaccount1"
APP = Actor(name=f"account:{ACCOUNT}", via="azure", remote_addr="10.0.0.7", client_request_id="job-1")
OTHER = Actor(name="user:bob", via="api", remote_addr="10.0.0.9", client_request_id="job-2")
BOX = ResourceRef(ACCOUNT, "box")
JOB = ResourceRef(ACCOUNT, "box", "job.txt")
MIGRATION = importlib.import_module("leases.migrations.0015_tenures")


@pytest.fixture
def box(transactional_db, clock):
    t0 = clock.freeze()
    services.account_ensure(name=ACCOUNT, key1="a2V5")
    services.container_create(account=ACCOUNT, name="box")
    services.blob_put(ref=JOB, actor=APP, content=b"x")
    return t0


def tenures(ref: ResourceRef) -> list[Tenure]:
    return list(Tenure.objects.filter(account=ref.account, container=ref.container, blob=ref.blob or "")
                .order_by("began_at", "id"))


def at(t0, seconds: float):
    return t0 + timedelta(seconds=seconds)


def test_acquire_renew_change_release_is_one_tenure(box, clock):
    t0 = box
    lease = services.lease_acquire(ref=JOB, actor=APP, duration=15).lease_id
    clock.advance(10)
    services.lease_renew(ref=JOB, actor=OTHER, lease_id=lease)
    clock.advance(2)
    new = uuid.uuid4()
    services.lease_change(ref=JOB, actor=APP, lease_id=lease, proposed_lease_id=new)
    clock.advance(3)
    services.lease_release(ref=JOB, actor=OTHER, lease_id=new)
    [t] = tenures(JOB)
    assert (t.resource_type, t.holder, t.holder_address, t.client_request_id, t.via, t.began_by) == (
        "blob", APP.name, "10.0.0.7", "job-1", "azure", "acquire")
    assert (t.began_at, t.deadline, t.generation) == (t0, at(t0, 25), 1)  # the renewal moved the deadline
    assert t.lease_fingerprint == fingerprints.of(lease)
    assert t.fingerprints == f"{fingerprints.of(lease)} {fingerprints.of(new)}@{at(t0, 12).isoformat()}"
    assert (t.end, t.ended_at, t.ended_by, t.settled_by) == ("released", at(t0, 15), OTHER.name, "release")
    assert str(lease) not in t.fingerprints and str(new) not in t.fingerprints  # never the ids
    held = holder_at(account=ACCOUNT, container="box", blob="job.txt", when=at(t0, 11))
    assert (held["holder"], held["lease_fingerprint"], held["since"]) == (APP.name, fingerprints.of(lease), t0)
    assert holder_at(account=ACCOUNT, container="box", blob="job.txt",
                     when=at(t0, 13))["lease_fingerprint"] == fingerprints.of(new)
    assert holder_at(account=ACCOUNT, container="box", blob="job.txt", when=at(t0, 15)) is None
    assert holder_at(account=ACCOUNT, container="box", blob="job.txt", when=at(t0, -1)) is None


def test_expiry_is_recorded_by_the_next_write_at_the_deadline(box, clock):
    t0 = box
    services.lease_acquire(ref=BOX, actor=APP, duration=15)
    clock.advance(40)
    services.lease_acquire(ref=BOX, actor=OTHER, duration=-1)
    first, second = tenures(BOX)
    assert (first.end, first.ended_at, first.ended_by, first.settled_by) == ("expired", at(t0, 15), "", "acquire")
    assert (second.holder, second.began_at, second.deadline, second.ended_at, second.generation) == (
        OTHER.name, at(t0, 40), None, None, 2)
    assert holder_at(account=ACCOUNT, container="box", when=at(t0, 20)) is None
    assert holder_at(account=ACCOUNT, container="box", when=at(t0, 10**6))["holder"] == OTHER.name  # infinite


def test_an_expired_lease_renewed_resumes_as_a_new_tenure(box, clock):
    t0 = box
    lease = services.lease_acquire(ref=BOX, actor=APP, duration=15).lease_id
    clock.advance(30)
    services.lease_renew(ref=BOX, actor=APP, lease_id=lease)
    first, second = tenures(BOX)
    assert (first.end, first.ended_at, second.began_by, second.began_at, second.generation) == (
        "expired", at(t0, 15), "renew", at(t0, 30), first.generation)
    assert holder_at(account=ACCOUNT, container="box", when=at(t0, 20)) is None  # nobody, in the gap
    assert holder_at(account=ACCOUNT, container="box", when=at(t0, 31))["since"] == at(t0, 30)


def test_break_with_a_period_then_over_by_itself(box, clock):
    t0 = box
    services.lease_acquire(ref=JOB, actor=APP, duration=60)
    clock.advance(5)
    services.lease_break(ref=JOB, actor=OTHER, break_period=10)
    [t] = tenures(JOB)
    assert (t.breaking_since, t.deadline, t.ended_at) == (at(t0, 5), at(t0, 15), None)
    assert holder_at(account=ACCOUNT, container="box", blob="job.txt", when=at(t0, 12))["state"] == "breaking"
    assert holder_at(account=ACCOUNT, container="box", blob="job.txt", when=at(t0, 16)) is None
    clock.advance(20)
    services.lease_acquire(ref=JOB, actor=OTHER, duration=15)
    first, _ = tenures(JOB)
    assert (first.end, first.ended_at, first.ended_by, first.settled_by) == ("broken", at(t0, 15), "", "acquire")


def test_break_at_once_ends_it_then(box, clock):
    t0 = box
    services.lease_acquire(ref=JOB, actor=APP, duration=-1)
    clock.advance(5)
    services.lease_break(ref=JOB, actor=OTHER, break_period=0)
    [t] = tenures(JOB)
    assert (t.end, t.ended_at, t.ended_by, t.settled_by) == ("broken", at(t0, 5), OTHER.name, "break")


def test_a_write_after_expiry_records_the_expiry(box, clock):
    t0 = box
    services.lease_acquire(ref=JOB, actor=APP, duration=15)
    clock.advance(20)
    services.blob_put(ref=JOB, actor=OTHER, content=b"y")
    [t] = tenures(JOB)
    assert (t.end, t.ended_at, t.ended_by, t.settled_by) == ("expired", at(t0, 15), "", "ended-by-write")


def test_deletes_end_the_leases_they_delete(box, clock):
    t0 = box
    lease = services.lease_acquire(ref=JOB, actor=APP, duration=60).lease_id
    clock.advance(1)
    services.blob_delete(ref=JOB, actor=OTHER, lease_id=lease)
    [t] = tenures(JOB)
    assert (t.end, t.ended_at, t.ended_by, t.settled_by) == ("ended-by-delete", at(t0, 1), OTHER.name,
                                                             "ended-by-delete")
    other = ResourceRef(ACCOUNT, "box", "other.txt")
    services.blob_put(ref=other, actor=APP, content=b"x")
    services.lease_acquire(ref=other, actor=APP, duration=-1)
    box_lease = services.lease_acquire(ref=BOX, actor=APP, duration=15).lease_id
    clock.advance(1)
    services.container_delete(ref=BOX, actor=OTHER, lease_id=box_lease)  # blob leases go with it
    for ref in (other, BOX):
        [t] = tenures(ref)
        assert (t.end, t.ended_at, t.ended_by) == ("ended-by-delete", at(t0, 2), OTHER.name)
    assert holder_at(account=ACCOUNT, container="box", blob="other.txt", when=at(t0, 1.5))["holder"] == APP.name


def test_refusals_leave_tenures_alone(box, clock):
    services.lease_acquire(ref=JOB, actor=APP, duration=15)
    before = list(Tenure.objects.values())
    for attempt in (lambda: services.lease_acquire(ref=JOB, actor=OTHER, duration=15),
                    lambda: services.lease_release(ref=JOB, actor=OTHER, lease_id=uuid.uuid4())):
        with pytest.raises(LeaseholdError):
            attempt()
    assert list(Tenure.objects.values()) == before


def test_holder_at_survives_pruning_the_renewals(box, clock):
    """Issue 49: a 15-s lease renewed every 5 s for 20 s; renewals pruned; held at t0 + 17 s."""
    t0 = box
    lease = services.lease_acquire(ref=JOB, actor=APP, duration=15).lease_id
    for _ in range(4):
        clock.advance(5)
        services.lease_renew(ref=JOB, actor=APP, lease_id=lease)
    clock.advance(10)
    call_command("leasehold_prune", "--renewals", "2s", "--no-pause", stdout=open("/dev/null", "w"))
    assert not LeaseEvent.objects.filter(action="renew").exists()
    held = holder_at(account=ACCOUNT, container="box", blob="job.txt", when=at(t0, 17))
    assert held is not None and (held["holder"], held["until"]) == (APP.name, at(t0, 35))


# ------------------------------------------------------------------ the migration's replay

def test_the_migration_builds_the_same_tenures_from_the_history(box, clock):
    lease = services.lease_acquire(ref=JOB, actor=APP, duration=15).lease_id
    clock.advance(5)
    services.lease_renew(ref=JOB, actor=APP, lease_id=lease)
    services.lease_change(ref=JOB, actor=APP, lease_id=lease, proposed_lease_id=uuid.uuid4())
    clock.advance(30)
    services.lease_acquire(ref=JOB, actor=OTHER, duration=20)
    clock.advance(5)
    services.lease_break(ref=JOB, actor=APP, break_period=5)
    clock.advance(10)
    services.blob_put(ref=JOB, actor=APP, content=b"z")
    services.lease_acquire(ref=BOX, actor=APP, duration=-1)
    columns = [f.name for f in Tenure._meta.fields if f.name != "id"]
    live = sorted(Tenure.objects.values_list(*columns))
    with connection.schema_editor() as editor:
        MIGRATION.drop_triggers(editor)
        editor.execute("DELETE FROM leases_tenure")
        MIGRATION.build(django_apps, editor)
        MIGRATION.create_triggers(editor)
    assert sorted(Tenure.objects.values_list(*columns)) == live and len(live) == 3


# ------------------------------------------------------------------ the database's guard

def _sql(statement: str, *params) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)


@pytest.mark.parametrize("change", [
    "UPDATE leases_tenure SET holder = 'user:mallory' WHERE ended_at IS NULL",
    "UPDATE leases_tenure SET began_at = deadline WHERE ended_at IS NULL",
    "UPDATE leases_tenure SET fingerprints = 'aaaaaaaaaaaa' WHERE ended_at IS NULL",  # appended to only
])
def test_the_database_refuses_to_rewrite_a_tenure(box, clock, change):
    lease = services.lease_acquire(ref=JOB, actor=APP, duration=15).lease_id
    services.lease_release(ref=JOB, actor=APP, lease_id=lease)
    services.lease_acquire(ref=BOX, actor=APP, duration=15)  # one open, one settled
    before = sorted(Tenure.objects.values_list("id", "holder", "began_at", "fingerprints", "ended_at"))
    with pytest.raises(DatabaseError, match="tenures are kept"):
        _sql(change)
    with pytest.raises(DatabaseError, match="tenures are kept"):
        _sql("UPDATE leases_tenure SET ended_at = began_at WHERE ended_at IS NOT NULL")  # a settled end
    assert sorted(Tenure.objects.values_list("id", "holder", "began_at", "fingerprints", "ended_at")) == before


def test_only_retention_deletes_and_only_settled_tenures_past_the_horizon(box, clock):
    t0 = box
    lease = services.lease_acquire(ref=JOB, actor=APP, duration=15).lease_id
    services.lease_release(ref=JOB, actor=APP, lease_id=lease)
    services.lease_acquire(ref=BOX, actor=APP, duration=-1)
    with pytest.raises(DatabaseError, match="tenures are kept"):
        _sql("DELETE FROM leases_tenure")
    with pytest.raises(PermissionError):
        Tenure.objects.all().delete()
    HistoryHorizon.objects.create(pk=1, delete_before=at(t0, 1))
    _sql("DELETE FROM leases_tenure WHERE ended_at IS NOT NULL")
    with pytest.raises(DatabaseError, match="tenures are kept"):
        _sql("DELETE FROM leases_tenure")  # the open one stays
    assert [t.blob for t in Tenure.objects.all()] == [""]


@pytest.mark.parametrize("ref", [BOX, JOB], ids=["container", "blob"])
def test_renewals_write_no_tenure_and_every_reader_sees_their_deadline(box, clock, ref):
    """A renewal writes no tenure (decision 0052): its lease row holds the latest deadline, which
    every reader takes (the rows, held_at_q, end_q, holder_at), and the write that ends the tenure
    stores it."""
    t0 = box
    lease = services.lease_acquire(ref=ref, actor=APP, duration=15).lease_id
    for _ in range(3):
        clock.advance(10)
        services.lease_renew(ref=ref, actor=APP, lease_id=lease)
    clock.advance(5)  # t0 + 35; its deadline t0 + 45, the acquire's t0 + 15 long gone
    [t] = tenures(ref)
    assert (t.deadline, t.latest_deadline, t.until(), t.end_at(at(t0, 35))) == (
        at(t0, 15), at(t0, 45), at(t0, 45), ("", at(t0, 45)))
    assert Tenure._base_manager.get(pk=t.pk).latest_deadline == at(t0, 45)  # read without the annotation
    names = {"account": ref.account, "container": ref.container, "blob": ref.blob or ""}
    assert holder_at(**names, when=at(t0, 44))["until"] == at(t0, 45)
    assert holder_at(**names, when=at(t0, 45)) is None
    mine = Tenure.objects.filter(**names)
    assert [mine.filter(held_at_q(at(t0, s))).exists() for s in (-1, 0, 30, 44, 45)] == [False, True, True, True, False]
    assert [mine.filter(end_q("held", at(t0, s))).exists() for s in (35, 44, 45)] == [True, True, False]
    assert [mine.filter(end_q("expired", at(t0, s))).exists() for s in (35, 44, 45)] == [False, False, True]
    clock.advance(25)
    services.lease_acquire(ref=ref, actor=OTHER, duration=15)  # t0 + 60: the expiry recorded, at t0 + 45
    first, _ = tenures(ref)
    assert (first.end, first.ended_at, first.deadline, first.latest_deadline) == (
        "expired", at(t0, 45), at(t0, 45), at(t0, 45))


@pytest.mark.parametrize("ends", ["release", "break", "delete"])
def test_a_tenure_ended_after_renewals_stores_their_deadline(box, clock, ends):
    lease = services.lease_acquire(ref=JOB, actor=APP, duration=20).lease_id
    clock.advance(10)
    services.lease_renew(ref=JOB, actor=APP, lease_id=lease)  # its deadline: now + 20
    renewed = clock.now() + timedelta(seconds=20)
    clock.advance(3)
    if ends == "release":
        services.lease_release(ref=JOB, actor=APP, lease_id=lease)
    elif ends == "break":
        services.lease_break(ref=JOB, actor=OTHER, break_period=0)
    else:
        services.blob_delete(ref=JOB, actor=APP, lease_id=lease)
    [ended] = tenures(JOB)
    assert (ended.end, ended.ended_at, ended.deadline, ended.latest_deadline) == (
        {"release": "released", "break": "broken", "delete": "ended-by-delete"}[ends], clock.now(), renewed, renewed)
