"""Append blobs (leases/services/appends.py) through the official Python
SDK: created empty, grown by Append Block under the blob's lease (each
lease cell with Azure's codes), the append conditions, snapshots and copies
that appends never reach, and the SDK's upload of a log as an append blob."""

from __future__ import annotations

import uuid

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

from leases.storage import blob_content
from leases.models import BlobContent, BlobPart, LeaseEvent

from tests.azure.test_azure_blocks import MIB, WRITE_CELLS, Generated, _cell, _setup, bid, digest_of, downloaded_digest

# SQLite only: its database work (chunks staged, one row per append under the
# blob's row lock) is the block tests' (test_azure_blocks.py, which also run on PostgreSQL).


@pytest.fixture
def box(service):
    return service.create_container(f"append-{uuid.uuid4().hex[:12]}")


def _code(exc) -> str | None:
    return exc.value.error_code


def test_an_append_blob_grows_block_by_block(box):
    blob = box.get_blob_client("log")
    blob.create_append_blob(metadata={"kind": "log"})
    props = blob.get_blob_properties()
    assert props.blob_type == "AppendBlob" and props.size == 0 and props.metadata == {"kind": "log"}
    first = blob.append_block(b"line 1\n")
    second = blob.append_block(b"line 2\n" * (300_000), validate_content=True)
    assert (first["blob_append_offset"], first["blob_committed_block_count"]) == ("0", 1)
    assert (second["blob_append_offset"], second["blob_committed_block_count"]) == ("7", 2)
    assert blob.download_blob().readall() == b"line 1\n" + b"line 2\n" * 300_000
    assert blob.download_blob(offset=3, length=8).readall() == b"e 1\nline"
    props = blob.get_blob_properties()
    assert props.append_blob_committed_block_count == 2 and props.size == 7 + 7 * 300_000
    assert [b.blob_type for b in box.list_blobs()] == ["AppendBlob"]


def test_the_sdk_uploads_a_stream_as_an_append_blob(box):
    size = 9 * MIB + 3
    blob = box.get_blob_client("upload")
    blob.upload_blob(Generated(size, seed=b"a", seekable=True), blob_type="AppendBlob")  # 404 first: rewound
    assert downloaded_digest(blob) == (digest_of(size, b"a"), size)


def test_append_conditions(box):
    blob = box.get_blob_client("cond")
    blob.create_append_blob()
    blob.append_block(b"12345")
    with pytest.raises(HttpResponseError) as exc:
        blob.append_block(b"x", appendpos_condition=4)
    assert (exc.value.status_code, _code(exc)) == (412, "AppendPositionConditionNotMet")
    with pytest.raises(HttpResponseError) as exc:
        blob.append_block(b"678", maxsize_condition=7)
    assert (exc.value.status_code, _code(exc)) == (412, "MaxBlobSizeConditionNotMet")
    blob.append_block(b"6", appendpos_condition=5, maxsize_condition=6)
    assert blob.download_blob().readall() == b"123456"
    # the list and its two blocks; the refused appends left nothing
    assert sorted(BlobContent.objects.values_list("state", flat=True)) == ["live", "live", "live"]


def test_append_block_on_a_block_blob_and_blocks_on_an_append_blob_are_refused(box):
    block = box.upload_blob("block", b"x")
    with pytest.raises(HttpResponseError) as exc:
        block.append_block(b"y")
    assert (exc.value.status_code, _code(exc)) == (409, "InvalidBlobType")
    append = box.get_blob_client("append")
    append.create_append_blob()
    with pytest.raises(HttpResponseError) as exc:
        append.stage_block(bid(1), b"y")
    assert (exc.value.status_code, _code(exc)) == (409, "InvalidBlobType")
    with pytest.raises(ResourceNotFoundError):
        box.get_blob_client("none").append_block(b"y")
    assert not BlobContent.objects.filter(state="staged").exists()
    # Put Blob of a block blob replaces an append blob
    append.upload_blob(b"block now", overwrite=True)
    assert append.get_blob_properties().blob_type == "BlockBlob"


def test_snapshots_and_copies_never_see_later_appends(box):
    blob = box.get_blob_client("log")
    blob.create_append_blob()
    blob.append_block(b"a" * (MIB + 1))
    snapshot = blob.create_snapshot()
    copy = box.get_blob_client("copy")
    copy.start_copy_from_url(blob.url)
    blob.append_block(b"b")
    copy.append_block(b"c")
    assert blob.download_blob().readall() == b"a" * (MIB + 1) + b"b"
    assert copy.download_blob().readall() == b"a" * (MIB + 1) + b"c"
    snap = box.get_blob_client("log", snapshot=snapshot["snapshot"])
    assert snap.download_blob().readall() == b"a" * (MIB + 1)
    assert snap.get_blob_properties().append_blob_committed_block_count == 1
    assert copy.get_blob_properties().blob_type == "AppendBlob"


def test_a_deleted_append_blob_is_collected(box, clock):
    blob = box.get_blob_client("gone")
    blob.create_append_blob()
    for _ in range(3):
        blob.append_block(b"z" * (MIB + 5))
    blob.delete_blob()
    clock.advance(blob_content.RELEASED_GRACE.total_seconds() + 1)
    blob_content.prune()
    assert not BlobContent.objects.exists() and not BlobPart.objects.exists()


@pytest.mark.parametrize("cell", list(WRITE_CELLS))
def test_lease_cells_of_append_block(box, clock, cell):
    blob = box.get_blob_client("leased")
    blob.create_append_blob()
    lease_id = _cell(blob, clock, _setup(cell), create=blob.create_append_blob)
    if cell.endswith("-no-id"):
        lease_id = None
    status, code = WRITE_CELLS[cell]
    if status is None:
        blob.append_block(b"more", lease=lease_id)
        assert blob.download_blob().readall() == b"more"
        return
    events = LeaseEvent.objects.count()
    with pytest.raises(HttpResponseError) as exc:
        blob.append_block(b"more", lease=lease_id)
    assert (exc.value.status_code, _code(exc)) == (status, code)
    assert blob.get_blob_properties().size == 0
    refusal = LeaseEvent.objects.order_by("-id").first()
    assert LeaseEvent.objects.count() == events + 1 and refusal.action == "append-block"
    assert not BlobContent.objects.filter(state="staged").exists()


def test_a_leased_append_blob_needs_its_lease_to_be_created_again(box):
    blob = box.get_blob_client("again")
    blob.create_append_blob()
    lease = blob.acquire_lease(lease_duration=-1)
    with pytest.raises(HttpResponseError) as exc:
        blob.create_append_blob()
    assert (exc.value.status_code, _code(exc)) == (412, "LeaseIdMissing")
    blob.append_block(b"x", lease=lease)
    blob.create_append_blob(lease=lease)
    assert blob.get_blob_properties().size == 0 and blob.get_blob_properties().lease.state == "leased"
