"""A lease write made again: a batch undone on PostgreSQL (a member failed, or a row was held) has
its lease writes made alone afterwards (leases/storage/write_queue.py), each deciding afresh on what
the database holds by then. An attempt decided before carries nothing into the next: its outcome is
not recorded on the next one's event. On SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from leases import services
from leases.domain import fingerprints
from leases.domain.errors import LeaseholdError
from leases.models import LeaseEvent
from leases.services import Actor, ResourceRef
from leases.services.lease_actions import LeaseWrite
from leases.storage.transactions import write_transaction

pytestmark = pytest.mark.also_postgres

HOLDER = Actor(name="holder", via="azure")
OTHER = Actor(name="other", via="azure")
BLOB = ResourceRef("devstoreaccount1", "again", "job.lock")


class Undone(Exception):
    """The batch around the first attempt failed: its writes are rolled back."""


def test_a_write_made_again_decides_afresh_and_records_only_its_own_outcome(make_blob):
    make_blob(BLOB, HOLDER)
    ours, theirs = uuid.uuid4(), uuid.uuid4()
    write = LeaseWrite({"action": "acquire", "ref": BLOB, "actor": HOLDER, "duration": 15,
                        "proposed_lease_id": ours})

    def undone():
        write.write()  # granted here, then undone with its batch
        raise Undone

    with pytest.raises(Undone):
        write_transaction(undone, skips_rows=True)
    services.lease_acquire(ref=BLOB, actor=OTHER, duration=60, proposed_lease_id=theirs)

    answer = write.outcome(write_transaction(write.write, skips_rows=True), None)

    assert isinstance(answer, LeaseholdError) and answer.code == "LeaseAlreadyPresent"
    refused = LeaseEvent.objects.filter(blob=BLOB.blob, action="acquire").order_by("-id").first()
    assert refused is not None and (refused.status_code, refused.error_code) == (409, "LeaseAlreadyPresent")
    assert refused.state_before == refused.state_after == "leased"
    assert refused.lease_time is None and refused.expires_at is None and refused.duration == 15
    assert refused.lease_fingerprint != fingerprints.of(ours)
