"""Fencing tokens (lease generations) are never handed out twice for a name:
not after a delete and re-create of a container or blob, not after the
history is pruned, kept in a table of their own (models.FencingGeneration)
that the lease transaction writes. Runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import importlib
import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from leases import services
from leases.models import FencingGeneration, LeaseEvent
from leases.services import Actor, ResourceRef

pytestmark = pytest.mark.also_postgres

ACCOUNT = "devstoreaccount1"
ACTOR = Actor(name=f"account:{ACCOUNT}", via="azure")
CONTAINER = ResourceRef(ACCOUNT, "fence")
BLOB = ResourceRef(ACCOUNT, "fence", "job.lock")


@pytest.fixture
def container(transactional_db, clock):
    services.account_ensure(name=ACCOUNT, key1="a2V5")
    services.container_create(account=ACCOUNT, name=CONTAINER.container)
    return CONTAINER


def _acquire_release(ref: ResourceRef) -> int:
    result = services.lease_acquire(ref=ref, actor=ACTOR, duration=15)
    services.lease_release(ref=ref, actor=ACTOR, lease_id=result.lease_id)
    return result.generation


def _prune_history() -> None:
    """What the retention path does to old events: they are gone."""
    from datetime import timedelta

    from leases.domain import clock

    from leases.operations import retention

    everything = retention.Policy(renewals=timedelta(0), events=timedelta(0))
    retention.prune(everything, now=clock.now() + timedelta(days=1), pace=False)
    assert not LeaseEvent.objects.exists()


def test_a_recreated_container_continues_its_sequence(container):
    assert [_acquire_release(container) for _ in range(2)] == [1, 2]
    services.container_delete(ref=container, actor=ACTOR)
    services.container_create(account=ACCOUNT, name=container.container)
    _prune_history()
    assert _acquire_release(container) == 3
    assert FencingGeneration.last(ACCOUNT, container.container) == 3


def test_a_recreated_blob_continues_its_sequence_after_pruning(container):
    services.blob_put(ref=BLOB, actor=ACTOR, content=b"x")
    assert _acquire_release(BLOB) == 1
    services.blob_delete(ref=BLOB, actor=ACTOR)
    _prune_history()
    services.blob_put(ref=BLOB, actor=ACTOR, content=b"y")
    assert _acquire_release(BLOB) == 2
    # the container goes, blobs with it; the names' sequences stay
    services.container_delete(ref=container, actor=ACTOR)
    _prune_history()
    services.container_create(account=ACCOUNT, name=container.container)
    services.blob_put(ref=BLOB, actor=ACTOR, content=b"z")
    assert _acquire_release(BLOB) == 3
    assert _acquire_release(container) == 1  # the container's own sequence is apart from its blobs'


def test_only_a_new_lease_takes_a_token(container, clock):
    services.blob_put(ref=BLOB, actor=ACTOR, content=b"x")
    lease = services.lease_acquire(ref=BLOB, actor=ACTOR, duration=15)
    again = services.lease_acquire(ref=BLOB, actor=ACTOR, duration=15, proposed_lease_id=lease.lease_id)
    renewed = services.lease_renew(ref=BLOB, actor=ACTOR, lease_id=lease.lease_id)
    changed = services.lease_change(ref=BLOB, actor=ACTOR, lease_id=lease.lease_id,
                                    proposed_lease_id=uuid.uuid4())
    broken = services.lease_break(ref=BLOB, actor=ACTOR, break_period=0)
    assert [r.generation for r in (lease, again, renewed, changed, broken)] == [1] * 5
    assert FencingGeneration.last(ACCOUNT, BLOB.container, BLOB.blob) == 1
    assert services.lease_acquire(ref=BLOB, actor=ACTOR, duration=-1).generation == 2
    assert FencingGeneration.last(ACCOUNT, BLOB.container, BLOB.blob) == 2


def test_a_refused_acquire_takes_no_token(container):
    services.blob_put(ref=BLOB, actor=ACTOR, content=b"x")
    services.lease_acquire(ref=BLOB, actor=ACTOR, duration=15)
    with pytest.raises(services.LeaseholdError):
        services.lease_acquire(ref=BLOB, actor=ACTOR, duration=15)
    assert FencingGeneration.last(ACCOUNT, BLOB.container, BLOB.blob) == 1


def test_the_table_wins_over_a_row_that_lags_behind(container):
    """A row whose generation is behind its name's (restored from a backup,
    say) still gets a token above every one handed out."""
    services.blob_put(ref=BLOB, actor=ACTOR, content=b"x")
    FencingGeneration.objects.create(key=FencingGeneration.key_for(ACCOUNT, BLOB.container, BLOB.blob),
                                     account=ACCOUNT, container=BLOB.container, blob=BLOB.blob, generation=41)
    assert _acquire_release(BLOB) == 42


def test_the_azure_door_answers_the_continued_generation(service, clock):
    container = service.create_container("fence")
    blob = container.upload_blob("job.lock", b"x")
    seen: list[str] = []
    hook = lambda response: seen.append(response.http_response.headers.get("Leasehold-Generation"))  # noqa: E731
    blob.acquire_lease(lease_duration=15, raw_response_hook=hook).release()
    blob.delete_blob()
    blob = container.upload_blob("job.lock", b"y")
    blob.acquire_lease(lease_duration=15, raw_response_hook=hook)
    assert seen == ["1", "2"]


# The migration this one follows: migrate back to it, then forward.
PARENT = importlib.import_module("leases.migrations.0007_fencing_generations").Migration.dependencies[0][1]


def test_the_migration_seeds_generations_from_history_and_rows(transactional_db):
    """0007_fencing_generations: a database with history and leased rows but
    no table gets, per name, the highest generation either knows."""
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes("leases")
    executor.migrate([("leases", PARENT)])
    try:
        apps = executor.loader.project_state([("leases", PARENT)]).apps
        Account, Container, Blob = (apps.get_model("leases", n) for n in ("Account", "Container", "Blob"))
        Event = apps.get_model("leases", "LeaseEvent")
        from django.utils import timezone

        now = timezone.now()
        acct = Account.objects.create(name="seed", key1="a2V5")
        box = Container.objects.create(account=acct, name="box", etag="e", last_modified=now, created_at=now,
                                       lease_generation=4)
        Blob.objects.create(container=box, name="kept", etag="e", last_modified=now, created_at=now,
                            lease_generation=2)
        common = dict(occurred_at=now, action="acquire", outcome="success", resource_type="blob", account="seed",
                      container="box", status_code=201)
        Event.objects.create(blob="kept", generation=7, **common)  # history knows more than the row
        Event.objects.create(blob="gone", generation=3, **common)  # a deleted blob
        Event.objects.create(blob="gone", generation=None, **{**common, "outcome": "refused", "status_code": 409})
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(leaves)
    assert FencingGeneration.last("seed", "box") == 4
    assert FencingGeneration.last("seed", "box", "kept") == 7
    assert FencingGeneration.last("seed", "box", "gone") == 3
    assert FencingGeneration.objects.count() == 3
