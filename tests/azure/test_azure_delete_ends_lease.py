"""A delete that ends a lease leaves a trace: Delete Blob or Delete Container
with the lease id, and Delete Container while blobs inside hold leases,
append one ``ended-by-delete`` event per ended lease with the actor, and
"who held it at T" says nobody holds it after the delete."""

from __future__ import annotations

import pytest

from leases.domain import fingerprints
from leases.models import LeaseEvent
from leases.services.selectors import holder_at

pytestmark = pytest.mark.also_postgres

ACCOUNT = "devstoreaccount1"


def _ended(**where) -> list[tuple[str, str, str, str]]:
    return sorted(LeaseEvent.objects.filter(action="ended-by-delete", **where)
                  .values_list("container", "blob", "state_before", "actor"))


def test_delete_blob_with_its_lease_id_records_the_lease_ended(service, clock):
    box = service.create_container("gone")
    blob = box.upload_blob("job", b"x")
    lease = blob.acquire_lease(lease_duration=-1)
    blob.delete_blob(lease=lease)
    assert _ended() == [("gone", "job", "leased", "account:devstoreaccount1")]
    event = LeaseEvent.objects.get(action="ended-by-delete")
    assert event.lease_fingerprint == fingerprints.of(lease.id) and event.status_code == 202
    assert holder_at(account=ACCOUNT, container="gone", blob="job", when=clock.now()) is None
    from leases.admin.lookup import holder_lookup

    ending = holder_lookup(account=ACCOUNT, container="gone", blob="job", when=clock.now())["ending"]
    assert (ending["how"], ending["by"]) == ("ended by a delete", "account:devstoreaccount1")


def test_delete_container_ends_its_lease_and_every_blob_lease_inside(service, clock):
    box = service.create_container("gone")
    held = [box.upload_blob(name, b"x").acquire_lease(lease_duration=60) for name in ("a", "b")]
    box.upload_blob("free", b"x")
    container_lease = box.acquire_lease(lease_duration=-1)
    clock.advance(1)
    box.delete_container(lease=container_lease)
    assert _ended() == [("gone", "", "leased", "account:devstoreaccount1"),
                        ("gone", "a", "leased", "account:devstoreaccount1"),
                        ("gone", "b", "leased", "account:devstoreaccount1")]
    for name in ("a", "b", ""):
        assert holder_at(account=ACCOUNT, container="gone", blob=name, when=clock.now()) is None
    assert len(held) == 2


def test_a_delete_of_an_unleased_blob_records_no_ending(service):
    box = service.create_container("gone")
    box.upload_blob("plain", b"x").delete_blob()
    assert _ended() == []
