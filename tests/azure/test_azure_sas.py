"""Shared access signatures through the official azure-storage-blob SDK,
made by its own ``generate_account_sas`` / ``generate_blob_sas`` /
``generate_container_sas``: every lease action on blobs and containers under
each kind of SAS and each permission set, allowed exactly where Azure allows
it (and the history naming the SAS); the refusals (expired, not yet valid,
tampered, wrong address, http where https is required, wrong resource type
or service); the other operations' permissions; stored access policies,
their revocation, and Get/Set Container ACL."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import (AccessPolicy, AccountSasPermissions, BlobClient, BlobLeaseClient, BlobSasPermissions,
                                BlobServiceClient,
                                ContainerClient, ContainerSasPermissions, ResourceTypes, generate_account_sas,
                                generate_blob_sas, generate_container_sas)

from leases.auth import sas
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from leases.models import Blob, Container, LeaseEvent
from tests.sdk_errors import sdk_error_code

HELD, NEXT = "ca761232-ed42-11ce-bacd-00aa0057b223", "3c7e72eb-b430-4526-bc53-d8ecef03798f"
ACTIONS = ("acquire", "renew", "change", "release", "break")
# Permission sets: each letter alone, and every letter but Write.
PERMISSION_SETS = ("w", "d", "r", "c", "l", "racdl", "rw")
KINDS = ("account", "blob", "container", "policy")


def expected(noun: str, kind: str, action: str, letters: str) -> bool:
    """Azure's tables: a lease needs Write; a break, Write or Delete (since
    2017-07-29, older than any SDK's version); a container's lease, an
    account SAS (a service SAS cannot lease a container)."""
    if noun == "container" and kind != "account":
        return False
    return "w" in letters or (action == "break" and "d" in letters)


def refusal(noun: str, kind: str) -> str:
    """A service SAS can never lease a container: an unsupported SAS
    operation (Azure's "SAS Error Codes"); else the permissions fall short."""
    return "AuthorizationFailure" if noun == "container" and kind != "account" else "AuthorizationPermissionMismatch"


def future(seconds: int = 3600) -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=seconds)


def make_sas(kind: str, noun: str, letters: str, container: str, blob: str | None, **extra) -> str:
    """A SAS by the SDK's own functions: an account SAS, a container SAS, a
    blob SAS (for a container's lease: a container SAS), or a SAS naming
    the stored access policy "lease-policy" (whose permissions are ``letters``)."""
    expiry = extra.pop("expiry", future())
    if kind == "account":
        types = extra.pop("resource_types", ResourceTypes(object=noun == "blob", container=noun == "container"))
        return generate_account_sas(DEV_ACCOUNT, DEV_KEY, types, AccountSasPermissions.from_string(letters), expiry,
                                    **extra)
    if kind == "policy" and blob is not None:
        return generate_blob_sas(DEV_ACCOUNT, container, blob, account_key=DEV_KEY, policy_id="lease-policy", **extra)
    if kind == "policy":
        return generate_container_sas(DEV_ACCOUNT, container, account_key=DEV_KEY, policy_id="lease-policy", **extra)
    if kind == "container" or blob is None:
        return generate_container_sas(DEV_ACCOUNT, container, account_key=DEV_KEY,
                                      permission=ContainerSasPermissions.from_string(letters), expiry=expiry, **extra)
    return generate_blob_sas(DEV_ACCOUNT, container, blob, account_key=DEV_KEY,
                             permission=BlobSasPermissions.from_string(letters), expiry=expiry, **extra)


def client(azure_server: str, token: str, container: str, blob: str | None):
    url = f"{azure_server}/{DEV_ACCOUNT}"
    if blob is None:
        return ContainerClient(url, container, credential=token, retry_total=0)
    return BlobClient(url, container, blob, credential=token, retry_total=0)


