"""Bad input, authentication, versions, conditional headers, listings and
properties on the Azure endpoint. Each refusal asserts status, error code and
that the lease and blob are unchanged."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ResourceNotFoundError
from azure.storage.blob import BlobServiceClient

from leases.models import Blob, LeaseEvent

from tests import azure_raw
from tests.conftest import CONNECTION
from tests.sdk_errors import sdk_error_code

GUID = "ca761232-ed42-11ce-bacd-00aa0057b223"
BLOB_PATH = "/devstoreaccount1/box/item.bin"


@pytest.fixture
def leased(service, azure_server):
    """A container 'box' with blob 'item.bin' under an infinite lease GUID."""
    container = service.create_container("box")
    blob = container.upload_blob("item.bin", b"content")
    blob.acquire_lease(lease_duration=-1, lease_id=GUID)
    return azure_server, blob


def state_of(blob):
    row = Blob.objects.get(name="item.bin", snapshot="")
    props = blob.get_blob_properties()
    return (row.lease_state, row.lease_id, row.lease_duration, row.lease_expires_at, row.lease_generation,
            props.etag, props.last_modified, blob.download_blob().readall())


BAD_LEASE_REQUESTS = [
    # (action, headers, status, code, header named in the error)
    ("acquire", {}, 400, "MissingRequiredHeader", "x-ms-lease-duration"),
    ("acquire", {"duration": "14"}, 400, "InvalidHeaderValue", "x-ms-lease-duration"),
    ("acquire", {"duration": "61"}, 400, "InvalidHeaderValue", "x-ms-lease-duration"),
    ("acquire", {"duration": "0"}, 400, "InvalidHeaderValue", "x-ms-lease-duration"),
    ("acquire", {"duration": "fifteen"}, 400, "InvalidHeaderValue", "x-ms-lease-duration"),
    ("acquire", {"duration": "1e3"}, 400, "InvalidHeaderValue", "x-ms-lease-duration"),
    ("acquire", {"duration": "15", "proposed_lease_id": "abcdefg"}, 400, "InvalidHeaderValue",
     "x-ms-proposed-lease-id"),
    ("renew", {}, 400, "MissingRequiredHeader", "x-ms-lease-id"),
    ("renew", {"lease_id": "not-a-guid"}, 400, "InvalidHeaderValue", "x-ms-lease-id"),
    ("release", {}, 400, "MissingRequiredHeader", "x-ms-lease-id"),
    ("release", {"lease_id": "1234"}, 400, "InvalidHeaderValue", "x-ms-lease-id"),
    ("change", {"lease_id": GUID}, 400, "MissingRequiredHeader", "x-ms-proposed-lease-id"),
    ("change", {"proposed_lease_id": GUID}, 400, "MissingRequiredHeader", "x-ms-lease-id"),
    ("change", {"lease_id": GUID, "proposed_lease_id": "zz"}, 400, "InvalidHeaderValue", "x-ms-proposed-lease-id"),
    ("break", {"break_period": "61"}, 400, "InvalidHeaderValue", "x-ms-lease-break-period"),
    ("break", {"break_period": "-1"}, 400, "InvalidHeaderValue", "x-ms-lease-break-period"),
    ("break", {"break_period": "soon"}, 400, "InvalidHeaderValue", "x-ms-lease-break-period"),
    ("steal", {}, 400, "InvalidHeaderValue", "x-ms-lease-action"),
    (None, {}, 400, "MissingRequiredHeader", "x-ms-lease-action"),
]


@pytest.mark.parametrize("action,headers,status,code,header", BAD_LEASE_REQUESTS,
                         ids=[f"{a}-{'-'.join(h)}" for a, h, *_ in BAD_LEASE_REQUESTS])
@pytest.mark.parametrize("path", [BLOB_PATH, "/devstoreaccount1/box"], ids=["blob", "container"])
def test_bad_lease_input_is_400_and_changes_nothing(leased, action, headers, status, code, header, path):
    base, blob = leased
    before = state_of(blob)
    response = azure_raw.lease(base, path, action, **headers)
    assert (response.status_code, azure_raw.error_code(response)) == (status, code)
    assert f"<HeaderName>{header}</HeaderName>".encode() in response.content
    assert state_of(blob) == before
    event = LeaseEvent.objects.order_by("-id").first()
    assert (event.outcome, event.error_code) == ("refused", code)


@pytest.mark.parametrize("path,code", [
    ("/devstoreaccount1/box/missing.bin", "BlobNotFound"),
    ("/devstoreaccount1/nobox/item.bin", "ContainerNotFound"),
    ("/devstoreaccount1/nobox", "ContainerNotFound"),
])
def test_lease_on_missing_resource_is_404(leased, path, code):
    base, blob = leased
    before = state_of(blob)
    response = azure_raw.lease(base, path, "acquire", duration=15)
    assert (response.status_code, azure_raw.error_code(response)) == (404, code)
    assert state_of(blob) == before


def test_lease_on_a_snapshot_is_400(leased):
    base, blob = leased
    snapshot = blob.create_snapshot()["snapshot"]
    response = azure_raw.signed("PUT", base, f"{BLOB_PATH}?comp=lease&snapshot={snapshot}",
                                headers={"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15"})
    assert (response.status_code, azure_raw.error_code(response)) == (400, "InvalidOperation")


def test_sdk_errors_map_to_its_exceptions(service):
    with pytest.raises(ResourceNotFoundError) as exc:
        service.get_container_client("nothere").get_blob_client("x").acquire_lease()
    assert sdk_error_code(exc.value) == "ContainerNotFound"


# ---------------------------------------------------------------- authentication

def test_wrong_key_is_403_authentication_failed(azure_server, leased):
    wrong = CONNECTION.format(a="devstoreaccount1", k="A" * 86 + "==", url=azure_server)
    client = BlobServiceClient.from_connection_string(wrong, retry_total=0)
    blob = client.get_blob_client("box", "item.bin")
    with pytest.raises(ClientAuthenticationError) as exc:
        blob.acquire_lease(lease_duration=15)
    assert exc.value.status_code == 403 and sdk_error_code(exc.value) == "AuthenticationFailed"
    # additional_info: the error's other XML elements, set by azure-storage (azure-core does not declare it)
    assert "AuthenticationErrorDetail" in str(exc.value) or exc.value.additional_info  # type: ignore[attr-defined]


@pytest.mark.parametrize("kwargs,status,code", [
    ({"sign": False}, 401, "NoAuthenticationInformation"),
    ({"date": format_datetime(datetime.now(timezone.utc) - timedelta(minutes=20), usegmt=True)},
     403, "AuthenticationFailed"),
    ({"date": "yesterday"}, 403, "AuthenticationFailed"),
    ({"account": "someoneelse"}, 403, "AuthenticationFailed"),
    # 2011-08-18 and 2009-09-19 get legacy semantics (test_azure_legacy.py); other old dates do not.
    ({"version": "2011-08-17"}, 400, "InvalidHeaderValue"),
    ({"version": "2009-07-17"}, 400, "InvalidHeaderValue"),
    ({"version": "latest"}, 400, "InvalidHeaderValue"),
])
def test_request_refusals(leased, kwargs, status, code):
    base, blob = leased
    before = state_of(blob)
    response = azure_raw.signed("PUT", base, f"{BLOB_PATH}?comp=lease",
                                headers={"x-ms-lease-action": "break", "x-ms-lease-break-period": "0"}, **kwargs)
    assert (response.status_code, azure_raw.error_code(response)) == (status, code)
    assert state_of(blob) == before


def test_a_client_still_writing_a_refused_upload_reads_the_refusal(leased):
    """A Put Block without the lease id is refused before its body is read;
    the client, still writing its 32 MiB, gets the 412, not a reset (a
    server that closes with the body unread resets the connection). Nothing
    staged."""
    base, blob = leased
    path = BLOB_PATH + "?comp=block&blockid=" + base64.b64encode(b"00000001").decode().replace("=", "%3D")
    answer, written, write_error = azure_raw.upload_refused_midway(base, path, 32 << 20)
    assert (answer, written, write_error) == ("HTTP/1.0 412 Precondition Failed", 32 << 20, "")
    assert blob.get_block_list("all") == ([], [])


def test_malformed_authorization_is_400(leased):
    base, _ = leased
    import requests

    response = requests.get(f"{base}/devstoreaccount1?comp=list", headers={"Authorization": "Basic x"})
    assert (response.status_code, response.headers["x-ms-error-code"]) == (400, "InvalidAuthenticationInfo")
    # Bearer is a scheme of its own (tests/azure/test_azure_bearer.py): without x-ms-version, Azure's
    # "not supported in this version".
    response = requests.get(f"{base}/devstoreaccount1?comp=list", headers={"Authorization": "Bearer x"})
    assert (response.status_code, response.headers["x-ms-error-code"]) == (403, "AuthenticationFailed")


def test_future_versions_are_accepted_and_echoed(leased):
    base, _ = leased
    response = azure_raw.signed("GET", base, "/devstoreaccount1/box?restype=container", version="2099-12-31")
    assert response.status_code == 200 and response.headers["x-ms-version"] == "2099-12-31"


def test_names_with_reserved_characters_sign_and_resolve(service):
    """The signature covers the path as the client encoded it, which the
    server only sees decoded: the Python SDK's encoding still verifies."""
    container = service.create_container("names")
    for name in ("a b/c(1)!*'.txt", "ü/ñ@$&+,;=.bin", "dir/sub dir/x%41.txt"):
        blob = container.upload_blob(name, name.encode())
        lease = blob.acquire_lease(lease_duration=15)
        assert blob.download_blob(lease=lease).readall() == name.encode()
    assert sorted(b.name for b in container.list_blobs()) == sorted(
        ["a b/c(1)!*'.txt", "ü/ñ@$&+,;=.bin", "dir/sub dir/x%41.txt"])


