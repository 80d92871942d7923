"""Lease Blob for x-ms-version before 2012-02-12 over the wire: every legacy
cell of test_machine_legacy's tables, sent as raw SharedKey-signed requests
carrying an old x-ms-version (the official SDK pins a current one) to a live
server, plus the 400s, the response headers those versions get, and how old
and current clients see each other's leases."""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from datetime import timedelta
from email.utils import formatdate
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobLeaseClient

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from leases.models import Blob, Container, LeaseEvent

from tests.machine.test_machine_legacy import ACQUIRE, BREAK, RELEASE, RENEW, STATES, A, B, X
from tests.sdk_errors import sdk_error_code

pytestmark = pytest.mark.also_postgres

LEGACY = ["2011-08-18", "2009-09-19"]
GUIDS = {A: "ca761232-ed42-11ce-bacd-00aa0057b223", B: "3c7e72eb-b430-4526-bc53-d8ecef03798f"}
BLOB = "/devstoreaccount1/old/item.bin"
SLOTS = ["content-encoding", "content-language", "content-length", "content-md5", "content-type", "date",
         "if-modified-since", "if-match", "if-none-match", "if-unmodified-since", "range"]


def signed(method: str, base: str, path: str, *, version: str, headers: dict | None = None) -> requests.Response:
    """A SharedKey request as a 2009-09-19 .. 2014-02-14 client signs it,
    written from the documented algorithm: before 2015-02-21 a
    Content-Length of 0 is signed as "0", not as an empty line. ``requests``
    sends Content-Length: 0 on a PUT without a body."""
    headers = {k.lower(): v for k, v in (headers or {}).items() if v is not None}
    headers.setdefault("x-ms-date", formatdate(usegmt=True))
    headers["x-ms-version"] = version
    url = base + quote(path, safe="/~?=&")
    parts = urlsplit(url)
    length = "0" if method in ("PUT", "DELETE") else ""
    slot = lambda name: length if name == "content-length" else headers.get(name, "")  # noqa: E731
    canon_headers = "".join(f"{k}:{headers[k]}\n" for k in sorted(h for h in headers if h.startswith("x-ms-")))
    query = sorted((kv.split("=", 1) + [""])[:2] for kv in parts.query.split("&") if kv)
    resource = f"/{DEV_ACCOUNT}{parts.path}" + "".join(f"\n{k.lower()}:{unquote(v)}" for k, v in query)
    text = method + "\n" + "\n".join(slot(n) for n in SLOTS) + "\n" + canon_headers + resource
    mac = hmac.new(base64.b64decode(DEV_KEY), text.encode(), hashlib.sha256).digest()
    headers["authorization"] = f"SharedKey {DEV_ACCOUNT}:{base64.b64encode(mac).decode()}"
    return requests.request(method, url, headers=headers, timeout=10)


def lease(base: str, action: str | None, *, version: str = LEGACY[0], path: str = BLOB, **headers):
    names = {"lease_id": "x-ms-lease-id", "duration": "x-ms-lease-duration",
             "break_period": "x-ms-lease-break-period", "proposed_lease_id": "x-ms-proposed-lease-id"}
    hdrs = {names.get(k, k): None if v is None else str(v) for k, v in headers.items()}
    if action is not None:
        hdrs["x-ms-lease-action"] = action
    query = "?comp=lease" + ("&restype=container" if path.count("/") == 2 else "")
    return signed("PUT", base, path + query, version=version, headers=hdrs)


def code(response) -> str | None:
    return response.headers.get("x-ms-error-code")


class Old:
    """Blob 'old/item.bin' put in a lease state as test_machine_legacy.record()
    describes it (lease A, fixed leases with 30 s left, breaking with 20 s)."""

    def __init__(self, service, base, clock):
        self.base, self.clock = base, clock
        self.container = service.create_container("old")
        self.blob = self.container.upload_blob("item.bin", b"payload")

    def row(self) -> Blob:
        return Blob.objects.get(name="item.bin", snapshot="")

    def lease_columns(self):
        r = self.row()
        return (r.lease_state, r.lease_id, r.lease_duration, r.lease_expires_at, r.lease_break_at,
                r.lease_generation, r.etag, r.last_modified)

    def put_in(self, state: str):
        self.clock.freeze()
        a = BlobLeaseClient(self.blob, lease_id=GUIDS[A])
        if state in ("leased", "released", "expired"):
            a.acquire(lease_duration=60)
            self.clock.advance({"leased": 30, "released": 0, "expired": 61}[state])
            if state == "released":
                assert lease(self.base, "release", lease_id=GUIDS[A]).status_code == 200
        elif state == "infinite":
            a.acquire(lease_duration=-1)
        elif state in ("breaking", "broken"):
            a.acquire(lease_duration=60)
            a.break_lease(lease_break_period=20)
            if state == "broken":
                self.clock.advance(21)
        seen = {"infinite": "leased", "released": "available"}.get(state, state)
        assert self.blob.get_blob_properties().lease.state == seen
        if state == "released":
            assert str(self.row().lease_id) == GUIDS[A]  # remembered