def act(lease: BlobLeaseClient, action: str) -> None:
    if action == "acquire":
        lease.acquire(lease_duration=15)
    elif action == "renew":
        lease.renew()
    elif action == "change":
        lease.change(NEXT)
    elif action == "release":
        lease.release()
    else:
        lease.break_lease()


def lease_row(noun: str, container: str, blob: str | None):
    row = (Blob.objects.get(container__name=container, name=blob) if noun == "blob"
           else Container.objects.get(name=container))
    return row.lease_state, row.lease_id, row.lease_expires_at, row.lease_break_at, row.lease_generation, row.etag


def error_code(exc: HttpResponseError) -> tuple[int | None, str | None]:
    return exc.status_code, sdk_error_code(exc)


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("noun", ["blob", "container"])
def test_each_lease_action_under_each_sas_and_permission_set(service, azure_server, noun, kind, action):
    for number, letters in enumerate(PERMISSION_SETS):
        container = f"sas-{number}"
        box = service.create_container(container)
        blob = None
        if noun == "blob":
            blob = "item (1).txt"
            box.upload_blob(blob, b"payload")
        keyed = box if blob is None else box.get_blob_client(blob)
        if kind == "policy":
            box.set_container_access_policy({"lease-policy": AccessPolicy(permission=letters, expiry=future())})
        if action != "acquire":
            BlobLeaseClient(keyed, lease_id=HELD).acquire(lease_duration=-1)
        token = make_sas(kind, noun, letters, container, blob)
        before = lease_row(noun, container, blob)
        lease = BlobLeaseClient(client(azure_server, token, container, blob), lease_id=HELD)
        allowed = expected(noun, kind, action, letters)
        if allowed:
            act(lease, action)
            event = LeaseEvent.objects.filter(container=container).latest("id")
            assert (event.action, event.status_code) == (action, {"acquire": 201, "break": 202}.get(action, 200))
            identity = "lease-policy" if kind == "policy" else sas.fingerprint(_signature(token))
            assert event.actor == f"sas:{DEV_ACCOUNT}:{identity}"
            if action != "renew":  # an infinite lease's renewal changes nothing but the history
                assert lease_row(noun, container, blob) != before
        else:
            with pytest.raises(HttpResponseError) as refused:
                act(lease, action)
            assert error_code(refused.value) == (403, refusal(noun, kind)), (kind, letters)
            assert lease_row(noun, container, blob) == before, letters


def _signature(token: str) -> str:
    from urllib.parse import parse_qsl

    return dict(parse_qsl(token))["sig"]


@pytest.fixture
def box(service):
    """Container 'box' with blob 'item.bin'; the container's SharedKey client."""
    container = service.create_container("box")
    container.upload_blob("item.bin", b"content")
    return container


def blob_with(azure_server: str, token: str, name: str = "item.bin") -> BlobClient:
    return client(azure_server, token, "box", name)


def refused_acquire(azure_server: str, token: str) -> tuple[int | None, str | None, str]:
    with pytest.raises(HttpResponseError) as refused:
        BlobLeaseClient(blob_with(azure_server, token)).acquire(lease_duration=15)
    assert refused.value.response is not None  # refused by the server, not before
    detail = refused.value.response.text()
    return refused.value.status_code, sdk_error_code(refused.value), detail


def test_expired_and_not_yet_valid_sas_are_refused_with_azures_detail(box, azure_server, clock):
    token = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key=DEV_KEY,
                              permission=BlobSasPermissions(write=True), expiry=future(600))
    BlobLeaseClient(blob_with(azure_server, token), lease_id=HELD).acquire(lease_duration=15)
    clock.advance(601)
    status, code, detail = refused_acquire(azure_server, token)
    assert (status, code) == (403, "AuthenticationFailed")
    assert "Signature not valid in the specified time frame: Start [] - Expiry [" in detail
    clock.reset()
    later = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key=DEV_KEY,
                              permission=BlobSasPermissions(write=True), start=future(600), expiry=future(1200))
    status, code, detail = refused_acquire(azure_server, later)
    assert (status, code) == (403, "AuthenticationFailed")
    assert "Signature not valid in the specified time frame: Start [" in detail and "- Current [" in detail
    assert Blob.objects.get(name="item.bin").lease_id == uuid.UUID(HELD)  # the first acquire only