@pytest.mark.parametrize("safe", ["/~", "/~!'()*"], ids=["python-dotnet-java", "javascript"])
def test_each_sdks_path_encoding_verifies(azure_server, safe):
    """SDKs differ in which characters they leave unencoded in the path they
    sign; each encoding verifies, and a tampered path does not."""
    base = azure_server
    assert azure_raw.signed("PUT", base, "/devstoreaccount1/enc?restype=container").status_code in (201, 409)
    path = "/devstoreaccount1/enc/copy (1)!*'.txt"
    put = azure_raw.signed("PUT", base, path, body=b"x", headers={"x-ms-blob-type": "BlockBlob"}, safe=safe)
    assert put.status_code == 201, put.content
    assert azure_raw.signed("GET", base, path, safe=safe).content == b"x"
    # the same request signed with another key is refused
    other_key = base64.b64encode(b"k" * 64).decode()
    forged = azure_raw.signed("GET", base, path, safe=safe, key=other_key)
    assert forged.status_code == 403 and azure_raw.error_code(forged) == "AuthenticationFailed"


def test_client_request_id_is_echoed_and_recorded(leased):
    base, _ = leased
    response = azure_raw.lease(base, BLOB_PATH, "renew", lease_id=GUID, **{"x-ms-client-request-id": "trace-42"})
    assert response.status_code == 200
    assert response.headers["x-ms-client-request-id"] == "trace-42"
    event = LeaseEvent.objects.order_by("-id").first()
    assert (event.action, event.client_request_id, event.request_id) == (
        "renew", "trace-42", response.headers["x-ms-request-id"])
    assert event.actor == "account:devstoreaccount1" and event.remote_addr == "127.0.0.1"


