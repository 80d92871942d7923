"""Tenures through the Azure door, driven by the official SDK against the live server: acquire,
renew, change, release; break with a period, then its end recorded by the next acquire; an expired
lease recorded by a write; a renew after expiry resuming as a new tenure; deletes ending leases."""

from __future__ import annotations

import uuid

import pytest

from leases.domain import fingerprints
from leases.models import Tenure

pytestmark = pytest.mark.also_postgres

ACTOR = "account:devstoreaccount1"


def tenures(blob: str) -> list[tuple]:
    return list(Tenure.objects.filter(container="box", blob=blob).order_by("began_at", "id").values_list(
        "holder", "via", "began_by", "end", "ended_by", "settled_by", "fingerprints"))


def test_acquire_renew_change_release(service, clock):
    blob = service.create_container("box").upload_blob("a", b"x")
    lease = blob.acquire_lease(lease_duration=15)
    first = lease.id
    clock.advance(5)
    lease.renew()
    new = str(uuid.uuid4())
    lease.change(new)
    lease.release()
    [(holder, via, began_by, end, ended_by, settled_by, fps)] = tenures("a")
    assert (holder, via, began_by, end, ended_by, settled_by) == (ACTOR, "azure", "acquire", "released", ACTOR,
                                                                  "release")
    assert fps.split()[0] == fingerprints.of(first) and fps.split()[1].startswith(fingerprints.of(new) + "@")


def test_break_expiry_write_resume_and_delete(service, clock):
    box = service.create_container("box")
    broken = box.upload_blob("broken", b"x")
    broken.acquire_lease(lease_duration=60).break_lease(lease_break_period=10)
    clock.advance(11)
    broken.acquire_lease(lease_duration=15)
    assert [t[3:6] for t in tenures("broken")] == [("broken", "", "acquire"), ("", "", "")]

    written = box.upload_blob("written", b"x")
    written.acquire_lease(lease_duration=15)
    clock.advance(16)
    written.upload_blob(b"y", overwrite=True)
    assert [t[3:6] for t in tenures("written")] == [("expired", "", "ended-by-write")]

    resumed = box.upload_blob("resumed", b"x")
    lease = resumed.acquire_lease(lease_duration=15)
    clock.advance(16)
    lease.renew()
    assert [(t[2], t[3]) for t in tenures("resumed")] == [("acquire", "expired"), ("renew", "")]

    resumed.delete_blob(lease=lease)
    assert tenures("resumed")[-1][3:6] == ("ended-by-delete", ACTOR, "ended-by-delete")