@pytest.mark.parametrize("tamper", ["signature", "permissions", "expiry", "other-key", "other-blob"])
def test_tampered_sas_is_refused(box, azure_server, tamper):
    token = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key=DEV_KEY,
                              permission=BlobSasPermissions(read=True), expiry=future())
    if tamper == "signature":
        token = token.replace("sig=", "sig=AAAA")
    elif tamper == "permissions":
        token = token.replace("sp=r", "sp=rw")
    elif tamper == "expiry":
        token = token.replace("se=20", "se=21")
    elif tamper == "other-key":
        token = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key="b3RoZXIga2V5",
                                  permission=BlobSasPermissions(write=True), expiry=future())
    else:  # a SAS for another blob
        box.upload_blob("other.bin", b"x")
        token = generate_blob_sas(DEV_ACCOUNT, "box", "other.bin", account_key=DEV_KEY,
                                  permission=BlobSasPermissions(write=True), expiry=future())
    status, code, detail = refused_acquire(azure_server, token)
    assert (status, code) == (403, "AuthenticationFailed")
    assert "Signature did not match. String to sign used was " in detail
    # the string the server signed for the blob asked for, its lines as Azure shows them
    assert f"\n/blob/{DEV_ACCOUNT}/box/item.bin\n" in detail
    assert Blob.objects.get(name="item.bin").lease_state == "available"


def test_signed_ip_range(box, azure_server):
    inside = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key=DEV_KEY,
                               permission=BlobSasPermissions(write=True), expiry=future(), ip="127.0.0.0-127.0.0.9")
    BlobLeaseClient(blob_with(azure_server, inside), lease_id=HELD).acquire(lease_duration=15)
    outside = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key=DEV_KEY,
                                permission=BlobSasPermissions(write=True), expiry=future(), ip="10.1.2.3")
    status, code, detail = refused_acquire(azure_server, outside)
    assert (status, code) == (403, "AuthorizationSourceIPMismatch")
    assert "using this source IP 127.0.0.1." in detail


def test_https_only_sas_over_http_is_refused(box, azure_server):
    token = generate_account_sas(DEV_ACCOUNT, DEV_KEY, ResourceTypes(object=True),
                                 AccountSasPermissions(write=True), future(), protocol="https")
    assert refused_acquire(azure_server, token)[:2] == (403, "AuthorizationProtocolMismatch")
    both = generate_account_sas(DEV_ACCOUNT, DEV_KEY, ResourceTypes(object=True),
                                AccountSasPermissions(write=True), future(), protocol="https,http")
    BlobLeaseClient(blob_with(azure_server, both)).acquire(lease_duration=15)


def test_https_only_sas_is_accepted_over_https():
    """The pure check (the test server speaks http): the same SAS over https."""
    token = generate_account_sas(DEV_ACCOUNT, DEV_KEY, ResourceTypes(object=True),
                                 AccountSasPermissions(write=True), future(), protocol="https")
    environ = {"QUERY_STRING": "comp=lease&" + token, "REMOTE_ADDR": "10.0.0.1", "wsgi.url_scheme": "https"}
    grant = sas.verify(environ, DEV_ACCOUNT, "box", "item.bin", keys=lambda name: ((DEV_KEY,), name),
                       policy=lambda *args: None)
    assert sas.authorize(grant, "lease_blob") == {"w"}
    with pytest.raises(sas.LeaseholdError) as refused:
        sas.verify({**environ, "wsgi.url_scheme": "http"}, DEV_ACCOUNT, "box", "item.bin",
                   keys=lambda name: ((DEV_KEY,), name), policy=lambda *args: None)
    assert refused.value.code == "AuthorizationProtocolMismatch"


