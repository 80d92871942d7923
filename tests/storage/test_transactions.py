"""A service's write transaction (leases/storage/transactions.py), on both
databases: a write whose COMMIT fails is answered with that failure, never
with the result it had before the commit, and the connection writes
durably after it. A server's lease batch on PostgreSQL waits for no row
another transaction holds, and keeps nothing of a batch one of whose
writes failed. A foreign key Django creates
DEFERRABLE INITIALLY DEFERRED is checked at COMMIT on SQLite and
PostgreSQL alike, so a row pointing nowhere makes the commit itself fail."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import IntegrityError, connection

from django.utils import timezone

from leases.models import Account, Blob, Container
from leases.storage.transactions import RetryAlone, write_together, write_transaction

pytestmark = pytest.mark.also_postgres


def _dangling_blob():
    """A blob whose container does not exist: accepted by the INSERT,
    refused at COMMIT."""
    now = timezone.now()
    Blob.objects.create(container_id=987654321, name="orphan", etag="0x1", last_modified=now, created_at=now)
    return "written"  # the INSERT went through: only the COMMIT refuses it


def _container(name: str):
    def write():
        now = timezone.now()
        account, _ = Account.objects.get_or_create(name="devstoreaccount1")
        Container.objects.create(account=account, name=name, etag="0x1", last_modified=now, created_at=now)
        return name
    return write


def test_a_commit_that_fails_is_the_answer_of_its_write_only(transactional_db):
    """One transaction for the three (the write queue); its commit refused,
    nothing of it is kept and each write is made alone, so that only the
    one at fault fails."""
    outcomes = write_together([_container("before"), _dangling_blob, _container("after")])
    assert [result for result, _ in outcomes] == ["before", None, "after"], outcomes
    assert [type(error) for _, error in outcomes] == [type(None), IntegrityError, type(None)], outcomes
    assert set(Container.objects.values_list("name", flat=True)) == {"before", "after"}
    assert not Blob.objects.filter(name="orphan").exists()
    _durable_again()


def _durable_again():
    """After a failed commit, the connection writes durably again (the SQLite
    engine relaxes synchronous for the fsync after the writer lock)."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            assert cursor.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_a_lone_write_whose_commit_fails_raises(transactional_db):
    with pytest.raises(IntegrityError):
        write_transaction(_dangling_blob)
    assert not Blob.objects.filter(name="orphan").exists()
    _durable_again()


