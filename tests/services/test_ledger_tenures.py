"""verify holds every tenure to the hashed events that made it (decision 0041, "Tenures proved by their
events"): on an untouched history it passes, also after retention pruned the renewals (a tenure that a
renewal resumed among them); on copies tampered with directly in SQL, the tenures' and the history's
triggers dropped as someone with the database would, it names the tenure (or the event that began a
tenure no longer there): a holder, a begin, an end, how it ended, a fingerprint a change gave, a length
class, a tenure inserted or deleted."""

from __future__ import annotations

import importlib
import uuid
from datetime import timedelta

import pytest
from django.db import connection

from leases import services
from leases.models import Tenure, history_triggers
from leases.operations import ledger, retention
from leases.operations.retention import Policy
from leases.services import Actor, ResourceRef
from tests.services.test_ledger import ACCOUNT, verify

pytestmark = pytest.mark.also_postgres

APP = Actor(name=f"account:{ACCOUNT}", via="azure", remote_addr="10.0.0.7", client_request_id="job-1")
BOB = Actor(name="user:bob", via="api", remote_addr="10.0.0.9")
JOB = ResourceRef(ACCOUNT, "box", "job.txt")


@pytest.fixture
def lives(transactional_db, clock):
    """Tenures of every kind on one blob, sealed: released (renewed, changed), broken at once by
    another, expired (settled by the next acquire), resumed by a renewal after it expired, broken at
    its break period's end, and one held. Returns them by name."""
    clock.freeze()
    ledger.seal()
    services.account_ensure(name=ACCOUNT, key1="a2V5")
    services.container_create(account=ACCOUNT, name="box")
    services.blob_put(ref=JOB, actor=APP, content=b"x")
    lease = services.lease_acquire(ref=JOB, actor=APP, duration=15).lease_id
    clock.advance(5)
    services.lease_renew(ref=JOB, actor=APP, lease_id=lease)
    clock.advance(5)
    services.lease_change(ref=JOB, actor=APP, lease_id=lease, proposed_lease_id=(lease := uuid.uuid4()))
    clock.advance(5)
    services.lease_release(ref=JOB, actor=APP, lease_id=lease)
    clock.advance(1)
    services.lease_acquire(ref=JOB, actor=APP, duration=30)
    clock.advance(2)
    services.lease_break(ref=JOB, actor=BOB, break_period=0)
    clock.advance(1)
    lease = services.lease_acquire(ref=JOB, actor=APP, duration=15).lease_id
    clock.advance(20)  # expired
    services.lease_renew(ref=JOB, actor=APP, lease_id=lease)  # resumed: a tenure begun by a renew
    clock.advance(20)
    services.lease_acquire(ref=JOB, actor=BOB, duration=15)  # settles the expired one
    clock.advance(1)
    services.lease_break(ref=JOB, actor=APP, break_period=5)
    clock.advance(10)
    services.lease_acquire(ref=JOB, actor=APP, duration=-1)  # settles the broken one; held
    ledger.seal()
    found = list(Tenure.objects.order_by("began_at", "id"))
    assert [(t.began_by, t.end, bool(t.ended_by)) for t in found] == [
        ("acquire", "released", True), ("acquire", "broken", True), ("acquire", "expired", False),
        ("renew", "expired", False), ("acquire", "broken", False), ("acquire", "", False)]
    yield dict(zip(("released", "broken_now", "expired", "resumed", "broken_later", "held"), found))
    history_triggers.ensure(connection)


@pytest.fixture
def tamper(lives):
    with connection.schema_editor() as editor:
        importlib.import_module("leases.migrations.0005_history_append_only").drop_triggers(editor)
        importlib.import_module("leases.migrations.0015_tenures").drop_triggers(editor)

    def run(sql: str, params=()):
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
    return run


def test_an_untouched_history_proves_its_tenures(lives):
    assert verify() == ""


def test_pruning_renewals_is_not_tampering_with_tenures(lives, clock):
    clock.advance(3 * 86400)
    deleted = retention.prune(Policy(renewals=timedelta(days=1)), now=clock.now(), pace=False)
    assert deleted == 2  # both renewals, the one that resumed a tenure too
    assert verify() == ""



@pytest.mark.parametrize("name, sql, said", [
    ("released", "UPDATE leases_tenure SET holder = 'user:mallory' WHERE id = %s", "its holder differ"),
    ("held", "UPDATE leases_tenure SET holder_address = '10.6.6.6' WHERE id = %s", "its holder_address differ"),
    ("resumed", "UPDATE leases_tenure SET client_request_id = 'other' WHERE id = %s", "client_request_id differ"),
    ("released", "UPDATE leases_tenure SET began_at = ended_at WHERE id = %s", "no successful acquire"),
    ("released", "UPDATE leases_tenure SET ended_by = 'user:mallory' WHERE id = %s", "no such event ended it"),
    ("broken_now", "UPDATE leases_tenure SET \"end\" = 'released' WHERE id = %s", "no such event ended it"),
    ("released", "UPDATE leases_tenure SET ended_at = began_at WHERE id = %s", "no such event ended it"),
    ("expired", "UPDATE leases_tenure SET \"end\" = 'broken' WHERE id = %s", "found it broken"),
    ("broken_later", "UPDATE leases_tenure SET settled_by = 'release' WHERE id = %s", "found it broken"),
    ("released", "UPDATE leases_tenure SET length_class = 0 WHERE id = %s", "length class 0 is less"),
    ("held", "DELETE FROM leases_tenure WHERE id = %s", "no tenure began with it"),
], ids=["holder", "address", "request-id-of-a-resumed-one", "began", "ended-by", "how-it-ended", "ended-at",
        "expired-called-broken", "settled-by", "length-class", "deleted"])
def test_a_tenure_changed_in_sql_is_named(lives, tamper, name, sql, said):
    victim = lives[name]
    tamper(sql, [victim.id])
    found = verify()
    assert found.startswith("1: verify failed: ") and said in found, found
    assert f"tenure {victim.id} " in found or "event " in found


def test_a_tenure_inserted_in_sql_is_named(lives, tamper):
    t = lives["released"]
    tamper("INSERT INTO leases_tenure (resource_type, account, container, blob, generation, lease_fingerprint, "
           "fingerprints, holder, holder_address, client_request_id, via, began_by, began_at, deadline, \"end\", "
           "ended_by, settled_by) SELECT resource_type, account, container, blob, generation, lease_fingerprint, "
           "lease_fingerprint, 'user:mallory', '', '', 'api', 'acquire', ended_at, NULL, '', '', '' "
           "FROM leases_tenure WHERE id = %s", [t.id])  # begun when the release was: no acquire then
    found = verify()
    assert found.startswith("1: verify failed: tenure ") and "no successful acquire" in found, found


def test_a_fingerprint_no_change_gave_is_named(lives, tamper):
    t = lives["released"]
    during = (t.began_at + timedelta(seconds=1)).isoformat()
    tamper("UPDATE leases_tenure SET fingerprints = fingerprints || %s WHERE id = %s", [f" 0123456789ab@{during}", t.id])
    found = verify()
    assert found.startswith(f"1: verify failed: tenure {t.id} ") and "no change event gave it the fingerprint" in found
