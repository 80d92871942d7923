"""Every cell of both outcome tables, for blobs and containers, through the
official azure-storage-blob SDK against a live server. The expected cells
are the same reference tables the state-machine tests use; here each one is
also checked on the wire: status, error code, lease headers, and that a
refusal changes nothing (lease, ETag, Last-Modified, content)."""

from __future__ import annotations

import uuid

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobLeaseClient

from leases.domain import fingerprints
from leases.models import Blob, Container, LeaseEvent

from tests import azure_raw
from tests.machine.test_machine import ACCESS, ACQUIRE, BREAK, CHANGE, OK, RELEASE, RENEW, A, B, C, X
from tests.sdk_errors import sdk_error_code

# The README's "every outcome cell through the official SDK", on PostgreSQL too:
# the lease transaction, its locks and the history insert are the database's.
pytestmark = pytest.mark.also_postgres

GUIDS = {A: "ca761232ed4211cebacd00aa0057b223", B: "{3C7E72EB-B430-4526-BC53-D8ECEF03798F}",
         C: "11111111-2222-3333-4444-555555555555"}
CANON = {k: str(uuid.UUID(v.strip("{}"))) for k, v in GUIDS.items()}


class Subject:
    """One resource under test (a blob, or a container) in a known lease state."""

    def __init__(self, service, kind: str, clock):
        self.kind, self.clock = kind, clock
        self.container = service.create_container("subject")
        self.blob = self.container.upload_blob("sub/ject (1).txt", b"payload")
        self.client = self.blob if kind == "blob" else self.container

    def lease_client(self, lease_id=None) -> BlobLeaseClient:
        return BlobLeaseClient(self.client, lease_id=lease_id)

    def row(self):
        if self.kind == "blob":
            return Blob.objects.get(name=self.blob.blob_name)
        return Container.objects.get(name="subject")

    def properties(self):
        if self.kind == "blob":
            return self.blob.get_blob_properties()
        return self.container.get_container_properties()

    def snapshot(self):
        p = self.properties()
        row = self.row()
        return (p.etag, p.last_modified, p.lease.state, p.lease.status, p.lease.duration,
                row.lease_id, row.lease_expires_at, row.lease_break_at, row.lease_generation)

    def put_in(self, state: str):
        """Set up ``state`` exactly as test_machine.record() describes it, with
        lease A: leased with 30 s left, breaking with 20 s left, ...; its
        snapshot()."""
        self.clock.freeze()
        a = self.lease_client(GUIDS[A])
        if state == "leased":
            a.acquire(lease_duration=45)
            self.clock.advance(15)
        elif state == "infinite":
            a.acquire(lease_duration=-1)
        elif state == "expired":
            a.acquire(lease_duration=15)
            self.clock.advance(16)
        elif state in ("breaking", "broken"):
            a.acquire(lease_duration=60)
            a.break_lease(lease_break_period=20)
            if state == "broken":
                self.clock.advance(21)
        expected = {"infinite": "leased"}.get(state, state)
        snapshot = self.snapshot()
        assert snapshot[2] == expected
        return snapshot  # what a test compares with afterwards: one request fewer


@pytest.fixture(params=["blob", "container"])
def subject(request, service, clock):
    return Subject(service, request.param, clock)


def lease_cells():
    tables = (("acquire", ACQUIRE), ("renew", RENEW), ("change", CHANGE), ("release", RELEASE), ("break", BREAK))
    for action, table in tables:
        for key, row in table.items():  # change's rows are keyed by (lease id, proposed id)
            args = key if action == "change" else (key,)
            for state, want in row.items():
                yield action, state, args, want


def _name(value):
    return {A: "A", B: "B", C: "C", None: "none"}.get(value, str(value))


CELLS = list(lease_cells())


@pytest.mark.parametrize("action,state,args,want", CELLS,
                         ids=[f"{a}-{'-'.join(_name(x) for x in args)}-{s}" for a, s, args, _ in CELLS])
def test_lease_operation_cell(subject, action, state, args, want):
    before = subject.put_in(state)
    events_before = LeaseEvent.objects.count()
    response = call(subject, action, args)
    assert LeaseEvent.objects.count() == events_before + 1  # granted or refused, it is recorded
    event = LeaseEvent.objects.order_by("-id").first()
    assert event.action == action
    if isinstance(want, str):
        status, code = want.split()
        assert (response.status_code, azure_raw.error_code(response)) == (int(status), code)
        assert b"<Code>" + code.encode() + b"</Code>" in response.content
        assert subject.snapshot() == before  # a refusal changes nothing
        assert (event.outcome, event.status_code, event.error_code) == ("refused", int(status), code)
        return
    status, state_after, third = want
    assert response.status_code == status, response.content
    assert (event.outcome, event.status_code) == ("success", status)
    props = subject.properties()
    assert props.lease.state == state_after
    assert (props.etag, props.last_modified) == before[:2]  # lease operations never touch these
    assert response.headers["ETag"] == before[0] and "Last-Modified" in response.headers
    if action == "break":
        assert int(response.headers["x-ms-lease-time"]) == third
        assert "x-ms-lease-id" not in response.headers
    elif action == "release":
        assert "x-ms-lease-id" not in response.headers
        assert subject.row().lease_id is None
    else:
        returned = response.headers["x-ms-lease-id"]
        if third is X:  # a server-chosen id: a fresh lower-case GUID
            assert returned == str(uuid.UUID(returned)) and returned not in CANON.values()
        else:
            assert returned == CANON[third]  # lower-case hyphenated, whatever format was sent
        assert str(subject.row().lease_id) == returned