def test_unknown_operation_and_verb_are_4xx(leased):
    base, _ = leased
    response = azure_raw.signed("PUT", base, f"{BLOB_PATH}?comp=teleport")
    assert (response.status_code, azure_raw.error_code(response)) == (400, "InvalidQueryParameterValue")
    assert b"<QueryParameterName>comp</QueryParameterName>" in response.content
    response = azure_raw.signed("POST", base, BLOB_PATH)
    assert (response.status_code, azure_raw.error_code(response)) == (405, "UnsupportedHttpVerb")


# ---------------------------------------------------------------- conditional headers

def test_lease_conditions(leased):
    base, blob = leased
    props = blob.get_blob_properties()
    etag = props.etag
    old = format_datetime(props.last_modified - timedelta(hours=1), usegmt=True)
    cases = [
        ({"If-Match": '"0xDEADBEEF"'}, 412, "ConditionNotMet"),
        ({"If-None-Match": etag}, 412, "ConditionNotMet"),
        ({"If-Unmodified-Since": old}, 412, "ConditionNotMet"),
        ({"If-Modified-Since": format_datetime(props.last_modified, usegmt=True)}, 412, "ConditionNotMet"),
        ({"If-Match": etag, "If-None-Match": "*"}, 400, "MultipleConditionHeadersNotSupported"),
        ({"If-Modified-Since": "not a date"}, 400, "InvalidHeaderValue"),
    ]
    before = state_of(blob)
    for headers, status, code in cases:
        response = azure_raw.lease(base, BLOB_PATH, "renew", lease_id=GUID, **headers)
        assert (response.status_code, azure_raw.error_code(response)) == (status, code), headers
    assert state_of(blob) == before
    ok = azure_raw.lease(base, BLOB_PATH, "renew", lease_id=GUID, **{"If-Match": etag, "If-Unmodified-Since": old})
    assert ok.status_code == 200  # If-Match wins over If-Unmodified-Since
    ok = azure_raw.lease(base, BLOB_PATH, "renew", lease_id=GUID, **{"If-Modified-Since": old})
    assert ok.status_code == 200


