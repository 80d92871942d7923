"""leasehold_ledger digest writes where an auditor keeps it: a file per block in a directory, and
an Azure Blob container named by a URL with a SAS, here Leasehold's own Azure door in a live server
(a blob per block, never replaced)."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest
from azure.storage.blob import ContainerSasPermissions, generate_container_sas
from django.core.management import CommandError, call_command

from leases.operations import ledger
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY


def _digest(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("leasehold_ledger", "digest", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_digest_goes_to_an_azure_container_by_its_sas(service, azure_server):
    container = service.create_container("auditdigests")
    sas = generate_container_sas(account_name=DEV_ACCOUNT, container_name="auditdigests", account_key=DEV_KEY,
                                 permission=ContainerSasPermissions(create=True, write=True),
                                 expiry=datetime(2099, 1, 1, tzinfo=timezone.utc))
    url = f"{azure_server}/{DEV_ACCOUNT}/auditdigests?{sas}"
    printed, said = _digest("--to", url)
    digest = json.loads(printed)
    name = f"leasehold-digest-{digest['block']:012d}.json"
    assert f"written to {azure_server}/{DEV_ACCOUNT}/auditdigests/{name}" in said and "sig=" not in said
    assert json.loads(container.get_blob_client(name).download_blob().readall()) == digest
    _, again = _digest("--to", url)  # the same block: kept, not replaced
    assert "(kept already)" in again


def test_a_sas_without_write_is_a_clear_error(service, azure_server):
    service.create_container("readonly")
    sas = generate_container_sas(account_name=DEV_ACCOUNT, container_name="readonly", account_key=DEV_KEY,
                                 permission=ContainerSasPermissions(read=True),
                                 expiry=datetime(2099, 1, 1, tzinfo=timezone.utc))
    with pytest.raises(CommandError, match="could not write the digest to .*: 403"):
        _digest("--to", f"{azure_server}/{DEV_ACCOUNT}/readonly?{sas}")
    with pytest.raises(CommandError, match="needs a SAS"):
        _digest("--to", f"{azure_server}/{DEV_ACCOUNT}/readonly")


def test_digests_go_to_a_directory_a_file_per_block(transactional_db, clock, tmp_path):
    ledger.seal()
    printed, _ = _digest("--to", str(tmp_path))
    digest = json.loads(printed)
    assert json.loads((tmp_path / f"leasehold-digest-{digest['block']:012d}.json").read_text()) == digest
    with pytest.raises(CommandError, match="no such directory"):
        _digest("--to", str(tmp_path / "absent" / "digest.json"))
