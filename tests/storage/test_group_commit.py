"""Group commit (engines/sqlite/): transactions of concurrent threads
share one commit, yet each keeps its own result, its own failure, and is
durable before its caller returns."""

import threading

import pytest
from django.db import connection

from leases.models import Account


@pytest.mark.django_db(transaction=True)
def test_a_failing_member_undoes_only_its_own_writes():
    assert connection.vendor == "sqlite" and connection._writer_lock_path()  # a real file: group commit is on
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
            results[i] = conn.group_commit(work)
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
    """group_commit_all (a worker's lease batch): one transaction, a savepoint
    per member; a member that fails after writing leaves nothing, one whose
    own nested atomic() failed and was caught keeps the rest of its writes."""
    from django.db import transaction

    def plain(i):
        Account.objects.create(name=f"m{i}", key1="a2V5")
        return i

    def fails_after_writing():
        Account.objects.create(name="gone", key1="a2V5")
        raise ValueError("after writing")

    def nested_failure_caught():
        Account.objects.create(name="kept", key1="a2V5")
        try:
            with transaction.atomic():
                Account.objects.create(name="inner", key1="a2V5")
                raise KeyError("inner")
        except KeyError:
            pass
        return "caught"

    outcomes = connection.group_commit_all([lambda: plain(1), fails_after_writing, nested_failure_caught,
                                            lambda: plain(2)])
    assert [result for result, _ in outcomes] == [1, None, "caught", 2]
    assert [type(error) for _, error in outcomes] == [type(None), ValueError, type(None), type(None)]
    assert sorted(Account.objects.values_list("name", flat=True)) == ["kept", "m1", "m2"]


@pytest.mark.django_db(transaction=True)
def test_a_member_that_ends_the_transaction_fails_the_whole_group():
    """If a member's failure cannot be undone on its own (SQLite ended the
    whole transaction, as it may on a full disk), nothing of the group was
    written and no member may be told it succeeded."""

    def plain(name):
        Account.objects.create(name=name, key1="a2V5")
        return name

    def ends_the_transaction():
        Account.objects.create(name="doomed", key1="a2V5")
        connection.connection.execute("ROLLBACK")  # what SQLite does itself on some I/O errors
        raise OSError("disk full")

    outcomes = connection.group_commit_all([lambda: plain("first"), ends_the_transaction, lambda: plain("last")])
    assert all(result is None for result, _ in outcomes)
    assert all(error is not None for _, error in outcomes)
    assert isinstance(outcomes[1][1], OSError)
    assert not Account.objects.filter(name__in=["first", "doomed", "last"]).exists()
    # and the connection is usable for the next group
    assert connection.group_commit_all([lambda: plain("after")]) == [("after", None)]