@pytest.mark.parametrize("types, noun, code", [
    (ResourceTypes(container=True), "blob", "AuthorizationResourceTypeMismatch"),
    (ResourceTypes(service=True), "blob", "AuthorizationResourceTypeMismatch"),
    (ResourceTypes(object=True), "container", "AuthorizationResourceTypeMismatch"),
])
def test_account_sas_of_the_wrong_resource_type(box, azure_server, types, noun, code):
    token = generate_account_sas(DEV_ACCOUNT, DEV_KEY, types, AccountSasPermissions(write=True), future())
    target = client(azure_server, token, "box", "item.bin" if noun == "blob" else None)
    with pytest.raises(HttpResponseError) as refused:
        BlobLeaseClient(target).acquire(lease_duration=15)
    assert error_code(refused.value) == (403, code)


def test_account_sas_for_another_service(box, azure_server):
    token = generate_account_sas(DEV_ACCOUNT, DEV_KEY, ResourceTypes(object=True), AccountSasPermissions(write=True),
                                 future(), services="q")
    assert refused_acquire(azure_server, token)[:2] == (403, "AuthorizationServiceMismatch")


BLOB_OPERATIONS = {
    "get_blob_properties": lambda c: c.get_blob_properties(),
    "download": lambda c: c.download_blob().readall(),
    "set_metadata": lambda c: c.set_blob_metadata({"k": "v"}),
    "upload_new": lambda c: c.upload_blob(b"n"),  # to "new.bin"
    "overwrite": lambda c: c.upload_blob(b"again", overwrite=True),
    "snapshot": lambda c: c.create_snapshot(),
    "delete": lambda c: c.delete_blob(),
    "stage_block": lambda c: c.stage_block("YmxvY2sx", b"block"),
    "commit_block_list": lambda c: c.commit_block_list([]),
    "get_block_list": lambda c: c.get_block_list("all"),
    "append_block": lambda c: c.append_block(b"line"),  # to "log.txt", an append blob
}

# (operation, letters that allow it, letters that do not), as Azure's tables give them.
OBJECT_CASES = [
    ("get_blob_properties", "r", "wcdl"),
    ("download", "r", "wcdl"),
    ("set_metadata", "w", "rcdl"),
    ("upload_new", "c", "rdl"),
    ("upload_new", "w", "rdl"),
    ("overwrite", "w", "rcdl"),  # Create alone may not replace a blob
    ("snapshot", "c", "rdl"),
    ("delete", "d", "rwcl"),
    ("stage_block", "w", "rcdl"),
    ("commit_block_list", "w", "rcdl"),
    ("get_block_list", "r", "wcdl"),
    ("append_block", "a", "rcdl"),
    ("append_block", "w", "rcdl"),
]


@pytest.mark.parametrize("kind", ["account", "container", "blob"])
@pytest.mark.parametrize("operation, allows, denies", OBJECT_CASES)
def test_blob_operations_honour_sas_permissions(box, azure_server, kind, operation, allows, denies):
    for letters, allowed in ((allows, True), (denies, False)):
        name = {"upload_new": "new.bin", "append_block": "log.txt"}.get(operation, "item.bin")
        if operation == "append_block":
            box.get_blob_client(name).create_append_blob()
        token = make_sas(kind, "blob", letters, "box", name)
        target = blob_with(azure_server, token, name)
        run = BLOB_OPERATIONS[operation]
        if allowed:
            run(target)
            if operation == "delete":
                box.upload_blob("item.bin", b"content")
            if operation == "upload_new":
                box.delete_blob("new.bin")
            if operation == "commit_block_list":
                box.upload_blob("item.bin", b"content", overwrite=True)
        else:
            with pytest.raises(HttpResponseError) as refused:
                run(target)
            assert error_code(refused.value) == (403, "AuthorizationPermissionMismatch"), (operation, letters)
    assert Blob.objects.filter(name="item.bin", snapshot="").exists()