def call(subject, action, args):
    """Send one lease action. The SDK always proposes an id on acquire, so the
    no-proposed-id acquire goes out through the raw signed client."""
    path = "/devstoreaccount1/subject" + ("" if subject.kind == "container" else "/sub/ject (1).txt")
    base = subject.client.url.split("/devstoreaccount1")[0]
    g = lambda k: None if k is None else GUIDS[k]  # noqa: E731
    if action == "acquire":
        return azure_raw.lease(base, path, "acquire", duration=20, proposed_lease_id=g(args[0]))
    if action in ("renew", "release"):
        return azure_raw.lease(base, path, action, lease_id=g(args[0]))
    if action == "change":
        return azure_raw.lease(base, path, "change", lease_id=g(args[0]), proposed_lease_id=g(args[1]))
    return azure_raw.lease(base, path, "break", break_period=args[0])


# ---------------------------------------------------------------- the same cells via the SDK's own calls

def test_sdk_lease_client_walks_the_states(subject, clock):
    clock.freeze()
    lease = subject.lease_client(GUIDS[A])
    lease.acquire(lease_duration=15)
    assert lease.id == CANON[A]  # normalised
    lease.renew()
    lease.change(GUIDS[B])
    assert lease.id == CANON[B]
    assert lease.break_lease(lease_break_period=5) == 5
    assert subject.properties().lease.state == "breaking"
    clock.advance(5)
    assert subject.properties().lease.state == "broken"
    lease.release()
    assert subject.properties().lease.state == "available"
    assert lease.id is None  # the SDK forgets a released id; renewing the old one must fail
    with pytest.raises(HttpResponseError) as exc:
        BlobLeaseClient(subject.client, lease_id=GUIDS[B]).renew()
    assert sdk_error_code(exc.value) == "LeaseIdMismatchWithLeaseOperation" and exc.value.status_code == 409


def test_acquire_is_idempotent_for_the_same_id(subject):
    first = subject.lease_client(GUIDS[A])
    first.acquire(lease_duration=30)
    again = subject.lease_client(GUIDS[A].upper())
    again.acquire(lease_duration=60)
    assert again.id == CANON[A]
    assert subject.row().lease_duration == 60


# ---------------------------------------------------------------- expiry and renew after a write

def test_expired_blob_lease_cannot_be_renewed_after_a_write(service, clock):
    clock.freeze()
    blob = service.create_container("cc1").upload_blob("b", b"x")
    lease = blob.acquire_lease(lease_duration=15)
    clock.advance(16)
    assert blob.get_blob_properties().lease.state == "expired"
    blob.set_blob_metadata({"touched": "yes"})  # a write without the lease id succeeds...
    assert blob.get_blob_properties().lease.state == "available"  # ...and ends the lease
    with pytest.raises(HttpResponseError) as exc:
        lease.renew()
    assert (exc.value.status_code, sdk_error_code(exc.value)) == (409, "LeaseIdMismatchWithLeaseOperation")
    ended = LeaseEvent.objects.get(action="ended-by-write")
    assert (ended.state_before, ended.state_after, ended.lease_fingerprint) == (
        "expired", "available", fingerprints.of(lease.id))


def test_expired_container_lease_renews_after_a_container_write(service, clock):
    clock.freeze()
    container = service.create_container("cc2")
    lease = container.acquire_lease(lease_duration=15)
    clock.advance(16)
    container.set_container_metadata({"touched": "yes"})
    assert container.get_container_properties().lease.state == "expired"
    lease.renew()
    assert container.get_container_properties().lease.state == "leased"


def test_expired_blob_lease_renews_if_not_written(service, clock):
    clock.freeze()
    blob = service.create_container("cc3").upload_blob("b", b"x")
    lease = blob.acquire_lease(lease_duration=15)
    clock.advance(30)
    blob.download_blob().readall()  # reads do not end it
    lease.renew()
    props = blob.get_blob_properties()
    assert (props.lease.state, props.lease.duration) == ("leased", "fixed")


# ---------------------------------------------------------------- use attempts (§4.2)

def use_cells():
    for presented, row in ACCESS.items():
        for state, (write, read) in row.items():
            yield presented, state, write, read


USE = list(use_cells())


