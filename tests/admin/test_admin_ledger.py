"""The dashboard shows the ledger: the newest sealed block and the last verification, passed or
failed with what it found."""

from __future__ import annotations

from django.core.management import CommandError, call_command

from leases.models import LedgerBlock, LedgerCheck
from leases.operations import ledger

DASHBOARD = "/admin/leases/leaseevent/dashboard/"


def test_the_dashboard_shows_the_last_sealed_block_and_verification(superuser_client, estate):
    panel = superuser_client.get(DASHBOARD, {"embed": 1}).content.decode()
    assert "Never verified" in panel
    ledger.seal()
    newest = LedgerBlock.objects.order_by("-position").first()
    call_command("leasehold_ledger", "verify")
    panel = superuser_client.get(DASHBOARD, {"embed": 1}).content.decode()
    assert f"Last sealed block: <strong>{newest.position}</strong>" in panel and newest.block_hash in panel
    assert "<strong>passed</strong>" in panel


def test_the_dashboard_shows_a_failed_verification_and_what_it_found(superuser_client, estate, tmp_path):
    ledger.seal()
    bad = tmp_path / "digest.json"
    bad.write_text('{"block": 0, "hash": "' + "0" * 64 + '"}')
    try:
        call_command("leasehold_ledger", "verify", "--digest", str(bad))
    except CommandError as err:
        assert err.returncode == 1
    check = LedgerCheck.objects.get()
    assert not check.ok
    panel = superuser_client.get(DASHBOARD, {"embed": 1}).content.decode()
    assert "<strong>failed</strong>: block 0 does not match the digest" in panel