@pytest.mark.parametrize("kind", ["account", "container", "blob"])
def test_copy_blob_under_a_sas_is_refused_and_changes_nothing(box, azure_server, kind):
    """A SAS reaches the blobs it names; a copy would read another one (its
    source), so Copy Blob under a SAS is refused (403), the target untouched."""
    box.upload_blob("secret.bin", b"not yours")
    target = blob_with(azure_server, make_sas(kind, "blob", "racwd", "box", "item.bin"))
    with pytest.raises(HttpResponseError) as refused:
        target.start_copy_from_url(f"{azure_server}/{DEV_ACCOUNT}/box/secret.bin", requires_sync=True)
    assert error_code(refused.value) == (403, "CannotVerifyCopySource")
    assert box.download_blob("item.bin").readall() == b"content"


@pytest.mark.parametrize("operation, resource_types, allows, denies, service_sas", [
    ("list_blobs", ResourceTypes(container=True), "l", "rwcd", True),
    ("get_container_properties", ResourceTypes(container=True), "r", "wcdl", False),
    ("set_container_metadata", ResourceTypes(container=True), "w", "rcdl", False),
    ("list_containers", ResourceTypes(service=True), "l", "rwcd", False),
])
def test_container_and_account_operations_honour_sas_permissions(box, azure_server, operation, resource_types,
                                                                 allows, denies, service_sas):
    url = f"{azure_server}/{DEV_ACCOUNT}"
    run = {"list_blobs": lambda c, token: list(c.list_blobs()),
           "get_container_properties": lambda c, token: c.get_container_properties(),
           "set_container_metadata": lambda c, token: c.set_container_metadata({"k": "v"}),
           "list_containers": lambda c, token: list(BlobServiceClient(url, credential=token,
                                                                      retry_total=0).list_containers())}[operation]
    for letters, allowed in ((allows, True), (denies, False)):
        token = generate_account_sas(DEV_ACCOUNT, DEV_KEY, resource_types, AccountSasPermissions.from_string(letters),
                                     future())
        target = ContainerClient(url, "box", credential=token, retry_total=0)
        if allowed:
            run(target, token)
        else:
            with pytest.raises(HttpResponseError) as refused:
                run(target, token)
            assert error_code(refused.value) == (403, "AuthorizationPermissionMismatch")
    container_sas = generate_container_sas(DEV_ACCOUNT, "box", account_key=DEV_KEY,
                                           permission=ContainerSasPermissions(read=True, write=True, list=True,
                                                                              delete=True), expiry=future())
    target = ContainerClient(url, "box", credential=container_sas, retry_total=0)
    if service_sas:
        run(target, container_sas)
    elif operation != "list_containers":  # a container SAS signs for its container only
        with pytest.raises(HttpResponseError) as refused:
            run(target, container_sas)
        assert error_code(refused.value) == (403, "AuthorizationFailure")  # not an operation a service SAS has


