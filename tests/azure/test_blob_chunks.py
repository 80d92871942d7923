"""Large blob content in bounded pieces (leases/storage/blob_content.py): uploads
staged chunk by chunk in short write transactions and made visible in one,
downloads streamed a chunk (one short read) at a time, refused uploads
storing nothing, replaced and dead content removed in bounded batches."""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
import threading

import pytest
import requests
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError
from django.db import connection

from leases.storage import blob_content
from leases import services
from leases.storage.blob_content import CHUNK_BYTES
from leases.management.commands.leasehold_setup import DEV_ACCOUNT
from leases.models import Blob, BlobChunk, BlobContent, LeaseEvent
from leases.services import Actor, ResourceRef

from tests import azure_raw
from tests.sdk_errors import sdk_error_code
from tests.storage import writer_lock_file

pytestmark = pytest.mark.also_postgres

ACTOR = Actor(name="account:devstoreaccount1", via="azure")
SIZE = 3 * CHUNK_BYTES + CHUNK_BYTES // 2  # four chunks, the last one half full


def _content(size: int = SIZE, seed: bytes = b"a") -> bytes:
    """Bytes that differ at every offset's chunk and position."""
    out, block = bytearray(), seed
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block * 64
    return bytes(out[:size])


@pytest.fixture
def container(service):
    return service.create_container("chunks")


def _row(name: str = "big") -> Blob:
    return Blob.objects.get(container__name="chunks", name=name, snapshot="")


def _stored() -> tuple[int, int]:
    return BlobContent.objects.count(), BlobChunk.objects.count()


def test_large_content_is_stored_in_chunks_and_read_back_whole_and_in_ranges(container):
    data = _content()
    client = container.upload_blob("big", data)
    row = _row()
    assert row.content_version is not None and bytes(row.content) == b""
    assert BlobContent.objects.get(id=row.content_version).state == BlobContent.LIVE
    assert sorted(BlobChunk.objects.filter(version=row.content_version).values_list("seq", flat=True)) == [0, 1, 2, 3]
    assert client.download_blob().readall() == data
    across = CHUNK_BYTES - 10  # a range over a chunk boundary
    assert client.download_blob(offset=across, length=25).readall() == data[across:across + 25]
    tail = SIZE - 7
    assert client.download_blob(offset=tail).readall() == data[tail:]
    props = client.get_blob_properties()
    assert props.size == SIZE
    assert bytes(props.content_settings.content_md5) == hashlib.md5(data).digest()


def test_content_up_to_one_chunk_stays_in_the_row(container):
    data = _content(CHUNK_BYTES)
    client = container.upload_blob("big", data)
    row = _row()
    assert row.content_version is None and bytes(row.content) == data
    assert _stored() == (0, 0)
    assert client.download_blob().readall() == data


def test_get_blob_streams_one_chunk_at_a_time(container, azure_server, monkeypatch):
    """The response's first chunk reaches the client while the second has
    not been read (a whole-content response could not be sent before it),
    and no chunk is read ahead of the one being sent."""
    data = _content()
    container.upload_blob("big", data)
    read, second_asked, second_may_go = [], threading.Event(), threading.Event()
    real_read = blob_content.read_chunk

    def read_chunk(version, seq):
        read.append(seq)
        if seq == 1:
            second_asked.set()
            assert second_may_go.wait(20), "the test never let the second chunk be read"
        return real_read(version, seq)

    monkeypatch.setattr(blob_content, "read_chunk", read_chunk)
    response = azure_raw_get(azure_server, f"/{DEV_ACCOUNT}/chunks/big")
    try:
        assert response.status_code == 200
        assert response.headers["Content-Length"] == str(SIZE)
        first = response.raw.read(CHUNK_BYTES)
        assert first == data[:CHUNK_BYTES]
        assert second_asked.wait(20)
        assert read == [0, 1]  # the second is being read, nothing beyond it
        second_may_go.set()
        rest = response.raw.read()
    finally:
        second_may_go.set()
        response.close()
    assert first + rest == data
    assert read == [0, 1, 2, 3]


