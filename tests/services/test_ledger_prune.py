"""Pruning is not tampering: retention removes whole parts of sealed blocks from their start, records
what it removed, and verify passes after it, against a digest taken before; a part whose events do
not match what was sealed is not pruned."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from leases import services
from leases.models import LeaseEvent, LedgerBlock, LedgerPrune, history_triggers
from leases.operations import ledger, ledger_prune, retention
from leases.operations.retention import Policy
from tests.services.test_ledger import ACCOUNT, lease_traffic, verify

pytestmark = pytest.mark.also_postgres


@pytest.fixture
def aged(transactional_db, clock, tmp_path):
    """Three days of traffic, sealed a day at a time, and a digest of the newest block."""
    clock.freeze()
    ledger.seal()
    services.account_ensure(name=ACCOUNT, key1="a2V5")
    services.container_create(account=ACCOUNT, name="box")
    for _ in range(3):
        lease_traffic(clock, rounds=2)
        ledger.seal()
        clock.advance(86400)
    digest = tmp_path / "digest.json"
    call_command("leasehold_ledger", "digest", "--to", str(digest))
    yield str(digest)
    history_triggers.ensure(connection)


def test_renewals_pruned_leave_a_record_and_the_ledger_verifies(aged, clock):
    renewals = LeaseEvent.objects.filter(action="renew", outcome="success").count()
    deleted = retention.prune(Policy(renewals=timedelta(hours=30), batch=4), now=clock.now(), pace=False)
    assert deleted == renewals * 2 // 3  # the two older days' renewals
    records = list(LedgerPrune.objects.order_by("id"))
    assert sum(r.count for r in records) == deleted and {r.part for r in records} == {0}
    assert all(r.count <= 4 for r in records)  # in the policy's batches
    assert LeaseEvent.objects.filter(action="acquire").count() == 12  # the rest is kept (refusals too)
    assert verify(aged) == ""


def test_everything_pruned_still_verifies(aged, clock):
    retention.prune(Policy(renewals=timedelta(hours=1), events=timedelta(hours=1)), now=clock.now() + timedelta(days=1),
                    pace=False)
    assert not LeaseEvent.objects.filter(id__lte=LedgerBlock.objects.order_by("-position")[0].last_id).exists()
    assert verify(aged) == ""


def test_an_event_deleted_as_if_pruned_without_a_record_is_found(aged, clock, settings):
    retention.prune(Policy(renewals=timedelta(hours=30)), now=clock.now(), pace=False)
    LedgerPrune.objects.order_by("-id").first().delete()  # the record of the last batch goes
    assert "does not continue its chain" in verify(aged) or "were deleted" in verify(aged)


def test_a_tampered_block_is_not_pruned(aged, clock):
    import importlib

    first = LedgerBlock.objects.get(position=1)
    victim = LeaseEvent.objects.filter(id__gte=first.first_id, action="renew").order_by("id")[1].id
    with connection.schema_editor() as editor:
        importlib.import_module("leases.migrations.0005_history_append_only").drop_triggers(editor)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE leases_leaseevent SET row_hash = NULL, actor = 'user:mallory' WHERE id = %s", [victim])
    history_triggers.ensure(connection)
    with pytest.raises(ledger_prune.LedgerRefusesPrune, match="block 1: its events do not match"):
        retention.prune(Policy(renewals=timedelta(hours=30), batch=1000), now=clock.now(), pace=False)
    assert LeaseEvent.objects.filter(id=victim).exists()  # the evidence is kept
    with pytest.raises(CommandError, match="block 1: its events do not match"):  # the command says so
        call_command("leasehold_prune", "--renewals", "30h", "--no-pause")
    assert "1: verify failed: block 1 " in verify(aged)