@pytest.fixture
def old(service, azure_server, clock):
    return Old(service, azure_server, clock)


def cells():
    yield from (("acquire", s, None, want) for s, want in ACQUIRE.items())
    yield from (("renew", s, i, want) for i, row in RENEW.items() for s, want in row.items())
    yield from (("release", s, i, want) for i, row in RELEASE.items() for s, want in row.items())
    yield from (("break", s, None, want) for s, want in BREAK.items())
    yield from (("change", s, A, "400 InvalidHeaderValue") for s in STATES)


CELLS = list(cells())


@pytest.mark.parametrize("action,state,lease_id,want", CELLS,
                         ids=[f"{a}-{'AB'[i == B] if i else 'none'}-{s}" for a, s, i, _ in CELLS])
def test_legacy_lease_cell(old, action, state, lease_id, want):
    old.put_in(state)
    before = old.lease_columns()
    events = LeaseEvent.objects.count()
    headers: dict[str, Any] = {"lease_id": GUIDS.get(lease_id)}  # lease()'s keyword arguments
    if action == "change":
        headers["proposed_lease_id"] = GUIDS[B]
    response = lease(old.base, action, **headers)
    assert LeaseEvent.objects.count() == events + 1  # granted or refused, it is recorded
    event = LeaseEvent.objects.order_by("-id").first()
    assert response.headers["x-ms-version"] == LEGACY[0]
    if isinstance(want, str):
        status, err = want.split()
        assert (response.status_code, code(response)) == (int(status), err), response.content
        assert f"<Code>{err}</Code>".encode() in response.content
        assert old.lease_columns() == before  # a refusal changes nothing
        assert (event.outcome, event.status_code, event.error_code) == ("refused", int(status), err)
        return
    status, state_after, third = want
    assert response.status_code == status, response.content
    assert (event.outcome, event.status_code) == ("success", status)
    props = old.blob.get_blob_properties()  # as a current client sees it
    assert props.lease.state == state_after
    assert (props.etag, props.last_modified) == (before[6], before[7])
    # ETag and Last-Modified on lease responses are 2013-08-15 and later
    assert "ETag" not in response.headers and "Last-Modified" not in response.headers
    if action == "break":
        assert int(response.headers["x-ms-lease-time"]) == third
        assert "x-ms-lease-id" not in response.headers
        assert str(old.row().lease_id) == GUIDS[A]
    elif action == "release":
        assert "x-ms-lease-id" not in response.headers
        assert str(old.row().lease_id) == GUIDS[A]  # remembered for a legacy renew or break
    else:
        returned = response.headers["x-ms-lease-id"]
        if third is X:  # drawn by the server: a fresh lower-case GUID, and a 60 s lease
            assert returned == str(uuid.UUID(returned)) and returned not in GUIDS.values()
            assert old.row().lease_duration == 60 and props.lease.duration == "fixed"
            assert old.row().lease_generation == before[5] + 1
        else:
            assert returned == GUIDS[third]
            assert old.row().lease_generation == before[5]
        assert str(old.row().lease_id) == returned


@pytest.mark.parametrize("version", LEGACY)
def test_renew_after_release_until_the_blob_is_written(old, version):
    """The documented legacy flow: acquire (60 s), release, renew with the
    same id; after a write to the blob the released id is forgotten."""
    old.clock.freeze()
    acquired = lease(old.base, "acquire", version=version)
    assert acquired.status_code == 201 and acquired.headers["x-ms-version"] == version
    lease_id = acquired.headers["x-ms-lease-id"]
    assert old.row().lease_duration == 60
    assert old.row().lease_expires_at == old.clock.now() + timedelta(seconds=60)
    assert lease(old.base, "release", version=version, lease_id=lease_id).status_code == 200
    assert old.blob.get_blob_properties().lease.state == "available"
    old.clock.advance(10)
    renewed = lease(old.base, "renew", version=version, lease_id=lease_id)
    assert (renewed.status_code, renewed.headers["x-ms-lease-id"]) == (200, lease_id)
    assert old.blob.get_blob_properties().lease.state == "leased"
    # release again, then a write (with no lease: the blob is available) forgets the id
    assert lease(old.base, "release", version=version, lease_id=lease_id).status_code == 200
    old.blob.upload_blob(b"changed", overwrite=True)
    refused = lease(old.base, "renew", version=version, lease_id=lease_id)
    assert (refused.status_code, code(refused)) == (409, "LeaseIdMismatchWithLeaseOperation")
    refused = lease(old.base, "break", version=version)
    assert (refused.status_code, code(refused)) == (409, "LeaseNotPresentWithLeaseOperation")