def test_container_lease_ignores_etag_conditions(service, azure_server):
    service.create_container("cond")
    response = azure_raw.lease(azure_server, "/devstoreaccount1/cond", "acquire", duration=15,
                               **{"If-Match": '"0xNOPE"'})
    assert response.status_code == 201


def test_read_conditions_give_304_and_412(leased):
    base, blob = leased
    etag = blob.get_blob_properties().etag
    response = azure_raw.signed("GET", base, BLOB_PATH, headers={"If-None-Match": etag})
    assert response.status_code == 304 and response.content == b""
    response = azure_raw.signed("GET", base, BLOB_PATH, headers={"If-Match": '"0x0"'})
    assert (response.status_code, azure_raw.error_code(response)) == (412, "ConditionNotMet")
    response = azure_raw.signed("HEAD", base, BLOB_PATH, headers={"If-Match": '"0x0"'})
    assert response.status_code == 412 and response.content == b"" and azure_raw.error_code(response)


# ---------------------------------------------------------------- properties and listings

def test_properties_and_listings_agree_in_every_state(service, clock):
    clock.freeze()
    container = service.create_container("list")
    names = ["available", "leased", "infinite", "expired", "breaking", "broken"]
    blobs = {n: container.upload_blob(n, n.encode()) for n in names}
    blobs["leased"].acquire_lease(lease_duration=60)
    blobs["infinite"].acquire_lease(lease_duration=-1)
    blobs["expired"].acquire_lease(lease_duration=15)
    blobs["breaking"].acquire_lease(lease_duration=60).break_lease(lease_break_period=30)
    blobs["broken"].acquire_lease(lease_duration=-1).break_lease()
    clock.advance(20)
    expected = {"available": ("unlocked", "available", None), "leased": ("locked", "leased", "fixed"),
                "infinite": ("locked", "leased", "infinite"), "expired": ("unlocked", "expired", None),
                "breaking": ("locked", "breaking", None), "broken": ("unlocked", "broken", None)}
    listed = {b.name: (b.lease.status, b.lease.state, b.lease.duration) for b in container.list_blobs()}
    heads = {n: (lambda p: (p.lease.status, p.lease.state, p.lease.duration))(b.get_blob_properties())
             for n, b in blobs.items()}
    assert listed == heads == expected
    # containers in listings too
    container.acquire_lease(lease_duration=-1)
    (item,) = [c for c in service.list_containers() if c.name == "list"]
    assert (item.lease.status, item.lease.state, item.lease.duration) == ("locked", "leased", "infinite")


