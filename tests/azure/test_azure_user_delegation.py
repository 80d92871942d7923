"""User delegation SAS on the Azure door, through the live in-process server: Get User Delegation
Key with a bearer token from the real OpenID provider (tests/oidc_provider.py, its own process) by a
raw request, a SAS made from its answer by the official SDK's ``generate_blob_sas``, used by the
SDK's clients: a lease acquired and renewed, the history naming the delegating principal; the SAS's
rights cut to the principal's role when the key was issued; a tampered skoid, a revoked key and an
expired key refused with Azure's 403; the key's request refused as Azure refuses it (no bearer token,
no role, an expiry more than seven days ahead, no Expiry); the key's value stored nowhere. The SDK
over https end to end: tests/processes/test_user_delegation_tls.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from xml.etree import ElementTree

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobClient, BlobLeaseClient, BlobSasPermissions, UserDelegationKey, generate_blob_sas
from django.core.management import call_command

from leases.management.commands.leasehold_setup import DEV_ACCOUNT
from leases.models import LeaseEvent
from leases.models import UserDelegationKey as KeyRow
from tests import azure_raw
from tests.azure import test_azure_bearer as bearer_tests
from tests.sdk_errors import sdk_error_code

pytestmark = pytest.mark.also_postgres  # the keys' rows: found again by their exact times
KEY_PATH = f"/{DEV_ACCOUNT}/?restype=service&comp=userdelegationkey"
SCOPE = bearer_tests.SCOPE
# The bearer tests' provider (its clients: writer, reader, nobody), settings and blob /jobs/nightly.
provider, oidc, blob = bearer_tests.provider, bearer_tests.oidc, bearer_tests.blob


def key_info(expiry: datetime, start: datetime | None = None) -> bytes:
    start_xml = f"<Start>{start:%Y-%m-%dT%H:%M:%SZ}</Start>" if start else ""
    return f"<?xml version='1.0' encoding='utf-8'?><KeyInfo>{start_xml}<Expiry>{expiry:%Y-%m-%dT%H:%M:%SZ}</Expiry>" \
           "</KeyInfo>".encode()


def ask(base: str, token: str, body: bytes):
    return azure_raw.signed("POST", base, KEY_PATH, headers={"Authorization": f"Bearer {token}"}, body=body,
                            version="2025-11-05", sign=False)


def get_key(base: str, token: str, hours: int = 1) -> UserDelegationKey:
    answer = ask(base, token, key_info(datetime.now(timezone.utc) + timedelta(hours=hours)))
    assert answer.status_code == 200, answer.text
    root = ElementTree.fromstring(answer.content)
    key = UserDelegationKey()
    key.signed_oid, key.signed_tid = root.findtext("SignedOid"), root.findtext("SignedTid")
    key.signed_start, key.signed_expiry = root.findtext("SignedStart"), root.findtext("SignedExpiry")
    key.signed_service, key.signed_version = root.findtext("SignedService"), root.findtext("SignedVersion")
    key.value = root.findtext("Value")
    return key


def sas_blob(base: str, key: UserDelegationKey, permission: BlobSasPermissions) -> BlobClient:
    token = generate_blob_sas(DEV_ACCOUNT, "jobs", "nightly", user_delegation_key=key, permission=permission,
                              expiry=datetime.now(timezone.utc) + timedelta(minutes=30))
    return BlobClient(f"{base}/{DEV_ACCOUNT}", "jobs", "nightly", credential=token, retry_total=0)


def refused(call_it) -> tuple[int | None, str | None, str]:
    with pytest.raises(HttpResponseError) as caught:
        call_it()
    assert caught.value.response is not None  # refused by the server, not before
    return caught.value.status_code, sdk_error_code(caught.value), caught.value.response.text()


def test_a_key_signs_a_sas_that_leases_and_the_history_names_the_delegator(oidc, blob):
    key = get_key(blob, oidc.token("writer", SCOPE))
    assert (key.signed_oid, key.signed_service, key.signed_version) == ("writer", "b", "2025-11-05")
    client = sas_blob(blob, key, BlobSasPermissions(read=True, write=True))
    lease = BlobLeaseClient(client)
    lease.acquire(lease_duration=15)
    lease.renew()
    assert client.get_blob_properties().lease.state == "leased"
    actors = set(LeaseEvent.objects.filter(container="jobs", action__in=("acquire", "renew"))
                 .values_list("actor", flat=True))
    assert len(actors) == 1 and actors.pop().endswith(f" for bearer:{oidc_fp(oidc)}:writer (Nightly job)")
    # The key's value is derived, never stored: no column of its row holds it.
    row = KeyRow.objects.get()
    assert key.value and key.value not in repr(list(KeyRow.objects.values().get().values())) and row.actor.endswith("(Nightly job)")


def oidc_fp(issuer) -> str:
    from leases.auth.bearer import fingerprint

    return fingerprint(issuer.issuer)


def test_a_readers_sas_may_read_but_not_lease_whatever_its_permissions(oidc, blob):
    client = sas_blob(blob, get_key(blob, oidc.token("reader", SCOPE)), BlobSasPermissions(read=True, write=True))
    assert client.download_blob().readall() == b"x"
    status, code, _ = refused(lambda: BlobLeaseClient(client).acquire(lease_duration=15))
    assert (status, code) == (403, "AuthorizationPermissionMismatch")
    assert azure_raw.signed("HEAD", blob, f"/{DEV_ACCOUNT}/jobs/nightly").headers["x-ms-lease-state"] == "available"


def test_a_tampered_skoid_is_refused(oidc, blob):
    key = get_key(blob, oidc.token("writer", SCOPE))
    key.signed_oid = "reader"  # the SAS names another principal, signed with the writer's key
    status, code, detail = refused(lambda: BlobLeaseClient(sas_blob(blob, key, BlobSasPermissions(write=True)))
                                   .acquire(lease_duration=15))
    assert (status, code) == (403, "AuthenticationFailed") and "Signature did not match" in detail


def test_a_revoked_key_is_refused(oidc, blob):
    key = get_key(blob, oidc.token("writer", SCOPE))
    client = sas_blob(blob, key, BlobSasPermissions(read=True, write=True))
    assert client.download_blob().readall() == b"x"
    call_command("leasehold_delegation_keys", "revoke", DEV_ACCOUNT)
    status, code, detail = refused(lambda: BlobLeaseClient(client).acquire(lease_duration=15))
    assert (status, code) == (403, "AuthenticationFailed") and "was revoked" in detail
    # A key asked for after the revocation works.
    BlobLeaseClient(sas_blob(blob, get_key(blob, oidc.token("writer", SCOPE)), BlobSasPermissions(write=True))
                    ).acquire(lease_duration=15)


def test_an_expired_key_is_refused(oidc, blob, clock):
    client = sas_blob(blob, get_key(blob, oidc.token("writer", SCOPE), hours=1), BlobSasPermissions(read=True))
    assert client.download_blob().readall() == b"x"
    clock.advance(3601)
    status, code, detail = refused(lambda: client.download_blob().readall())
    assert (status, code) == (403, "AuthenticationFailed") and "not valid at this time" in detail


def _bounds_case(case: str) -> tuple[bytes, str]:
    """A Get User Delegation Key body and the XmlNodeName Azure answers for it: a time out of bounds
    is named by its value (docs/reference/azure-compatibility.md), a missing or unreadable one by its node."""
    if case in ("late", "past"):
        when = datetime.now(timezone.utc) + (timedelta(days=7, hours=1) if case == "late" else -timedelta(hours=1))
        return key_info(when), f"{when:%Y-%m-%dT%H:%M:%SZ}"
    if case == "missing":
        return b"<KeyInfo><Start>2026-01-01T00:00:00Z</Start></KeyInfo>", "Expiry"
    return b"<KeyInfo><Expiry>tomorrow</Expiry></KeyInfo>", "Expiry"


# The cases by name: their bodies hold the time, which must not be in a test's id (the workers collect apart).
@pytest.mark.parametrize("case", ["late", "past", "missing", "unreadable"])
def test_a_key_outside_azures_bounds_is_refused(oidc, blob, case):
    body, node = _bounds_case(case)
    answer = ask(blob, oidc.token("writer", SCOPE), body)
    assert answer.status_code == 400 and azure_raw.error_code(answer) == "InvalidXmlNodeValue", answer.text
    assert f"<XmlNodeName>{node}</XmlNodeName>" in answer.text
    assert not KeyRow.objects.exists()


def test_only_a_principal_with_a_role_may_ask_for_a_key(oidc, blob):
    body = key_info(datetime.now(timezone.utc) + timedelta(hours=1))
    answer = ask(blob, oidc.token("nobody", SCOPE), body)
    assert answer.status_code == 403 and azure_raw.error_code(answer) == "AuthorizationPermissionMismatch"
    shared_key = azure_raw.signed("POST", blob, KEY_PATH, body=body)
    assert shared_key.status_code == 403 and azure_raw.error_code(shared_key) == "AuthenticationFailed"
    assert "Only a bearer token" in shared_key.text
    assert not KeyRow.objects.exists()