def test_a_lease_broken_before_an_old_client_released_it_is_not_renewed(old):
    """An infinite lease a current client took, broken, released by an old
    client: its renew is refused as a broken lease's, recorded, and the blob
    stays free for another client (a renewal would have held it for a minute
    while its holder believed it held the infinite lease again)."""
    holder = BlobLeaseClient(old.blob, lease_id=GUIDS[A])
    holder.acquire(lease_duration=-1)
    assert BlobLeaseClient(old.blob).break_lease() == 0
    assert lease(old.base, "release", lease_id=GUIDS[A]).status_code == 200
    refused = lease(old.base, "renew", lease_id=GUIDS[A])
    assert (refused.status_code, code(refused)) == (409, "LeaseIsBrokenAndCannotBeRenewed")
    assert LeaseEvent.objects.order_by("-id").values_list("action", "error_code").first() == (
        "renew", "LeaseIsBrokenAndCannotBeRenewed")
    assert old.blob.get_blob_properties().lease.state == "available"
    BlobLeaseClient(old.blob, lease_id=GUIDS[B]).acquire(lease_duration=15)
    assert str(old.row().lease_id) == GUIDS[B]


def test_break_after_release_then_break_again_is_lease_already_broken(old):
    lease_id = lease(old.base, "acquire").headers["x-ms-lease-id"]
    assert lease(old.base, "release", lease_id=lease_id).status_code == 200
    broken = lease(old.base, "break")
    assert (broken.status_code, broken.headers["x-ms-lease-time"]) == (202, "0")
    assert old.blob.get_blob_properties().lease.state == "broken"
    again = lease(old.base, "break")
    assert (again.status_code, code(again)) == (409, "LeaseAlreadyBroken")
    assert b"The lease has already been broken and cannot be broken again." in again.content
    # a current client breaks it again idempotently; an old one acquires it
    assert BlobLeaseClient(old.blob).break_lease() == 0
    assert lease(old.base, "acquire").status_code == 201


def test_current_clients_do_not_see_a_released_lease(old):
    """A current-version renew or break after a (legacy) release fails, as
    2012-02-12 documents, while the old client's renew still works."""
    lease_id = lease(old.base, "acquire").headers["x-ms-lease-id"]
    assert lease(old.base, "release", lease_id=lease_id).status_code == 200
    with pytest.raises(HttpResponseError) as exc:
        BlobLeaseClient(old.blob, lease_id=lease_id).renew()
    assert sdk_error_code(exc.value) == "LeaseIdMismatchWithLeaseOperation"
    with pytest.raises(HttpResponseError) as exc:
        BlobLeaseClient(old.blob).break_lease()
    assert sdk_error_code(exc.value) == "LeaseNotPresentWithLeaseOperation"
    with pytest.raises(HttpResponseError) as exc:  # a write presenting the released id
        old.blob.upload_blob(b"x", overwrite=True, lease=lease_id)
    assert sdk_error_code(exc.value) == "LeaseNotPresentWithBlobOperation"
    assert lease(old.base, "renew", lease_id=lease_id).status_code == 200


def test_a_legacy_lease_protects_writes_and_current_clients_see_it(old):
    old.clock.freeze()
    lease_id = lease(old.base, "acquire").headers["x-ms-lease-id"]
    props = old.blob.get_blob_properties()
    assert (props.lease.state, props.lease.status, props.lease.duration) == ("leased", "locked", "fixed")
    with pytest.raises(HttpResponseError) as exc:
        old.blob.upload_blob(b"x", overwrite=True)
    assert sdk_error_code(exc.value) == "LeaseIdMissing"
    old.blob.upload_blob(b"mine", overwrite=True, lease=lease_id)
    old.clock.advance(59)
    assert old.blob.get_blob_properties().lease.state == "leased"
    old.clock.advance(1)
    assert old.blob.get_blob_properties().lease.state == "expired"  # exactly 60 s


@pytest.mark.parametrize("headers,header", [
    ({"duration": "60"}, "x-ms-lease-duration"),
    ({"duration": "-1"}, "x-ms-lease-duration"),
    ({"proposed_lease_id": GUIDS[A]}, "x-ms-proposed-lease-id"),
])
def test_acquire_refuses_the_2012_headers(old, headers, header):
    before = old.lease_columns()
    response = lease(old.base, "acquire", **headers)
    assert (response.status_code, code(response)) == (400, "UnsupportedHeader")
    assert f"<HeaderName>{header}</HeaderName>".encode() in response.content
    assert b"<Reason>This operation or header requires x-ms-version 2012-02-12 or later.</Reason>" in response.content
    assert old.lease_columns() == before