def test_list_pagination_prefix_delimiter_metadata(service):
    container = service.create_container("pages")
    for name in ["a/1", "a/2", "b/1", "c", "d"]:
        container.upload_blob(name, b"x", metadata={"n": name.replace("/", "_")})
    pages = container.list_blobs(results_per_page=2).by_page()
    assert [[b.name for b in page] for page in pages] == [["a/1", "a/2"], ["b/1", "c"], ["d"]]
    walked = [b.name for b in container.walk_blobs(delimiter="/")]
    assert walked == ["a/", "b/", "c", "d"]
    assert [b.metadata for b in container.list_blobs(name_starts_with="b", include=["metadata"])] == [{"n": "b_1"}]
    for i in range(3):
        service.create_container(f"pages{i}")
    names = [c.name for c in service.list_containers(name_starts_with="pages", results_per_page=2)]
    assert names == ["pages", "pages0", "pages1", "pages2"]


def test_prefixes_are_case_sensitive(service):
    container = service.create_container("case")
    for name in ("Logs/a", "logs/b", "logsX"):
        container.upload_blob(name, b"x")
    assert [b.name for b in container.list_blobs(name_starts_with="logs/")] == ["logs/b"]
    assert [b.name for b in container.list_blobs(name_starts_with="L")] == ["Logs/a"]
    service.create_container("casex")
    assert [c.name for c in service.list_containers(name_starts_with="case")] == ["case", "casex"]


@pytest.mark.parametrize("value", ["²", "15.0", "+15", "0x0F", "9" * 13])
def test_non_ascii_and_odd_numbers_are_400(leased, value):
    base, blob = leased
    before = state_of(blob)
    response = azure_raw.lease(base, "/devstoreaccount1/box", "acquire", duration=value)
    assert (response.status_code, azure_raw.error_code(response)) == (400, "InvalidHeaderValue")
    assert state_of(blob) == before


def test_blob_properties_and_metadata(service):
    container = service.create_container("props", metadata={"owner": "ops"})
    assert container.get_container_properties().metadata == {"owner": "ops"}
    blob = container.upload_blob("doc.txt", b"hello world", metadata={"kind": "text"})
    props = blob.get_blob_properties()
    assert (props.size, props.metadata, props.blob_type) == (11, {"kind": "text"}, "BlockBlob")
    assert blob.download_blob(offset=6, length=5).readall() == b"world"
    blob.set_blob_metadata({"kind": "greeting"})
    after = blob.get_blob_properties()
    assert after.metadata == {"kind": "greeting"} and after.etag != props.etag


def test_leases_never_change_etag_or_last_modified(service, clock):
    clock.freeze()
    blob = service.create_container("stamps").upload_blob("b", b"x")
    props = blob.get_blob_properties()
    lease = blob.acquire_lease(lease_duration=15)
    clock.advance(5)
    lease.renew()
    lease.change("3c7e72eb-b430-4526-bc53-d8ecef03798f")
    lease.break_lease(lease_break_period=0)
    lease.release()
    after = blob.get_blob_properties()
    assert (after.etag, after.last_modified) == (props.etag, props.last_modified)


def test_generation_is_a_fencing_token(leased):
    base, blob = leased
    head = azure_raw.signed("HEAD", base, BLOB_PATH)
    first = int(head.headers["Leasehold-Generation"])
    assert first >= 1
    azure_raw.lease(base, BLOB_PATH, "break", break_period=0)
    again = azure_raw.lease(base, BLOB_PATH, "acquire", duration=15)
    assert again.status_code == 201 and int(again.headers["Leasehold-Generation"]) == first + 1
    # deleting and re-creating the blob never hands out an old token again
    blob.delete_blob(lease=again.headers["x-ms-lease-id"])
    blob.upload_blob(b"new")
    third = azure_raw.lease(base, BLOB_PATH, "acquire", duration=15)
    assert int(third.headers["Leasehold-Generation"]) == first + 2