def test_on_postgresql_a_lease_requests_statements_are_prepared(make_blob):
    """LEASEHOLD_PG_PREPARE (on): the server binds the parameters and each
    statement is prepared on its connection at its second use, so renewals
    after the first run prepared statements (docs/decisions/0022)."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's prepared statements")
    from django.conf import settings
    if not settings.LEASEHOLD.pg_prepare:
        pytest.skip("LEASEHOLD_PG_PREPARE=off: nothing is prepared")
    from leases import services
    from leases.services import Actor, ResourceRef

    actor = Actor(name="account:devstoreaccount1", via="azure")
    ref = make_blob(ResourceRef("devstoreaccount1", "prepared", "b"), actor)
    lease_id = services.lease_acquire(ref=ref, actor=actor, duration=15).resource.lease_id
    for _ in range(3):
        services.lease_renew(ref=ref, actor=actor, lease_id=lease_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("FOR UPDATE" in text and "clock_timestamp()" in text for text in prepared), prepared
    # the renewal's UPDATE and its history row: one statement (statements.RowInsert.insert)
    assert any(text.startswith('WITH saved AS (UPDATE "leases_blob"') and 'INSERT INTO "leases_leaseevent"' in text
               for text in prepared), prepared


def test_a_batch_whose_commit_fails_keeps_nothing_of_it(transactional_db):
    """A server's lease batch (wait_for_rows=False), whose commit is
    refused: nothing of the shared transaction is kept. SQLite: each write
    is then made alone by the queue, only the one at fault failing.
    PostgreSQL: the batch's thread may not wait for rows, so every write is
    answered RetryAlone, to be made alone where it may wait."""
    outcomes = write_together([_container("before"), _dangling_blob, _container("after")], wait_for_rows=False)
    if connection.vendor == "sqlite":
        assert [(result, type(error)) for result, error in outcomes] == [
            ("before", type(None)), (None, IntegrityError), ("after", type(None))], outcomes
        assert set(Container.objects.values_list("name", flat=True)) == {"before", "after"}
    else:
        assert [(result, type(error)) for result, error in outcomes] == [(None, RetryAlone)] * 3, outcomes
        assert not Container.objects.filter(name__in=["before", "after"]).exists()
    assert not Blob.objects.filter(name="orphan").exists()
    _durable_again()


def test_on_postgresql_a_batch_waits_for_no_locked_row(make_blob):
    """Another session holds one blob's row: a batch with a renewal of that
    blob and an acquire of another answers the first RetryAlone at once,
    writing nothing of it, and commits the second; alone (as the server then
    sends it), the renewal waits for the row and is made."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's")
    import psycopg

    from leases import services
    from leases.models import LeaseEvent
    from leases.services import Actor, LeaseResult, ResourceRef

    actor = Actor(name="account:devstoreaccount1", via="azure")
    held = make_blob(ResourceRef("devstoreaccount1", "rows-held", "held"), actor)
    free = make_blob(ResourceRef("devstoreaccount1", "rows-free", "free"), actor)
    lease_id = services.lease_acquire(ref=held, actor=actor, duration=60).resource.lease_id
    events = LeaseEvent.objects.filter(blob="held").count()
    with psycopg.connect(connection.settings_dict["OPTIONS"]["conninfo"],
                         dbname=connection.settings_dict["NAME"]) as holder:  # the test database
        holder.execute("SELECT 1 FROM leases_blob WHERE name = 'held' FOR UPDATE")
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")  # a wait for the row fails the test, not hangs it
        renew = {"action": "renew", "ref": held, "actor": actor, "lease_id": lease_id}
        acquire = {"action": "acquire", "ref": free, "actor": actor, "duration": 15}
        writes = [services.LeaseWrite(renew), services.LeaseWrite(acquire)]
        outcomes = write_together([lease.write for lease in writes], wait_for_rows=False, skips_rows=True)
        answers = [error if isinstance(error, RetryAlone) else lease.outcome(result, error)
                   for lease, (result, error) in zip(writes, outcomes)]
        assert isinstance(answers[0], RetryAlone) and isinstance(answers[1], LeaseResult), answers
        assert LeaseEvent.objects.filter(blob="held").count() == events  # nothing of the renewal
        assert holder.execute("SELECT lease_state FROM leases_blob WHERE name = 'free'").fetchone() == ("leased",)
        assert holder.execute("SELECT count(*) FROM leases_leaseevent WHERE blob = 'free' AND action = 'acquire'"
                              ).fetchone() == (1,)  # committed: seen by the other session
        # The row is let go once the renewal, made alone, waits for it (a handshake: a session of
        # this database waits on a lock), not after a fixed delay a loaded machine outruns.
        waited: list[bool] = []

        def let_go_once_waited() -> None:
            try:
                with psycopg.connect(connection.settings_dict["OPTIONS"]["conninfo"],
                                     dbname=connection.settings_dict["NAME"], autocommit=True) as watcher:
                    deadline = time.monotonic() + 10
                    while time.monotonic() < deadline and not waited:
                        if watcher.execute("SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                                           " AND wait_event_type = 'Lock'").fetchone():
                            waited.append(True)
                        else:
                            time.sleep(0.01)
            finally:
                holder.rollback()

        watching = threading.Thread(target=let_go_once_waited)
        watching.start()
        alone = services.lease_actions_together([renew])
        watching.join()
    assert waited, "the renewal made alone never waited for the row"
    assert isinstance(alone[0], LeaseResult), alone
    assert LeaseEvent.objects.filter(blob="held").count() == events + 1


def test_on_postgresql_a_batch_cuts_short_any_other_writes_lock_wait(make_blob):
    """A write that locks its row the usual way (a blob delete: select_for_update)
    in a batch with a lease write, its row held by another session: the batch
    does not wait for it (its lock wait is cut short), commits the lease write,
    and the delete is made alone -- here answered RetryAlone, as the lease
    batch's thread is answered; alone, it waits for the row and is made."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's")
    import psycopg

    from leases import services
    from leases.models import Blob
    from leases.services import Actor, ResourceRef

    actor = Actor(name="account:devstoreaccount1", via="azure")
    held = make_blob(ResourceRef("devstoreaccount1", "cut-held", "held"), actor)
    free = make_blob(ResourceRef("devstoreaccount1", "cut-free", "free"), actor)
    with psycopg.connect(connection.settings_dict["OPTIONS"]["conninfo"],
                         dbname=connection.settings_dict["NAME"]) as holder:  # the test database
        holder.execute("SELECT 1 FROM leases_blob WHERE name = 'held' FOR UPDATE")
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '5s'")  # a wait for the row fails the test, not hangs it

        def delete():
            return services.blob_delete(ref=held, actor=actor)

        def acquire():
            return services.lease_acquire(ref=free, actor=actor, duration=15).lease_id

        outcomes = write_together([delete, acquire], wait_for_rows=False)
        assert isinstance(outcomes[0][1], RetryAlone), outcomes
        assert outcomes[1][1] is None and outcomes[1][0] is not None, outcomes
        assert holder.execute("SELECT lease_state FROM leases_blob WHERE name = 'free'").fetchone() == ("leased",)
        holder.rollback()  # the row let go: alone, the delete is made
    assert write_together([delete]) == [(None, None)]
    assert not Blob.objects.filter(name="held").exists()