def test_break_refuses_a_break_period(old):
    old.put_in("leased")
    before = old.lease_columns()
    response = lease(old.base, "break", break_period="0")
    assert (response.status_code, code(response)) == (400, "UnsupportedHeader")
    assert b"<HeaderName>x-ms-lease-break-period</HeaderName>" in response.content
    assert old.lease_columns() == before


def test_change_is_refused_naming_the_action(old):
    old.put_in("leased")
    response = lease(old.base, "change", lease_id=GUIDS[A], proposed_lease_id=GUIDS[B])
    assert (response.status_code, code(response)) == (400, "InvalidHeaderValue")
    assert b"<HeaderName>x-ms-lease-action</HeaderName><HeaderValue>change</HeaderValue>" in response.content
    assert str(old.row().lease_id) == GUIDS[A]


@pytest.mark.parametrize("action", ["acquire", "renew", "change", "release", "break"])
def test_no_container_leases_before_2012_02_12(old, action):
    path = "/devstoreaccount1/old"
    BlobLeaseClient(old.container, lease_id=GUIDS[A]).acquire(lease_duration=-1)  # by a current client
    row = Container.objects.get(name="old")
    before = (row.lease_state, row.lease_id, row.lease_generation)
    response = lease(old.base, action, path=path, lease_id=GUIDS[A])
    assert (response.status_code, code(response)) == (400, "InvalidQueryParameterValue")
    assert b"<QueryParameterName>comp</QueryParameterName><QueryParameterValue>lease</QueryParameterValue>" \
        in response.content
    row = Container.objects.get(name="old")
    assert (row.lease_state, row.lease_id, row.lease_generation) == before
    # the current version still leases containers
    assert lease(old.base, "release", path=path, version="2012-02-12", lease_id=GUIDS[A]).status_code == 200


@pytest.mark.parametrize("version", ["2009-07-17", "2009-04-14", "2011-08-17", "2010-01-01", "2012-02-11",
                                     "2011-8-18", "2011-08-18x"])
def test_other_old_or_malformed_versions_are_still_400(old, version):
    old.put_in("leased")
    before = old.lease_columns()
    response = lease(old.base, "break", version=version)
    assert (response.status_code, code(response)) == (400, "InvalidHeaderValue")
    assert b"<HeaderName>x-ms-version</HeaderName>" in response.content
    assert old.lease_columns() == before


def test_2012_02_12_has_current_semantics(old):
    """The first current version: re-breaking is idempotent, and acquire
    needs its duration."""
    old.put_in("broken")
    response = lease(old.base, "break", version="2012-02-12")
    assert (response.status_code, response.headers["x-ms-lease-time"]) == (202, "0")
    response = lease(old.base, "acquire", version="2012-02-12")
    assert (response.status_code, code(response)) == (400, "MissingRequiredHeader")
    response = lease(old.base, "acquire", version="2012-02-12", duration=15)
    assert response.status_code == 201 and "ETag" in response.headers


def test_a_legacy_read_and_write_under_a_legacy_lease(old):
    """Other operations with an old version are answered too (the lease
    rules for reads and writes did not change)."""
    lease_id = lease(old.base, "acquire").headers["x-ms-lease-id"]
    response = signed("GET", old.base, BLOB, version=LEGACY[0])
    assert (response.status_code, response.content) == (200, b"payload")
    response = signed("DELETE", old.base, BLOB, version=LEGACY[0])
    assert (response.status_code, code(response)) == (412, "LeaseIdMissing")
    response = signed("DELETE", old.base, BLOB, version=LEGACY[0], headers={"x-ms-lease-id": lease_id})
    assert response.status_code == 202


def test_legacy_reads_get_only_the_lease_status(old):
    """x-ms-lease-state and x-ms-lease-duration, and container lease headers,
    are 2012-02-12 and newer; x-ms-lease-status on blobs is older."""
    old.put_in("leased")
    BlobLeaseClient(old.container, lease_id=GUIDS[B]).acquire(lease_duration=-1)
    blob = signed("HEAD", old.base, BLOB, version=LEGACY[0])
    assert blob.status_code == 200 and blob.headers["x-ms-lease-status"] == "locked"
    assert "x-ms-lease-state" not in blob.headers and "x-ms-lease-duration" not in blob.headers
    container = signed("GET", old.base, "/devstoreaccount1/old?restype=container", version=LEGACY[0])
    assert container.status_code == 200
    assert not {"x-ms-lease-status", "x-ms-lease-state", "x-ms-lease-duration"} & set(container.headers)
    current = signed("HEAD", old.base, BLOB, version="2012-02-12")
    assert (current.headers["x-ms-lease-state"], current.headers["x-ms-lease-duration"]) == ("leased", "fixed")
