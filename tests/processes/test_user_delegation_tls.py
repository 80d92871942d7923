"""User delegation SAS through the production server over https, all by the official SDK:
``BlobServiceClient(credential=<a TokenCredential from the real OpenID provider>)`` asks
``get_user_delegation_key``, ``generate_blob_sas(user_delegation_key=...)`` signs a SAS, and a client
holding only that SAS acquires and renews a lease, the history naming the delegating principal; a
reader's key signs a SAS whose Write is refused; after ``manage.py leasehold_delegation_keys revoke``
the writer's SAS is refused with Azure's 403 AuthenticationFailed."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobClient, BlobLeaseClient, BlobSasPermissions, generate_blob_sas

from leases.auth.bearer import fingerprint
from leases.management.commands.leasehold_setup import DEV_ACCOUNT
from tests.processes import test_bearer_tls
from tests.processes.test_bearer_tls import ProviderCredential, _service
from tests.sdk_errors import sdk_error_code
from tests.server_process import ROOT

pytestmark = pytest.mark.processes
bearer_server = test_bearer_tls.bearer_server  # the server over https, with the provider's writer and reader


def _sas_client(server, ca, provider, client_id: str, permission: BlobSasPermissions) -> BlobClient:
    now = datetime.now(timezone.utc)
    key = _service(server, ca, ProviderCredential(provider, client_id)).get_user_delegation_key(
        now - timedelta(minutes=1), now + timedelta(hours=1))
    token = generate_blob_sas(DEV_ACCOUNT, "delegated", "job.lock", user_delegation_key=key, permission=permission,
                              expiry=now + timedelta(minutes=30))
    return BlobClient(f"{server.url}/{DEV_ACCOUNT}", "delegated", "job.lock", credential=token,
                      connection_verify=ca, retry_total=0)


def test_a_user_delegation_sas_from_the_sdk_leases_until_its_keys_are_revoked(bearer_server):
    server, database, ca, provider = bearer_server
    writer = _service(server, ca, ProviderCredential(provider, "writer")).get_container_client("delegated")
    writer.create_container()
    writer.upload_blob("job.lock", b"x")

    blob = _sas_client(server, ca, provider, "writer", BlobSasPermissions(read=True, write=True))
    lease = BlobLeaseClient(blob)
    lease.acquire(lease_duration=15)
    lease.renew()
    assert blob.get_blob_properties().lease.state == "leased"
    lease.release()
    with sqlite3.connect(database) as conn:
        actors = {row[0] for row in conn.execute(
            "SELECT actor FROM leases_leaseevent WHERE container = 'delegated' AND action IN ('acquire', 'renew')")}
        stored = [row[0] for row in conn.execute("SELECT salt FROM leases_userdelegationkey")]
    assert len(actors) == 1 and actors.pop().endswith(f" for bearer:{fingerprint(provider.issuer)}:writer (Nightly job)")
    assert stored  # a row per key, its value nowhere

    reader = _sas_client(server, ca, provider, "reader", BlobSasPermissions(read=True, write=True))
    assert reader.download_blob().readall() == b"x"
    with pytest.raises(HttpResponseError) as refused:
        BlobLeaseClient(reader).acquire(lease_duration=15)
    assert refused.value.status_code == 403 and sdk_error_code(refused.value) == "AuthorizationPermissionMismatch"

    done = subprocess.run([sys.executable, "manage.py", "leasehold_delegation_keys", "revoke", DEV_ACCOUNT], cwd=ROOT,
                          env=server.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "revoked 2 user delegation key(s)" in done.stdout, done.stderr[-2000:]
    with pytest.raises(HttpResponseError) as revoked:
        BlobLeaseClient(blob).acquire(lease_duration=15)
    assert revoked.value.status_code == 403 and sdk_error_code(revoked.value) == "AuthenticationFailed"
