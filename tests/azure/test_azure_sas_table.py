"""Every operation under every kind of SAS and every permission letter, through the official SDK:
allowed exactly where Azure's "Create an account SAS" and "Create a service SAS" tables allow it,
refused with Azure's code (403 AuthorizationPermissionMismatch where the letters fall short,
AuthorizationFailure where that kind of SAS can never do it), and a refusal changes nothing. The
expectations are written here from Azure's tables, not read from leases/auth/sas.py. Also: a
stored access policy's start and expiry decide, and a SAS signed with the account's second key
is as good as one signed with its first."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import (AccessPolicy, AccountSasPermissions, BlobClient, BlobLeaseClient, BlobSasPermissions,
                                BlobServiceClient, ContainerClient, ContainerSasPermissions, ResourceTypes,
                                generate_account_sas, generate_blob_sas, generate_container_sas)

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from leases.models import Blob, Container

from tests.sdk_errors import sdk_error_code

KEY2 = "c2Vjb25kIGtleSBvZiB0aGUgZGV2ZWxvcG1lbnQgYWNjb3VudA=="
LETTERS = "racwdl"
KINDS = ("account", "container", "blob", "policy")
HELD = "ca761232-ed42-11ce-bacd-00aa0057b223"

# operation -> (what it acts on, the account SAS letters that allow it, the service SAS letters that
# allow it; "" where no service SAS can). A break needs Write or Delete (2017-07-29 on).
BLOB_OPS = {
    "get_blob": ("r", "r"), "get_properties": ("r", "r"), "set_metadata": ("w", "w"),
    "put_new": ("cw", "cw"), "overwrite": ("w", "w"), "delete": ("d", "d"), "snapshot": ("cw", "cw"),
    "acquire_lease": ("w", "w"), "break_lease": ("wd", "wd"), "stage_block": ("w", "w"),
    "commit_block_list": ("w", "w"), "get_block_list": ("r", "r"), "append_block": ("aw", "aw"),
}
CONTAINER_OPS = {  # account SAS with srt=c; a service SAS (sr=c) may only list
    "list_blobs": ("l", "l"), "create_container": ("cw", ""), "delete_container": ("d", ""),
    "container_properties": ("r", ""), "set_container_metadata": ("w", ""), "acquire_container_lease": ("w", ""),
    "break_container_lease": ("wd", ""), "get_container_acl": ("", ""),
}


def future(seconds: int = 3600) -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=seconds)


def expected(operation: str, kind: str, letter: str) -> str:
    """"ok", or the code of the refusal Azure's tables give."""
    account, service = {**BLOB_OPS, **CONTAINER_OPS}[operation]
    letters = account if kind == "account" else service
    if not letters:
        return "AuthorizationFailure"
    return "ok" if letter in letters else "AuthorizationPermissionMismatch"


def token(kind: str, letter: str, container: str, blob: str | None, *, key: str = DEV_KEY) -> str:
    if kind == "account":
        types = ResourceTypes(object=blob is not None, container=blob is None)
        return generate_account_sas(DEV_ACCOUNT, key, types, AccountSasPermissions.from_string(letter), future())
    if kind == "policy":
        return generate_container_sas(DEV_ACCOUNT, container, account_key=key, policy_id="table")
    if kind == "container":
        return generate_container_sas(DEV_ACCOUNT, container, account_key=key,
                                      permission=ContainerSasPermissions.from_string(letter), expiry=future())
    assert blob is not None
    return generate_blob_sas(DEV_ACCOUNT, container, blob, account_key=key,
                             permission=BlobSasPermissions.from_string(letter), expiry=future())


def state(container: str, blob: str | None) -> tuple:
    """What a refused operation must leave as it was."""
    rows = (Blob.objects.filter(container__name=container) if blob is not None
            else Container.objects.filter(name=container))
    return tuple(sorted((str(getattr(row, "name", "")), getattr(row, "snapshot", ""), row.etag, row.lease_state,
                         str(row.lease_id)) for row in rows))


def prepare_blob(keyed: ContainerClient, operation: str) -> str:
    """The blob ``operation`` acts on, as the account key leaves it."""
    name = "new.bin" if operation == "put_new" else "item.bin"
    if operation == "append_block":
        keyed.get_blob_client(name).create_append_blob()
    elif operation != "put_new":
        keyed.upload_blob(name, b"content")
    if operation == "break_lease":
        BlobLeaseClient(keyed.get_blob_client(name), lease_id=HELD).acquire(lease_duration=-1)
    return name


BLOB_CALLS = {
    "get_blob": lambda c: c.download_blob().readall(),
    "get_properties": lambda c: c.get_blob_properties(),
    "set_metadata": lambda c: c.set_blob_metadata({"k": "v"}),
    "put_new": lambda c: c.upload_blob(b"n"),
    "overwrite": lambda c: c.upload_blob(b"again", overwrite=True),
    "delete": lambda c: c.delete_blob(),
    "snapshot": lambda c: c.create_snapshot(),
    "acquire_lease": lambda c: BlobLeaseClient(c).acquire(lease_duration=15),
    "break_lease": lambda c: BlobLeaseClient(c).break_lease(),
    "stage_block": lambda c: c.stage_block("YmxvY2sx", b"block"),
    "commit_block_list": lambda c: c.commit_block_list([]),
    "get_block_list": lambda c: c.get_block_list("all"),
    "append_block": lambda c: c.append_block(b"line"),
}
CONTAINER_CALLS = {
    "list_blobs": lambda c: list(c.list_blobs()),
    "create_container": lambda c: c.create_container(),
    "delete_container": lambda c: c.delete_container(),
    "container_properties": lambda c: c.get_container_properties(),
    "set_container_metadata": lambda c: c.set_container_metadata({"k": "v"}),
    "acquire_container_lease": lambda c: BlobLeaseClient(c).acquire(lease_duration=15),
    "break_container_lease": lambda c: BlobLeaseClient(c).break_lease(),
    "get_container_acl": lambda c: c.get_container_access_policy(),
}