def test_snapshots_and_delete_rules(leased):
    base, blob = leased
    snap = blob.create_snapshot()
    with pytest.raises(HttpResponseError) as exc:
        blob.delete_blob(lease=GUID)
    assert (exc.value.status_code, sdk_error_code(exc.value)) == (409, "SnapshotsPresent")
    with pytest.raises(HttpResponseError) as exc:
        blob.delete_blob(delete_snapshots="include")
    assert (exc.value.status_code, sdk_error_code(exc.value)) == (412, "LeaseIdMissing")
    assert Blob.objects.count() == 2
    blob.delete_blob(delete_snapshots="include", lease=GUID)
    assert Blob.objects.count() == 0 and snap["snapshot"]


def test_head_errors_have_no_body(leased):
    base, _ = leased
    response = azure_raw.signed("HEAD", base, BLOB_PATH, headers={"x-ms-lease-id": "3c7e72eb-b430-4526-bc53-d8ecef03798f"})
    assert response.status_code == 412 and response.content == b""
    assert response.headers["x-ms-error-code"] == "LeaseIdMismatchWithBlobOperation"


@pytest.mark.parametrize("name,code", [("ab", "OutOfRangeInput"), ("a" * 64, "OutOfRangeInput"),
                                       ("Upper", "InvalidResourceName"), ("a--b", "InvalidResourceName"),
                                       ("-abc", "InvalidResourceName"), ("abc-", "InvalidResourceName")])
def test_invalid_container_names(service, name, code):
    with pytest.raises(HttpResponseError) as exc:
        service.create_container(name)
    assert (exc.value.status_code, sdk_error_code(exc.value)) == (400, code)


def test_container_exists_and_put_blob_needs_a_container(service):
    service.create_container("twice")
    with pytest.raises(HttpResponseError) as exc:
        service.create_container("twice")
    assert (exc.value.status_code, sdk_error_code(exc.value)) == (409, "ContainerAlreadyExists")
    with pytest.raises(ResourceNotFoundError) as exc:
        service.get_blob_client("nowhere", "b").upload_blob(b"x")
    assert sdk_error_code(exc.value) == "ContainerNotFound"


def test_reads_do_not_wait_for_the_writer_lock(leased):
    """Get Blob, Get Blob Properties and listings take no write lock: they
    answer while another writer holds the database's writer lock."""
    import fcntl
    import os

    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("the writer lock file is SQLite's")
    base, blob = leased
    path = connection._writer_lock_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a writer in another process would
        for method, target in (("HEAD", BLOB_PATH), ("GET", BLOB_PATH),
                               ("GET", f"{BLOB_PATH}?comp=metadata"),
                               ("GET", "/devstoreaccount1/box?restype=container&comp=list")):
            response = azure_raw.signed(method, base, target, headers={"x-ms-lease-id": GUID})
            assert response.status_code == 200, (method, target, response.content)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def test_azure_paths_skip_the_sites_middleware(azure_server):
    """Azure requests go through a handler without the admin's middleware
    (leases/azure/handler.py); the admin and API keep theirs."""
    import requests

    base = azure_server
    created = azure_raw.signed("PUT", base, "/devstoreaccount1/door?restype=container")
    assert created.status_code == 201
    for response in (created, azure_raw.signed("GET", base, "/devstoreaccount1/door?restype=container")):
        assert "X-Frame-Options" not in response.headers and "Allow" not in response.headers
        assert "Set-Cookie" not in response.headers
    # an unsigned Azure request is still refused by the DRF view, not by middleware
    unsigned = requests.get(base + "/devstoreaccount1/door?restype=container", timeout=10)
    assert unsigned.status_code == 401 and azure_raw.error_code(unsigned) == "NoAuthenticationInformation"
    admin = requests.get(base + "/admin/login/", timeout=10)
    assert admin.status_code == 200 and admin.headers["X-Frame-Options"] == "DENY"
    assert "csrftoken" in admin.cookies
    api = requests.get(base + "/api/v1/containers/", timeout=10)
    assert api.status_code in (401, 403) and api.headers["X-Frame-Options"] == "DENY"
