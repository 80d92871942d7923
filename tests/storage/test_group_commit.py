"""Group commit (leases/sqlite_backend): transactions of concurrent threads
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