def outcome(call, target, before, after) -> str:
    try:
        call(target)
    except HttpResponseError as refused:
        assert refused.status_code == 403, refused
        assert after() == before, "a refused operation changed something"
        return sdk_error_code(refused) or "?"
    return "ok"


def cases(operation: str) -> list[tuple[str, str]]:
    kinds = [k for k in KINDS if not (operation in CONTAINER_OPS and k == "blob")]
    return [(kind, letter) for kind in kinds for letter in LETTERS
            if not (kind == "blob" and letter == "l")]  # a blob SAS has no List letter


def run_case(service: BlobServiceClient, azure_server: str, operation: str, kind: str, letter: str) -> str:
    url = f"{azure_server}/{DEV_ACCOUNT}"
    container = f"{operation.replace('_', '-')}-{kind}-{letter}"
    keyed = service.get_container_client(container)
    if operation != "create_container":
        keyed.create_container()
    if kind == "policy" and operation != "create_container":
        keyed.set_container_access_policy({"table": AccessPolicy(permission=letter, expiry=future())})
    if operation in BLOB_OPS:
        blob = prepare_blob(keyed, operation)
        target = BlobClient(url, container, blob, credential=token(kind, letter, container, blob), retry_total=0)
        before = state(container, blob)
        return outcome(BLOB_CALLS[operation], target, before, lambda: state(container, blob))
    if kind == "policy" and operation == "create_container":
        return "AuthorizationFailure"  # no container yet to hold the policy; the table says the same
    if operation == "break_container_lease":
        BlobLeaseClient(keyed, lease_id=HELD).acquire(lease_duration=-1)
    keyless = ContainerClient(url, container, credential=token(kind, letter, container, None), retry_total=0)
    before = state(container, None)
    return outcome(CONTAINER_CALLS[operation], keyless, before, lambda: state(container, None))


@pytest.mark.parametrize("operation", [*BLOB_OPS, *CONTAINER_OPS])
def test_every_operation_under_every_sas_kind_and_letter(service, azure_server, operation):
    got = {(kind, letter): run_case(service, azure_server, operation, kind, letter)
           for kind, letter in cases(operation)}
    want = {(kind, letter): expected(operation, kind, letter) for kind, letter in cases(operation)}
    assert got == want


@pytest.fixture
def two_keys(azure_server):
    from leases.services import account_ensure

    account_ensure(name=DEV_ACCOUNT, key1=DEV_KEY, key2=KEY2)
    return azure_server


@pytest.mark.parametrize("kind", KINDS)
def test_a_sas_signed_with_either_key_is_accepted_and_another_key_refused(service, two_keys, kind):
    box = service.create_container("keys")
    box.upload_blob("item.bin", b"content")
    box.set_container_access_policy({"table": AccessPolicy(permission="w", expiry=future())})
    url = f"{two_keys}/{DEV_ACCOUNT}"
    for key, allowed in ((DEV_KEY, True), (KEY2, True), ("b3RoZXIga2V5", False)):
        blob = BlobClient(url, "keys", "item.bin", credential=token(kind, "w", "keys", "item.bin", key=key),
                          retry_total=0)
        if allowed:
            blob.set_blob_metadata({"signed": "yes"})
        else:
            with pytest.raises(HttpResponseError) as refused:
                blob.set_blob_metadata({"signed": "no"})
            assert (refused.value.status_code, sdk_error_code(refused.value)) == (403, "AuthenticationFailed")
    assert box.get_blob_client("item.bin").get_blob_properties().metadata == {"signed": "yes"}


@pytest.mark.also_postgres  # stored access policies: written and read in the database
def test_a_stored_policys_start_and_expiry_decide(service, azure_server, clock):
    box = service.create_container("timed")
    box.upload_blob("item.bin", b"content")
    start, expiry = future(600), future(1200)
    box.set_container_access_policy({"timed": AccessPolicy(permission="w", start=start, expiry=expiry)})
    sas = generate_blob_sas(DEV_ACCOUNT, "timed", "item.bin", account_key=DEV_KEY, policy_id="timed")
    blob = BlobClient(f"{azure_server}/{DEV_ACCOUNT}", "timed", "item.bin", credential=sas, retry_total=0)

    def attempt() -> str:
        try:
            blob.set_blob_metadata({"at": "now"})
        except HttpResponseError as refused:
            return sdk_error_code(refused) or "?"
        return "ok"

    before_start = attempt()
    clock.advance(900)  # between the policy's start and its expiry
    within = attempt()
    clock.advance(600)  # past its expiry
    after_expiry = attempt()
    assert (before_start, within, after_expiry) == ("AuthenticationFailed", "ok", "AuthenticationFailed")