def azure_raw_get(base: str, path: str) -> requests.Response:
    """A signed GET whose body is read as it arrives."""
    original = requests.request
    try:
        requests.request = lambda *a, **kw: original(*a, **{**kw, "stream": True, "timeout": 20})
        return azure_raw.signed("GET", base, path)
    finally:
        requests.request = original


def test_a_refused_upload_stores_nothing_and_is_recorded(container):
    old = _content(seed=b"old")
    client = container.upload_blob("big", old)
    lease = client.acquire_lease(lease_duration=15)
    version = _row().content_version
    before = _stored()
    with pytest.raises(HttpResponseError) as refused:
        client.upload_blob(_content(seed=b"new"), overwrite=True,
                           lease="00000000-0000-0000-0000-000000000001")
    assert refused.value.status_code == 412
    assert sdk_error_code(refused.value) == "LeaseIdMismatchWithBlobOperation"
    with pytest.raises(HttpResponseError) as unmet:
        client.upload_blob(_content(seed=b"new"), overwrite=True, lease=lease, etag='"0xNOTIT"',
                           match_condition=MatchConditions.IfNotModified)
    assert unmet.value.status_code == 412 and sdk_error_code(unmet.value) == "ConditionNotMet"
    assert _stored() == before
    assert _row().content_version == version
    assert client.download_blob().readall() == old
    event = LeaseEvent.objects.filter(action="put-blob").latest("id")
    assert (event.outcome, event.status_code, event.error_code) == ("refused", 412,
                                                                      "LeaseIdMismatchWithBlobOperation")


def test_an_upload_refused_after_its_content_was_staged_leaves_no_chunks(container, monkeypatch):
    """The look before staging saw no lease; a lease was taken before the
    swap: the swap refuses (and records it), and the staged chunks go."""
    client = container.upload_blob("big", b"small")
    client.acquire_lease(lease_duration=15)
    monkeypatch.setattr(services.blobs, "_put_refused_now", lambda *a: False)  # the look came before the acquire
    staged = []
    real_stage = blob_content.stage

    def stage(content):
        staged.append(real_stage(content))
        return staged[-1]

    monkeypatch.setattr(blob_content, "stage", stage)
    with pytest.raises(HttpResponseError) as refused:
        client.upload_blob(_content(), overwrite=True)
    assert sdk_error_code(refused.value) == "LeaseIdMissing"
    assert len(staged) == 1  # it was staged, then discarded
    assert _stored() == (0, 0)
    assert bytes(_row().content) == b"small"
    assert LeaseEvent.objects.filter(action="put-blob", error_code="LeaseIdMissing").count() == 1


def test_an_upload_the_look_refused_but_the_swap_allows_is_staged_then(container, monkeypatch):
    monkeypatch.setattr(services.blobs, "_put_refused_now", lambda *a: True)  # a lease released since the look
    data = _content()
    client = container.upload_blob("big", data)
    assert client.download_blob().readall() == data
    assert _stored() == (1, 4)


