"""Lease id fingerprints (leases/domain/fingerprints.py): what they are, that the
history records them and never the ids, and that migration 0011 gives the
events recorded before it their fingerprints, leaving the history
append-only. Runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import hashlib
import importlib
import uuid

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from leases.domain import fingerprints
from leases.models import history_triggers
from leases import services
from leases.operations.logformat import without_lease_ids
from leases.models import LeaseEvent
from leases.services import Actor, ResourceRef

pytestmark = pytest.mark.also_postgres

ACCOUNT = "devstoreaccount1"
ACTOR = Actor(name=f"account:{ACCOUNT}", via="azure")
BLOB = ResourceRef(ACCOUNT, "prints", "job.lock")
ID = "ca761232-ed42-11ce-bacd-00aa0057b223"


def test_a_fingerprint_is_the_start_of_the_sha256_of_the_canonical_id():
    expected = hashlib.sha256(ID.encode()).hexdigest()[:12]
    assert fingerprints.of(ID) == fingerprints.of(uuid.UUID(ID)) == expected
    assert fingerprints.of(None) == ""
    for spelling in (ID, ID.upper(), ID.replace("-", ""), "{" + ID + "}", "(" + ID.upper() + ")", f" {ID} "):
        assert fingerprints.from_term(spelling) == expected, spelling
    assert fingerprints.from_term(expected) == expected
    assert fingerprints.from_term(expected.upper()) == expected
    for not_one in ("", "abc", ID[:8], expected[:11], expected + "0", "g" * 12, ID + "0"):
        assert fingerprints.from_term(not_one) is None, not_one
    assert fingerprints.of_id_text(expected) is None  # a fingerprint is no id


def test_an_access_log_line_shows_the_fingerprint_of_a_lease_id_in_the_query():
    line = f'127.0.0.1:5 - "GET /api/v1/blobs/a/c/b?x=1&lease_id={ID.upper()}&y=2 HTTP/1.1" 200'
    assert without_lease_ids(line) == (f'127.0.0.1:5 - "GET /api/v1/blobs/a/c/b?x=1&lease_id=fingerprint:'
                                       f'{fingerprints.of(ID)}&y=2 HTTP/1.1" 200')
    assert without_lease_ids(f"/x?lease_id=%7B{ID}%7D") == f"/x?lease_id=fingerprint:{fingerprints.of(ID)}"
    assert without_lease_ids("/x?lease_id=nope") == "/x?lease_id=nope"  # no id: nothing to hide
    assert without_lease_ids("/x?proposed=1") == "/x?proposed=1"


@pytest.fixture
def blob(transactional_db, clock):
    services.account_ensure(name=ACCOUNT, key1="a2V5")
    services.container_create(account=ACCOUNT, name=BLOB.container)
    services.blob_put(ref=BLOB, actor=ACTOR, content=b"x")
    return BLOB


def test_the_history_records_fingerprints_of_every_id_an_action_names(blob):
    first, second = uuid.uuid4(), uuid.uuid4()
    services.lease_acquire(ref=blob, actor=ACTOR, duration=15, proposed_lease_id=first)
    services.lease_change(ref=blob, actor=ACTOR, lease_id=first, proposed_lease_id=second)
    with pytest.raises(services.LeaseholdError):
        services.lease_release(ref=blob, actor=ACTOR, lease_id=first)
    services.lease_break(ref=blob, actor=ACTOR, break_period=0)
    rows = list(LeaseEvent.objects.filter(blob=blob.blob).exclude(action="put-blob").order_by("id")
                .values_list("action", "outcome", "lease_fingerprint", "proposed_lease_fingerprint"))
    assert rows == [
        ("acquire", "success", fingerprints.of(first), fingerprints.of(first)),
        ("change", "success", fingerprints.of(first), fingerprints.of(second)),
        ("release", "refused", fingerprints.of(first), None),
        ("break", "success", fingerprints.of(second), None)]


# The migration 0011 follows: migrate back to it, then forward.
PARENT = importlib.import_module("leases.migrations.0012_lease_fingerprints").Migration.dependencies[0][1]


def test_the_migration_gives_recorded_events_their_fingerprints_and_keeps_the_history_append_only(
        transactional_db):
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes("leases")
    executor.migrate([("leases", PARENT)])
    try:
        Event = executor.loader.project_state([("leases", PARENT)]).apps.get_model("leases", "LeaseEvent")
        from django.utils import timezone

        common = dict(occurred_at=timezone.now(), outcome="success", resource_type="blob", account="a",
                      container="c", blob="b", status_code=200)
        Event.objects.create(action="change", lease_id=uuid.UUID(ID), proposed_lease_id=uuid.UUID(int=7), **common)
        Event.objects.create(action="put-blob", **common)
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(leaves)
    rows = list(LeaseEvent.objects.order_by("id").values_list("action", "lease_fingerprint",
                                                              "proposed_lease_fingerprint"))
    assert rows == [("change", fingerprints.of(ID), fingerprints.of(uuid.UUID(int=7))), ("put-blob", None, None)]
    with connection.cursor() as cursor:
        assert history_triggers.missing(connection, cursor) == []
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("UPDATE leases_leaseevent SET lease_fingerprint = 'x'")