@pytest.mark.also_postgres  # stored access policies: written and read in the database
def test_stored_access_policy_grants_and_its_removal_revokes(box, azure_server):
    container = box
    container.set_container_access_policy({"leaser": AccessPolicy(permission="rw", expiry=future()),
                                           "reader": AccessPolicy(permission="r", expiry=future())})
    leaser = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key=DEV_KEY, policy_id="leaser")
    reader = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key=DEV_KEY, policy_id="reader")
    lease = BlobLeaseClient(blob_with(azure_server, leaser), lease_id=HELD)
    lease.acquire(lease_duration=15)
    assert LeaseEvent.objects.filter(action="acquire").latest("id").actor == f"sas:{DEV_ACCOUNT}:leaser"
    with pytest.raises(HttpResponseError) as refused:
        BlobLeaseClient(blob_with(azure_server, reader)).break_lease()
    assert error_code(refused.value) == (403, "AuthorizationPermissionMismatch")
    # The policy's permissions changed: the same SAS now reads only.
    container.set_container_access_policy({"leaser": AccessPolicy(permission="r", expiry=future()),
                                           "reader": AccessPolicy(permission="r", expiry=future())})
    with pytest.raises(HttpResponseError) as refused:
        lease.renew()
    assert error_code(refused.value) == (403, "AuthorizationPermissionMismatch")
    blob_with(azure_server, leaser).get_blob_properties()
    # Removed: refused at once, whatever it allowed.
    container.set_container_access_policy({"reader": AccessPolicy(permission="r", expiry=future())})
    status, code, detail = refused_acquire(azure_server, leaser)
    assert (status, code) == (403, "AuthenticationFailed") and "leaser" in detail
    blob_with(azure_server, reader).get_blob_properties()
    # An expired policy: its SAS is out of its time frame.
    container.set_container_access_policy({"reader": AccessPolicy(permission="r",
                                                                  expiry=datetime.now(timezone.utc) - timedelta(1))})
    with pytest.raises(HttpResponseError) as refused:
        blob_with(azure_server, reader).get_blob_properties()
    assert refused.value.status_code == 403
    # A field given by both the SAS and its policy is refused.
    container.set_container_access_policy({"reader": AccessPolicy(permission="r", expiry=future())})
    both = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key=DEV_KEY, policy_id="reader",
                             permission=BlobSasPermissions(read=True))
    with pytest.raises(HttpResponseError) as refused:
        blob_with(azure_server, both).get_blob_properties()
    assert error_code(refused.value) == (403, "AuthenticationFailed")


@pytest.mark.also_postgres  # stored access policies: written and read in the database
def test_container_acl_round_trip_and_limits(box, azure_server, service):
    container = box
    start, expiry = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), datetime(2030, 1, 1, tzinfo=timezone.utc)
    etag = container.get_container_properties().etag
    container.set_container_access_policy({"one": AccessPolicy(permission="rwdl", start=start, expiry=expiry),
                                           "two": AccessPolicy(permission="r")}, public_access="blob")
    acl = container.get_container_access_policy()
    assert acl["public_access"] == "blob"
    got = {item.id: item.access_policy for item in acl["signed_identifiers"]}
    assert set(got) == {"one", "two"}
    assert got["one"].permission == "rwdl" and got["two"].permission == "r"
    assert got["one"].start.startswith("2026-01-02T03:04:05") and got["one"].expiry.startswith("2030-01-01T00:00:00")
    assert container.get_container_properties().etag != etag
    six = {f"id{n}": AccessPolicy(permission="r", expiry=expiry) for n in range(6)}
    with pytest.raises(ValueError):  # the SDK itself refuses a sixth
        container.set_container_access_policy(six)
    raw = requests.put(f"{azure_server}/{DEV_ACCOUNT}/box?restype=container&comp=acl&" + generate_account_sas(
        DEV_ACCOUNT, DEV_KEY, ResourceTypes(container=True), AccountSasPermissions(write=True), future()),
        data=b"<SignedIdentifiers/>", timeout=10)
    # Only the account owner reads or sets stored access policies.
    assert (raw.status_code, raw.headers["x-ms-error-code"]) == (403, "AuthorizationFailure")
    container.set_container_access_policy({})
    acl = container.get_container_access_policy()
    assert acl["signed_identifiers"] == [] and acl["public_access"] is None


def test_set_acl_refuses_six_identifiers_and_bad_xml(box, azure_server):
    from tests import azure_raw

    body = "<SignedIdentifiers>" + "".join(
        f"<SignedIdentifier><Id>id{n}</Id><AccessPolicy><Permission>r</Permission></AccessPolicy></SignedIdentifier>"
        for n in range(6)) + "</SignedIdentifiers>"
    for payload in (body.encode(), b"<SignedIdentifiers><oops", b"<!DOCTYPE x><SignedIdentifiers/>"):
        response = azure_raw.signed("PUT", azure_server, "/devstoreaccount1/box?restype=container&comp=acl",
                                    body=payload)
        assert (response.status_code, azure_raw.error_code(response)) == (400, "InvalidXmlDocument")
    assert box.get_container_access_policy()["signed_identifiers"] == []


