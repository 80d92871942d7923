"""Lease time (leases/domain/clock.py, leases/storage/dbclock.py): read once the
row is locked, never earlier than the row's last decision, and on PostgreSQL
the database's, floored by its high-water mark. On SQLite and PostgreSQL.
Two instances on differing clocks, and a step of the database's own clock,
are in tests/processes/test_pg_clock.py."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection, connections, transaction

from leases import services
from leases.models import Blob, LeaseClock, LeaseEvent
from leases.services import Actor, ResourceRef

pytestmark = pytest.mark.also_postgres

ACCOUNT = "devstoreaccount1"
HOLDER = Actor(name="holder", via="azure")
OTHER = Actor(name="other", via="azure")
BLOB = ResourceRef(ACCOUNT, "clocks", "job.lock")


@pytest.fixture
def blob(make_blob):
    return make_blob(BLOB, HOLDER)


def _times(ref: ResourceRef) -> list[datetime]:
    """The blob's lease events' times, in the order they were recorded."""
    return list(LeaseEvent.objects.filter(blob=ref.blob).order_by("id").values_list("occurred_at", flat=True))


def test_a_decision_reads_the_time_once_the_row_is_locked(blob):
    """A renewal that waited 0.3 s for the row decides at the end of the
    wait, not when it was sent: its lease does not start in the past."""
    lease = services.lease_acquire(ref=blob, actor=HOLDER, duration=15)
    locked, released = threading.Event(), []

    def hold_the_row():
        try:
            with transaction.atomic():
                Blob.objects.select_for_update().filter(name=blob.blob).first()
                locked.set()
                time.sleep(0.3)  # another transaction holding the row, not lease time
                released.append(datetime.now(timezone.utc))
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_row)
    holder.start()
    assert locked.wait(10)
    services.lease_renew(ref=blob, actor=HOLDER, lease_id=lease.lease_id)
    holder.join()
    renewed_at = _times(blob)[-1]
    assert renewed_at >= released[0], (renewed_at, released[0])


def test_a_step_back_of_the_clock_shortens_no_lease(blob, clock):
    """The clock goes back an hour between an acquire and a renewal: the
    renewal's deadline is no earlier than the acquire's, the history's times
    do not go back, and the lease stays held against a newcomer."""
    lease = services.lease_acquire(ref=blob, actor=HOLDER, duration=15)
    before = Blob.objects.get(name=blob.blob).lease_expires_at
    clock.advance(-3600)
    services.lease_renew(ref=blob, actor=HOLDER, lease_id=lease.lease_id)
    assert Blob.objects.get(name=blob.blob).lease_expires_at >= before
    with pytest.raises(services.LeaseholdError) as refused:
        services.lease_acquire(ref=blob, actor=OTHER, duration=15)
    assert refused.value.code == "LeaseAlreadyPresent"
    clock.advance(14)  # still within the lease renewed 14 s ago (by lease time)
    services.lease_renew(ref=blob, actor=HOLDER, lease_id=lease.lease_id)
    times = _times(blob)
    assert times == sorted(times), times


def test_lease_time_is_at_least_the_databases_high_water_mark(blob):
    """On PostgreSQL a decision's time is the database's clock or its
    high-water mark, whichever is later: an instance whose database's clock
    stepped back keeps deciding at the mark."""
    if connection.vendor != "postgresql":
        pytest.skip("the high-water mark is PostgreSQL's (SQLite decides by the machine's clock)")
    mark = datetime.now(timezone.utc) + timedelta(hours=1)
    LeaseClock.objects.create(id=1, high_water=mark)
    services.lease_acquire(ref=blob, actor=HOLDER, duration=15)
    row = Blob.objects.get(name=blob.blob)
    assert row.lease_acquired_at == mark and row.lease_expires_at == mark + timedelta(seconds=15)
    assert _times(blob)[-1] == mark
