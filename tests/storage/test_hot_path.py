"""The lease transaction's shape on SQLite, statement by statement, as the
driver runs it: one read, one write of the lease columns that changed, one
history insert, and the tenure's insert or update where the lease's hold begins, moves or ends
(leases/services/tenures.py), between BEGIN IMMEDIATE and COMMIT. Every extra statement or
index touched under the writer lock is time every other writer waits."""

import re
import uuid

import pytest
from django.db import connection

from leases import services
from leases.models import Blob, LeaseEvent
from leases.services import Actor, ResourceRef

pytestmark = pytest.mark.skipif(connection.vendor != "sqlite", reason="the statements as SQLite's driver runs them")

ACCOUNT = "devstoreaccount1"
REF = ResourceRef(ACCOUNT, "hot", "path.txt")
ACTOR = Actor(name=f"account:{ACCOUNT}", via="azure")


@pytest.fixture
def blob(make_blob):
    return make_blob(REF, ACTOR)


@pytest.fixture
def statements():
    """The SQL the driver runs from here on (the compiled hot path bypasses
    Django's cursor wrappers, so only the driver sees all of it)."""
    seen: list[str] = []

    def trace(sql: str) -> None:
        # SQLite traces a trigger's run as its statement once more: the
        # history's BEFORE INSERT trigger (append-only, migration 0004), the
        # tenures' BEFORE INSERT and UPDATE triggers (migration 0015).
        # The busy timeout is narrowed around BEGIN only when the writer lock
        # was waited for (the WAL checkpoint thread may hold it a moment on a
        # loaded machine): contention, not the transaction's statements.
        if sql.startswith("PRAGMA busy_timeout="):
            return
        if not (seen and sql == seen[-1] and sql.startswith(('INSERT INTO "leases_leaseevent"',
                                                             'INSERT INTO "leases_tenure"',
                                                             'UPDATE "leases_tenure"'))):
            seen.append(sql)

    connection.ensure_connection()
    connection.connection.set_trace_callback(trace)
    yield seen
    connection.connection.set_trace_callback(None)


def _shape(sql: str) -> str:
    sql = " ".join(sql.split())
    if sql.startswith("PRAGMA"):
        return sql
    if sql.startswith("INSERT INTO \"leases_fencinggeneration\""):
        return "INSERT fencing"
    if sql.startswith("INSERT INTO \"leases_tenure\""):
        return "INSERT tenure"
    if sql.startswith("UPDATE"):
        return "UPDATE " + ",".join(sorted(re.findall(r'"(\w+)" = ', sql.split(" WHERE ")[0])))
    return sql.split(" ")[0] + (" IMMEDIATE" if sql.startswith("BEGIN IMMEDIATE") else "")


def _transaction(*writes: str, tenure: tuple[str, ...] = ()) -> list[str]:
    """The statements of one lease transaction: the fsync is taken outside
    the writer lock (engines.sqlite), so the transaction itself runs
    at synchronous=NORMAL and the connection returns to FULL after it."""
    return ["PRAGMA synchronous=NORMAL", "BEGIN IMMEDIATE", "SELECT", *writes, "INSERT", *tenure, "COMMIT",
            "PRAGMA synchronous=FULL"]


def test_acquire_renew_release_are_one_read_one_write_one_event(blob, statements, clock):
    lease_id = uuid.uuid4()
    services.lease_acquire(ref=blob, actor=ACTOR, duration=15, proposed_lease_id=lease_id)
    acquire = [_shape(s) for s in statements]
    statements.clear()
    clock.advance(5)
    services.lease_renew(ref=blob, actor=ACTOR, lease_id=lease_id)
    renew = [_shape(s) for s in statements]
    statements.clear()
    services.lease_release(ref=blob, actor=ACTOR, lease_id=lease_id)
    release = [_shape(s) for s in statements]

    new_lease = ("lease_state", "lease_id", "lease_duration", "lease_expires_at", "lease_generation",
                 "lease_acquired_at", "lease_holder", "lease_holder_address", "lease_holder_request_id")
    # a new lease, and only a new lease, also records its fencing token for the name
    # and begins a tenure
    assert acquire == _transaction("INSERT fencing", "UPDATE " + ",".join(sorted(new_lease)),
                                   tenure=("INSERT tenure",))
    # a renew moves the deadline only: the state, lease id and break indexes are not rewritten,
    # and its tenure not at all (the lease row holds its latest deadline: Tenure.latest_deadline)
    assert renew == _transaction("UPDATE lease_expires_at")
    # a release ends the tenure, classes its length (migration 0020) and stores the deadline it had
    assert release == _transaction("UPDATE lease_duration,lease_expires_at,lease_id,lease_state",
                                   tenure=("UPDATE deadline,end,ended_at,ended_by,length_class,settled_by",))
    row = Blob.objects.get(name=blob.blob)
    assert (row.lease_state, row.lease_id, row.lease_expires_at, row.lease_generation) == ("available", None, None, 1)
    assert list(LeaseEvent.objects.order_by("id").values_list("action", "outcome")) == [
        ("acquire", "success"), ("renew", "success"), ("release", "success")]


def test_an_action_that_changes_nothing_writes_only_its_event(blob, statements, clock):
    services.lease_acquire(ref=blob, actor=ACTOR, duration=15)
    services.lease_break(ref=blob, actor=ACTOR, break_period=0)
    statements.clear()
    # breaking a broken lease succeeds (202) and leaves the record as it is
    services.lease_break(ref=blob, actor=ACTOR, break_period=0)
    assert [_shape(s) for s in statements] == _transaction()
    assert Blob.objects.get(name=blob.blob).lease_state == "broken"
    assert LeaseEvent.objects.filter(action="break", outcome="success").count() == 2


def test_a_refusal_reads_and_records_but_writes_no_lease(blob, statements, clock):
    services.lease_acquire(ref=blob, actor=ACTOR, duration=15)
    statements.clear()
    with pytest.raises(services.LeaseholdError) as refused:
        services.lease_acquire(ref=blob, actor=ACTOR, duration=15)
    assert refused.value.code == "LeaseAlreadyPresent"
    assert [_shape(s) for s in statements] == _transaction()