def test_an_account_key_sas_with_a_user_delegation_field_is_refused(box, azure_server):
    token = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key=DEV_KEY,
                              permission=BlobSasPermissions(write=True), expiry=future())
    status, code, detail = refused_acquire(azure_server, token + "&skoid=00000000-0000-0000-0000-000000000000")
    assert (status, code) == (403, "AuthenticationFailed") and "Signature fields not well formed" in detail


def test_the_json_api_does_not_take_a_sas(box, azure_server):
    token = generate_account_sas(DEV_ACCOUNT, DEV_KEY, ResourceTypes(container=True, object=True),
                                 AccountSasPermissions(read=True, write=True, list=True), future())
    response = requests.get(f"{azure_server}/api/v1/containers/?{token}", timeout=10)
    assert response.status_code == 401


def test_a_policy_name_is_not_disclosed_without_a_valid_signature(box, azure_server):
    forged = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key="b3RoZXIga2V5", policy_id="guess")
    status, code, detail = refused_acquire(azure_server, forged)
    assert (status, code) == (403, "AuthenticationFailed") and "Signature did not match" in detail


@pytest.mark.parametrize("text, expected_time", [
    ("2026-11-27", datetime(2026, 11, 27, tzinfo=timezone.utc)),
    ("2026-11-27T10:20Z", datetime(2026, 11, 27, 10, 20, tzinfo=timezone.utc)),
    ("2026-11-27T10:20:30Z", datetime(2026, 11, 27, 10, 20, 30, tzinfo=timezone.utc)),
    ("2026-11-27T10:20:30.1234567Z", datetime(2026, 11, 27, 10, 20, 30, 123456, tzinfo=timezone.utc)),
    ("2026-11-27T10:20:30+01:00", datetime(2026, 11, 27, 9, 20, 30, tzinfo=timezone.utc)),
    ("2026-11-27T10:20:30", None),  # a time needs its zone
    ("2026-13-01", None),
    ("tomorrow", None),
])
def test_signed_times(text, expected_time):
    assert sas.parse_time(text) == expected_time


def test_a_service_sas_sets_the_blob_reads_response_headers(box, azure_server):
    token = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key=DEV_KEY, permission=BlobSasPermissions(read=True),
                              expiry=future(), cache_control="no-cache", content_disposition="attachment; x.bin",
                              content_encoding="identity", content_language="fr", content_type="text/plain")
    reader = blob_with(azure_server, token)
    for settings in (reader.get_blob_properties().content_settings,
                     reader.download_blob().properties.content_settings):
        assert (settings.cache_control, settings.content_disposition, settings.content_encoding,
                settings.content_language, settings.content_type) == \
            ("no-cache", "attachment; x.bin", "identity", "fr", "text/plain")
    assert reader.download_blob().readall() == b"content"
    stored = box.get_blob_client("item.bin").get_blob_properties().content_settings
    assert stored.content_type == "application/octet-stream" and stored.cache_control is None


@pytest.mark.parametrize("name", ["d\u00e9j\u00e0 vu/\u6587\u4ef6 \U0001f600.txt", "a+b=c&d%20e?.bin"])
def test_a_blob_sas_for_a_name_the_url_encodes(box, azure_server, name):
    box.upload_blob(name, b"x")
    token = generate_blob_sas(DEV_ACCOUNT, "box", name, account_key=DEV_KEY, permission=BlobSasPermissions(write=True),
                              expiry=future())
    BlobLeaseClient(blob_with(azure_server, token, name), lease_id=HELD).acquire(lease_duration=15)
    assert Blob.objects.get(name=name).lease_id == uuid.UUID(HELD)