@pytest.mark.parametrize("presented,state,write,read", USE, ids=[f"{_name(p)}-{s}" for p, s, _, _ in USE])
def test_blob_reads_and_writes_under_a_lease(service, clock, presented, state, write, read):
    subject = Subject(service, "blob", clock)
    before = subject.put_in(state)
    lease = None if presented is None else GUIDS[presented]
    content = subject.blob.download_blob().readall()

    # reads: GET, HEAD (error code in the header only), and snapshot
    for op in (lambda: subject.blob.download_blob(lease=lease).readall(),
               lambda: subject.blob.get_blob_properties(lease=lease)):
        outcome(op, read, "Blob")
    assert subject.snapshot() == before

    # writes: Set Metadata, Put Blob (overwrite), Delete; each must refuse alike
    expect = outcome(lambda: subject.blob.set_blob_metadata({"w": "1"}, lease=lease), write, "Blob")
    if expect is OK:
        after = subject.properties()
        assert after.etag != before[0]  # the write happened
        if state in ("expired", "broken"):
            assert after.lease.state == "available"  # and ended the dead lease
        else:
            assert after.lease.state == before[2]
        return
    assert subject.snapshot() == before
    outcome(lambda: subject.blob.upload_blob(b"new", overwrite=True, lease=lease), write, "Blob")
    outcome(lambda: subject.blob.delete_blob(lease=lease), write, "Blob")
    assert subject.snapshot() == before
    assert subject.blob.download_blob().readall() == content


@pytest.mark.parametrize("presented,state,write,read", USE, ids=[f"{_name(p)}-{s}" for p, s, _, _ in USE])
def test_container_operations_under_a_lease(service, clock, presented, state, write, read):
    subject = Subject(service, "container", clock)
    before = subject.put_in(state)
    lease = None if presented is None else GUIDS[presented]
    # Get Properties and Set Metadata take an optional lease id: the "read" row.
    outcome(lambda: subject.container.get_container_properties(lease=lease), read, "Container")
    assert subject.snapshot() == before
    if outcome(lambda: subject.container.set_container_metadata({"m": "1"}, lease=lease), read,
               "Container") is not OK:
        assert subject.snapshot() == before
    before = subject.snapshot()
    # Delete Container needs the id while the lease is locked: the "write" row.
    if outcome(lambda: subject.container.delete_container(lease=lease), write, "Container") is OK:
        assert not Container.objects.filter(name="subject").exists()
        assert not Blob.objects.filter(name=subject.blob.blob_name).exists()  # blob leases do not protect it
    else:
        assert subject.snapshot() == before


def outcome(op, want, kind):
    """Run ``op``; assert it succeeded or failed with ``want`` ("412 Code")."""
    if want is OK:
        op()
        return OK
    status, code = want.format(K=kind).split()
    with pytest.raises(HttpResponseError) as exc:
        op()
    assert (exc.value.status_code, sdk_error_code(exc.value)) == (int(status), code)
    return want


def test_upload_without_overwrite_onto_a_leased_blob_is_lease_id_missing(service):
    """The lease is checked before If-None-Match: * (Azure, not Azurite)."""
    blob = service.create_container("cc4").upload_blob("b", b"x")
    blob.acquire_lease(lease_duration=-1)
    with pytest.raises(HttpResponseError) as exc:
        blob.upload_blob(b"y")  # overwrite=False sends If-None-Match: *
    assert (exc.value.status_code, sdk_error_code(exc.value)) == (412, "LeaseIdMissing")
    lease = BlobLeaseClient(blob, lease_id=Blob.objects.get().lease_id.hex)
    with pytest.raises(HttpResponseError) as exc:
        blob.upload_blob(b"y", lease=lease)
    assert (exc.value.status_code, sdk_error_code(exc.value)) == (409, "BlobAlreadyExists")
    blob.upload_blob(b"y", lease=lease, overwrite=True)
    props = blob.get_blob_properties()
    assert props.lease.state == "leased" and props.size == 1  # an overwrite keeps the lease


def test_restype_container_on_a_blob_path_is_refused(azure_server, service):
    """``?comp=lease&restype=container`` on a blob path is a container lease
    on the wrong path: refused, the blob not leased."""
    service.create_container("rtype").upload_blob("b", b"x")
    response = azure_raw.signed("PUT", azure_server, "/devstoreaccount1/rtype/b?comp=lease&restype=container",
                                headers={"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15"})
    assert (response.status_code, azure_raw.error_code(response)) == (400, "InvalidQueryParameterValue")
    assert "<QueryParameterName>restype</QueryParameterName>" in response.text
    assert Blob.objects.get(name="b").lease_state == "available"
    assert Container.objects.get(name="rtype").lease_state == "available"


@pytest.mark.parametrize("name", ["\u6587\u4ef6", "\U0001f600", "dir/\U0002070e e\u0301.txt"])
def test_sdk_leases_blobs_named_outside_latin_1(service, name):
    """Names outside Latin-1 on every lease action through the SDK."""
    container = service.create_container("uni")
    blob = container.upload_blob(name, b"x")
    lease = BlobLeaseClient(blob)
    lease.acquire(lease_duration=15)
    lease.renew()
    lease.change(str(uuid.uuid4()))
    lease.break_lease(lease_break_period=0)
    lease.acquire(lease_duration=-1)
    lease.release()
    assert [e.outcome for e in LeaseEvent.objects.filter(blob=name).order_by("id")] == ["success"] * 6