def _take_within(path: str, seconds: float) -> bool:
    """Whether the writer lock can be taken (and is given back) within
    ``seconds``: the server's WAL checkpointer holds it for moments."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        for _ in range(int(seconds * 100)):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                threading.Event().wait(0.01)
                continue
            fcntl.flock(fd, fcntl.LOCK_UN)
            return True
        return False
    finally:
        os.close(fd)


def test_the_writer_is_free_between_the_chunks_of_an_upload(container, service, monkeypatch):
    """While an upload is between two of its pieces, another connection can
    take the writer lock (and SQLite's) and a lease renewal is answered:
    nothing waits for the whole upload."""
    holder = container.upload_blob("held", b"")
    lease = holder.acquire_lease(lease_duration=15)
    paused, resume = threading.Event(), threading.Event()
    pieces = []
    real_piece = blob_content._piece

    def piece(fn):
        result = real_piece(fn)
        pieces.append(1)
        if len(pieces) == 2:  # between the second and third chunk
            paused.set()
            assert resume.wait(30), "the test never resumed the upload"
        return result

    monkeypatch.setattr(blob_content, "_piece", piece)
    data = _content(8 * CHUNK_BYTES)
    outcome = []
    uploader = threading.Thread(target=lambda: outcome.append(container.upload_blob("big", data)))
    uploader.start()
    try:
        assert paused.wait(30), "the upload never reached its second piece"
        if connection.vendor == "sqlite":
            path = writer_lock_file()
            assert _take_within(path, 10), "the writer lock stayed held while the upload was paused"
            other = sqlite3.connect(str(connection.settings_dict["NAME"]), timeout=10, isolation_level=None)
            try:
                other.execute("BEGIN IMMEDIATE")  # "database is locked" if a write transaction were open
                other.execute("ROLLBACK")
            finally:
                other.close()
        lease.renew()  # answered while the upload is half staged
        assert not outcome
        assert BlobChunk.objects.count() == 2
        assert not Blob.objects.filter(name="big").exists()  # staged chunks are invisible
    finally:
        resume.set()
        uploader.join(60)
    assert outcome and outcome[0].download_blob().readall() == data


def test_a_snapshot_shares_the_chunks_and_keeps_them_after_an_overwrite(container, clock):
    first, second = _content(seed=b"1"), _content(seed=b"2")
    client = container.upload_blob("big", first)
    snap = client.create_snapshot()
    assert _stored() == (1, 4)  # shared, not copied
    client.upload_blob(second, overwrite=True)
    assert _stored() == (2, 8)
    snapshot_client = container.get_blob_client("big", snapshot=snap["snapshot"])
    assert snapshot_client.download_blob().readall() == first
    assert client.download_blob().readall() == second
    clock.advance(blob_content.RELEASED_GRACE.total_seconds() + 1)
    blob_content.collect(max_batches=None)
    assert _stored() == (2, 8)  # the snapshot still names the first version
    snapshot_client.delete_blob()
    assert BlobContent.objects.filter(state=BlobContent.RELEASED).count() == 1
    blob_content.collect(max_batches=None)  # within its grace: kept for downloads under way
    assert _stored() == (2, 8)
    clock.advance(blob_content.RELEASED_GRACE.total_seconds() + 1)
    blob_content.collect(max_batches=None)
    assert _stored() == (1, 4)
    assert blob_content.read_all(_row()) == second  # (the SDK's signed date is too old by now)


def test_a_download_under_way_finishes_the_version_it_started_or_fails(container, clock):
    data = _content()
    container.upload_blob("big", data)
    row = _row()
    download = blob_content.stream(row.content_version, 0, row.size - 1)
    got = next(download)
    container.upload_blob("big", _content(seed=b"other"), overwrite=True)  # replaced mid-download
    got += b"".join(next(download) for _ in range(CHUNK_BYTES // blob_content.PIECE_BYTES))
    clock.advance(blob_content.RELEASED_GRACE.total_seconds() + 1)
    blob_content.collect(max_batches=None)
    with pytest.raises(blob_content.ContentGone):
        b"".join(download)
    assert got == data[:len(got)] and len(got) > CHUNK_BYTES


def test_deleting_blobs_and_containers_releases_their_content(container, service, clock):
    container.upload_blob("big", _content())
    container.upload_blob("other", _content(seed=b"o"))
    container.get_blob_client("big").delete_blob()
    assert BlobContent.objects.filter(state=BlobContent.RELEASED).count() == 1
    service.delete_container("chunks")
    assert BlobContent.objects.filter(state=BlobContent.RELEASED).count() == 2
    clock.advance(blob_content.RELEASED_GRACE.total_seconds() + 1)
    assert blob_content.collect(max_batches=1) == 4  # bounded: one transaction, one version's chunks and row
    assert _stored() == (1, 4)
    blob_content.collect(max_batches=None)
    assert _stored() == (0, 0)


def test_a_dead_uploads_staged_content_is_collected_after_its_time(transactional_db, clock):
    version = blob_content.stage(_content(10 * CHUNK_BYTES))  # an upload that died before its swap
    assert BlobContent.objects.get(id=version).state == BlobContent.STAGED
    assert blob_content.collect(max_batches=None) == 0
    clock.advance(blob_content.STAGED_TTL.total_seconds() + 1)
    assert blob_content.collect(max_batches=1) == blob_content.DELETE_BATCH  # bounded
    assert _stored() == (1, 10 - blob_content.DELETE_BATCH)
    assert blob_content.collect(max_batches=None) == 10 - blob_content.DELETE_BATCH
    assert _stored() == (0, 0)


def test_the_gc_command_releases_orphans_and_deletes_them(container, clock):
    from django.core.management import call_command

    container.upload_blob("big", _content())
    Blob.objects.filter(name="big").update(content_version=None)  # as if a race had lost the reference
    clock.advance(1)
    call_command("leasehold_blob_gc", stdout=open(os.devnull, "w"))
    assert BlobContent.objects.get().state == BlobContent.RELEASED
    clock.advance(blob_content.RELEASED_GRACE.total_seconds() + 1)
    call_command("leasehold_blob_gc", stdout=open(os.devnull, "w"))
    assert _stored() == (0, 0)


def test_put_blob_of_large_content_through_the_service(make_blob):
    ref = ResourceRef("devstoreaccount1", "svc", "b")
    make_blob(ref, ACTOR)
    data = _content()
    blob = services.blob_put(ref=ref, actor=ACTOR, content=data)
    assert blob_content.read_all(Blob.objects.get(pk=blob.pk)) == data
    assert blob.content_md5 and blob.size == SIZE


# ------------------------------------------------------------------ the migration

@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_large_content_into_chunks_and_back(clock):
    import importlib

    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    this = importlib.import_module("leases.migrations.0008_blob_chunks").Migration
    parent = ("leases", this.dependencies[0][1])
    executor = MigrationExecutor(connection)
    executor.migrate([parent])
    old = executor.loader.project_state([parent]).apps
    account = old.get_model("leases", "Account").objects.create(name="mig", key1="a2V5")
    container = old.get_model("leases", "Container").objects.create(
        account=account, name="c", etag='"0x1"', last_modified=timezone.now(), created_at=timezone.now())
    big, small = _content(), b"small"
    for name, data in (("big", big), ("small", small)):
        old.get_model("leases", "Blob").objects.create(
            container=container, name=name, content=data, size=len(data), etag='"0x1"',
            last_modified=timezone.now(), created_at=timezone.now())

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    moved = Blob.objects.get(name="big")
    assert moved.content_version is not None and bytes(moved.content) == b""
    assert blob_content.read_all(moved) == big
    assert BlobChunk.objects.filter(version=moved.content_version).count() == 4
    assert Blob.objects.get(name="small").content_version is None

    executor = MigrationExecutor(connection)
    executor.migrate([parent])  # and back: the content returns to the row
    back = MigrationExecutor(connection).loader.project_state([parent]).apps.get_model("leases", "Blob")
    assert bytes(back.objects.get(name="big").content) == big
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_each_put_blob_removes_more_than_it_may_release(container, clock):
    """Content replaced more than the grace ago goes with the next uploads,
    twice the chunks each upload wrote: removal keeps ahead."""
    for i in range(3):
        container.upload_blob(f"b{i}", _content(seed=bytes([i])))
    for i in range(3):
        container.upload_blob(f"b{i}", b"small now", overwrite=True)
    assert BlobContent.objects.filter(state=BlobContent.RELEASED).count() == 3
    clock.advance(blob_content.RELEASED_GRACE.total_seconds() + 1)
    services.blob_put(ref=ResourceRef(DEV_ACCOUNT, "chunks", "next"), actor=ACTOR, content=_content())
    # up to 4 + 2 * 4 // 8 = 5 transactions; each old version's 4 chunks and row go in one
    assert not BlobContent.objects.filter(state=BlobContent.RELEASED).exists()
    assert BlobChunk.objects.exclude(version=_row("next").content_version).count() == 0
