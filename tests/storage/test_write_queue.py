"""The write queue (leases/storage/write_queue.py): writes of concurrent
threads and a caller's batch share one commit on SQLite and PostgreSQL
alike, yet each keeps its own result and its own failure, and is durable
before its caller returns."""

import threading
import time

import pytest
from django.db import connection, transaction

from leases.models import Account
from leases.storage.transactions import write_together, write_transaction
from leases.storage.write_queue import WriteQueue, queue_for

pytestmark = pytest.mark.also_postgres


def _writes(name: str, result):
    """A batch member that writes an account named ``name`` and returns ``result``."""
    Account.objects.create(name=name, key1="a2V5")
    return result


def _fails_after_writing(name: str) -> None:
    Account.objects.create(name=name, key1="a2V5")
    raise ValueError("after writing")


@pytest.mark.django_db(transaction=True)
def test_a_failing_member_undoes_only_its_own_writes():
    assert queue_for() is not None  # SQLite on a file, or PostgreSQL: the queue makes writes together
    start = threading.Barrier(12)
    results, errors = {}, {}

    def member(i):
        from django.db import connection as conn  # this thread's own connection

        def work():
            Account.objects.create(name=f"acct{i:02d}", key1="a2V5")
            if i % 4 == 0:
                raise ValueError(f"member {i} fails after writing")
            return i

        start.wait()
        try:
            results[i] = write_transaction(work)
        except ValueError as exc:
            errors[i] = str(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=member, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == {i: i for i in range(12) if i % 4}
    assert sorted(errors) == [0, 4, 8]
    # every member that returned is committed; the failed ones left nothing
    assert sorted(Account.objects.values_list("name", flat=True)) == [f"acct{i:02d}" for i in range(12) if i % 4]


@pytest.mark.django_db(transaction=True)
def test_members_committed_together_each_undo_only_their_own_writes():
    """A caller's batch (a worker's lease requests): one transaction, a
    savepoint per member; a member that fails after writing leaves nothing,
    one whose own nested atomic() failed and was caught keeps the rest of
    its writes."""

    def plain(i):
        return _writes(f"m{i}", i)

    def fails_after_writing():
        _fails_after_writing("gone")

    def nested_failure_caught():
        Account.objects.create(name="kept", key1="a2V5")
        try:
            with transaction.atomic():
                Account.objects.create(name="inner", key1="a2V5")
                raise KeyError("inner")
        except KeyError:
            pass
        return "caught"

    outcomes = write_together([lambda: plain(1), fails_after_writing, nested_failure_caught, lambda: plain(2)])
    assert [result for result, _ in outcomes] == [1, None, "caught", 2]
    assert [type(error) for _, error in outcomes] == [type(None), ValueError, type(None), type(None)]
    assert sorted(Account.objects.values_list("name", flat=True)) == ["kept", "m1", "m2"]


@pytest.mark.django_db(transaction=True)
def test_a_member_that_ends_the_transaction_fails_the_whole_batch():
    """If a member's failure cannot be undone on its own (SQLite ended the
    whole transaction, as it may on a full disk), nothing of the batch was
    written and no member may be told it succeeded."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's own end of a transaction")

    def plain(name):
        Account.objects.create(name=name, key1="a2V5")
        return name

    def ends_the_transaction():
        Account.objects.create(name="doomed", key1="a2V5")
        connection.connection.execute("ROLLBACK")  # what SQLite does itself on some I/O errors
        raise OSError("disk full")

    outcomes = write_together([lambda: plain("first"), ends_the_transaction, lambda: plain("last")])
    assert all(result is None for result, _ in outcomes)
    assert all(error is not None for _, error in outcomes)
    assert isinstance(outcomes[1][1], OSError)
    assert not Account.objects.filter(name__in=["first", "doomed", "last"]).exists()
    # and the connection is usable for the next batch
    assert write_together([lambda: plain("after")]) == [("after", None)]


@pytest.mark.django_db(transaction=True)
def test_writes_queued_while_one_commits_are_committed_together_by_one_leader(monkeypatch):
    """Whoever finds the queue idle leads; threads that submit while it
    writes are queued and written by the next leader, together: one
    transaction for all of them, and each answered its own result."""
    batches: list[int] = []
    original = WriteQueue._write

    def write(self: WriteQueue, batch: list) -> None:
        batches.append(len(batch))
        original(self, batch)

    monkeypatch.setattr(WriteQueue, "_write", write)
    inside, release = threading.Event(), threading.Event()
    results = {}

    def first():
        inside.set()
        assert release.wait(30)
        return "first"

    def submit(name, fn):
        from django.db import connection as conn
        try:
            results[name] = write_transaction(fn)
        finally:
            conn.close()

    leader = threading.Thread(target=submit, args=("first", first))
    leader.start()
    assert inside.wait(30)
    queue = queue_for()
    assert queue is not None
    followers = [threading.Thread(target=submit, args=(f"t{i}", lambda i=i: Account.objects.create(
        name=f"q{i}", key1="a2V5").name)) for i in range(5)]
    for thread in followers:
        thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # a handshake: every follower is queued behind the leader's write
        with queue.cond:
            if len(queue.queue) == 5:
                break
        time.sleep(0.01)
    release.set()
    for thread in [leader, *followers]:
        thread.join(30)
    assert results == {"first": "first", **{f"t{i}": f"q{i}" for i in range(5)}}
    assert batches == [1, 5]


@pytest.mark.django_db(transaction=True)
def test_a_failing_lease_write_in_a_batch_fails_alone():
    """Lease writes (skips_rows: on PostgreSQL a batch of them has no
    savepoints): one that fails after writing undoes the batch there, and the
    queue makes each alone, so it fails alone and the others are written."""

    outcomes = write_together([lambda: _writes("lease1", 1), lambda: _fails_after_writing("undone"),
                               lambda: _writes("lease2", 2)], skips_rows=True)
    assert [result for result, _ in outcomes] == [1, None, 2]
    assert [type(error) for _, error in outcomes] == [type(None), ValueError, type(None)]
    assert sorted(Account.objects.values_list("name", flat=True)) == ["lease1", "lease2"]
