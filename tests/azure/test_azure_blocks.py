"""Block blobs uploaded in blocks (Put Block, Put Block List, Get Block
List: leases/services/blocks.py) and Copy Blob within the server
(leases/services/copies.py), through the official Python SDK as service
teams call them: default-settings uploads above max_single_put_size and of
streams of unknown length, leased and not; every lease cell of the new
operations with Azure's codes; block ids and limits; what a commit discards."""

from __future__ import annotations

import base64
import functools
import hashlib
import io
import random
import uuid

import pytest
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobBlock

from leases.storage import blob_content
from leases import services
from leases.domain.errors import LeaseholdError
from leases.services import Actor, ResourceRef
from leases.models import BlobBlock as BlockRow
from leases.models import BlobContent, BlobPart, LeaseEvent
from leases.services import blocks as block_service

from tests import azure_raw

pytestmark = pytest.mark.also_postgres

MIB = 1 << 20


class Generated(io.RawIOBase):
    """``size`` bytes made on the fly (different at every offset), readable once; ``seekable`` False and no length: a stream of
    unknown length to the SDK unless it is told one."""

    def __init__(self, size: int, seed: bytes = b"s", seekable: bool = False):
        self.size, self.position, self.seed, self._seekable = size, 0, seed, seekable

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return self._seekable

    def tell(self) -> int:
        if not self._seekable:
            raise io.UnsupportedOperation("a stream of unknown length")
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        if not self._seekable:
            raise io.UnsupportedOperation("a stream of unknown length")
        self.position = {0: offset, 1: self.position + offset, 2: self.size + offset}[whence]
        return self.position

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.size - self.position)
        buffer[:n] = generated(self.position, n, self.seed)
        self.position += n
        return n


PIECE = 64 << 10


@functools.lru_cache(maxsize=64)
def _piece(seed: bytes, index: int) -> bytes:
    return random.Random(seed + index.to_bytes(8, "little")).randbytes(PIECE)


def generated(start: int, length: int, seed: bytes = b"s") -> bytes:
    """Bytes start..start+length of the content Generated makes: 64 KiB
    pieces of pseudo-random bytes, each seeded by the seed and its index."""
    first, last = start // PIECE, (start + length + PIECE - 1) // PIECE
    data = b"".join(_piece(seed, i) for i in range(first, last))
    return data[start - first * PIECE:start - first * PIECE + length]


def digest_of(size: int, seed: bytes = b"s") -> str:
    h = hashlib.sha256()
    for at in range(0, size, 4 * MIB):
        h.update(generated(at, min(4 * MIB, size - at), seed))
    return h.hexdigest()


def downloaded_digest(blob) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    for piece in blob.download_blob().chunks():
        h.update(piece)
        size += len(piece)
    return h.hexdigest(), size


@pytest.fixture
def box(service):
    return service.create_container(f"blocks-{uuid.uuid4().hex[:12]}")


def _code(exc) -> str | None:
    return exc.value.error_code


def bid(n: int, width: int = 8) -> str:
    return base64.b64encode(f"{n:0{width}d}".encode()).decode()


# ------------------------------------------------------------------ uploads as the SDK makes them

@pytest.mark.parametrize("leased", [False, True], ids=["unleased", "leased"])
def test_a_default_settings_upload_of_70_mib_goes_in_blocks_and_reads_back_whole(box, leased):
    size = 70 * MIB + 12_345  # above max_single_put_size (64 MiB): Put Block x 18, Put Block List
    blob = box.get_blob_client("big")
    kwargs = {}
    if leased:
        blob.upload_blob(b"old")
        lease = blob.acquire_lease(lease_duration=-1)
        kwargs = {"lease": lease}
    blob.upload_blob(Generated(size, seekable=True), length=size, overwrite=True, **kwargs)
    assert downloaded_digest(blob) == (digest_of(size), size)
    committed, uncommitted = blob.get_block_list("all")
    assert sum(b.size for b in committed) == size and len(committed) == 18 and uncommitted == []
    props = blob.get_blob_properties()
    assert props.size == size
    if leased:  # a write that kept the lease, as Put Blob's overwrite does
        assert props.lease.state == "leased" and props.lease.status == "locked"
        lease.renew()
    assert BlockRow.objects.count() == 0  # nothing left uncommitted


@pytest.mark.parametrize("leased", [False, True], ids=["unleased", "leased"])
def test_a_stream_of_unknown_length_is_uploaded_in_blocks(box, leased):
    size = 9 * MIB + 7
    blob = box.get_blob_client("stream")
    kwargs = {}
    if leased:
        blob.upload_blob(b"old")
        kwargs = {"lease": blob.acquire_lease(lease_duration=15)}
    blob.upload_blob(Generated(size, seed=b"u"), overwrite=True, **kwargs)
    assert downloaded_digest(blob) == (digest_of(size, b"u"), size)
    assert len(blob.get_block_list("committed")[0]) == 3


def test_stage_commit_and_list_blocks_by_hand(box):
    blob = box.get_blob_client("hand")
    blob.stage_block(bid(1), b"hello ")
    blob.stage_block(bid(2), b"world", validate_content=True)  # Content-MD5, checked
    with pytest.raises(ResourceNotFoundError):
        blob.get_blob_properties()  # only uncommitted blocks: no blob yet
    committed, uncommitted = blob.get_block_list("all")
    assert committed == [] and [(b.id, b.size) for b in uncommitted] == [(bid(1), 6), (bid(2), 5)]
    blob.commit_block_list([BlobBlock(bid(1)), BlobBlock(bid(2))], content_settings=None,
                           metadata={"kind": "hand"})
    assert blob.download_blob().readall() == b"hello world"
    assert blob.get_blob_properties().metadata == {"kind": "hand"}
    # a committed block again, a new one, and one replaced in between
    blob.stage_block(bid(3), b"!")
    blob.stage_block(bid(3), b"?")
    blob.commit_block_list([BlobBlock(bid(2)), BlobBlock(bid(3)), BlobBlock(bid(1))])
    assert blob.download_blob().readall() == b"world?hello "
    assert blob.download_blob(offset=3, length=5).readall() == b"ld?he"
    assert [(b.id, b.size) for b in blob.get_block_list()[0]] == [(bid(2), 5), (bid(3), 1), (bid(1), 6)]


def test_a_block_changes_neither_etag_nor_last_modified_of_the_blob(box):
    blob = box.upload_blob("same", b"committed")
    before = blob.get_blob_properties()
    blob.stage_block(bid(1), b"pending")
    after = blob.get_blob_properties()
    assert (after.etag, after.last_modified, after.size) == (before.etag, before.last_modified, before.size)
    assert blob.download_blob().readall() == b"committed"


def test_a_commit_discards_the_uncommitted_blocks_it_does_not_name(box):
    blob = box.get_blob_client("discard")
    blob.stage_block(bid(1), b"a" * (2 * MIB))
    blob.stage_block(bid(2), b"b" * (2 * MIB))
    blob.commit_block_list([BlobBlock(bid(1))])
    assert blob.get_block_list("uncommitted")[1] == []
    assert BlockRow.objects.count() == 0
    # the unnamed block's content is released (deleted after its grace), the committed one live
    assert sorted(BlobContent.objects.exclude(chunk_bytes=0).values_list("state", flat=True)) == ["live", "released"]
    with pytest.raises(HttpResponseError) as exc:  # no longer there to commit
        blob.commit_block_list([BlobBlock(bid(2))])
    assert exc.value.status_code == 400 and _code(exc) == "InvalidBlockList"


def test_replaced_and_deleted_block_lists_are_collected_down_to_nothing(box, clock):
    blob = box.get_blob_client("gc")
    for n in range(3):
        blob.stage_block(bid(n), bytes([n]) * (MIB + 1))
    blob.commit_block_list([BlobBlock(bid(0)), BlobBlock(bid(1))])
    snapshot = blob.create_snapshot()
    blob.commit_block_list([BlobBlock(bid(1)), BlobBlock(bid(0))])  # committed blocks again, reordered
    blob.upload_blob(b"small", overwrite=True)
    assert box.get_blob_client("gc", snapshot=snapshot["snapshot"]).download_blob().readall() == (
        b"\x00" * (MIB + 1) + b"\x01" * (MIB + 1))
    clock.advance(blob_content.RELEASED_GRACE.total_seconds() + 1)
    blob_content.prune()
    assert BlobPart.objects.exists()  # the snapshot still names its list
    box.delete_blob("gc", delete_snapshots="include")
    blob_content.prune()
    clock.advance(blob_content.RELEASED_GRACE.total_seconds() + 1)
    blob_content.prune()
    assert not BlobContent.objects.exists() and not BlobPart.objects.exists()


def test_uncommitted_blocks_are_discarded_a_week_after_the_last_put_block(box, clock):
    # Past the first step, the server's clock is days ahead of the SDK's
    # signatures: the blocks are staged and looked at through the services.
    ref = ResourceRef(azure_raw.DEV_ACCOUNT, box.container_name, "week")
    box.get_blob_client("week").stage_block(bid(1), b"x" * 10)
    clock.advance(6 * 86400)
    services.block_put(ref=ref, actor=Actor(), block_id=base64.b64encode(bid(2).encode()).decode(), read=io.BytesIO(b"y" * 10).read, length=10)
    clock.advance(2 * 86400)  # a week after the first block, not after the last
    blob_content.prune()
    assert len(services.block_list_get(ref=ref, actor=Actor(), uncommitted=True)[2]) == 2
    clock.advance(6 * 86400)
    blob_content.prune()
    with pytest.raises(LeaseholdError) as exc:
        services.block_list_get(ref=ref, actor=Actor(), uncommitted=True)
    assert exc.value.code == "BlobNotFound"
    assert not BlockRow.objects.exists()
    clock.advance(blob_content.RELEASED_GRACE.total_seconds() + 1)
    blob_content.prune()
    assert not BlobContent.objects.exists()


def test_delete_blob_and_delete_container_discard_uncommitted_blocks(service, box, clock):
    blob = box.get_blob_client("d")
    blob.upload_blob(b"x")
    blob.stage_block(bid(1), b"pending")
    blob.delete_blob()
    assert not BlockRow.objects.exists()
    box.get_blob_client("e").stage_block(bid(1), b"pending")
    box.delete_container()
    clock.advance(blob_content.RELEASED_GRACE.total_seconds() + 1)
    blob_content.prune()
    assert not BlobContent.objects.exists()


# ------------------------------------------------------------------ block ids, checksums, limits

@pytest.mark.parametrize("block_id", ["not base64!", "", base64.b64encode(b"x" * 65).decode()],
                         ids=["not-base64", "empty", "65-bytes"])
def test_a_bad_block_id_is_refused_and_stores_nothing(box, block_id):
    path = f"/{azure_raw.DEV_ACCOUNT}/{box.container_name}/b?comp=block&blockid={block_id}"
    response = azure_raw.signed("PUT", azure_raw_base(box), path, body=b"data")
    assert response.status_code == 400 and azure_raw.error_code(response) == "InvalidQueryParameterValue"
    assert not BlockRow.objects.exists() and not BlobContent.objects.exists()


def test_a_64_byte_block_id_is_accepted():
    assert block_service.valid_block_id(base64.b64encode(b"x" * 64).decode())


def test_block_ids_of_one_blob_have_one_length(box):
    blob = box.get_blob_client("len")
    blob.stage_block(bid(1, 8), b"a")
    with pytest.raises(HttpResponseError) as exc:
        blob.stage_block(bid(2, 12), b"b")
    assert exc.value.status_code == 400 and _code(exc) == "InvalidBlobOrBlock"
    box.get_blob_client("other").stage_block(bid(2, 12), b"b")  # another blob's ids are its own


def test_checksums_that_do_not_match_are_refused(box):
    path = f"/{azure_raw.DEV_ACCOUNT}/{box.container_name}/c?comp=block&blockid={bid(1)}"
    wrong_md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    response = azure_raw.signed("PUT", azure_raw_base(box), path, body=b"data", headers={"Content-MD5": wrong_md5})
    assert response.status_code == 400 and azure_raw.error_code(response) == "Md5Mismatch"
    response = azure_raw.signed("PUT", azure_raw_base(box), path, body=b"data",
                                headers={"x-ms-content-crc64": base64.b64encode(b"\0" * 8).decode()})
    assert response.status_code == 400 and azure_raw.error_code(response) == "Crc64Mismatch"
    # CRC-64/NVME of "123456789" is 0xAE8B14860A799888 (little-endian on the wire)
    good = base64.b64encode((0xAE8B14860A799888).to_bytes(8, "little")).decode()
    response = azure_raw.signed("PUT", azure_raw_base(box), path, body=b"123456789",
                                headers={"x-ms-content-crc64": good})
    assert response.status_code == 201 and response.headers["x-ms-content-crc64"] == good
    assert response.headers["Content-MD5"] == base64.b64encode(hashlib.md5(b"123456789").digest()).decode()
    assert not BlobContent.objects.filter(state="staged").exists() and BlockRow.objects.count() == 1


def test_the_block_limits(box, monkeypatch):
    """Azure's limits, 100,000 uncommitted and 50,000 committed blocks,
    lowered here so that the test need not stage that many."""
    monkeypatch.setattr(block_service, "MAX_UNCOMMITTED", 3)
    monkeypatch.setattr(block_service, "MAX_COMMITTED", 2)
    blob = box.get_blob_client("limits")
    for n in range(3):
        blob.stage_block(bid(n), b"x")
    blob.stage_block(bid(2), b"y")  # replacing one is no new block
    with pytest.raises(HttpResponseError) as exc:
        blob.stage_block(bid(3), b"x")
    assert exc.value.status_code == 409 and _code(exc) == "BlockCountExceedsLimit"
    with pytest.raises(HttpResponseError) as exc:
        blob.commit_block_list([BlobBlock(bid(n)) for n in range(3)])
    assert exc.value.status_code == 400 and _code(exc) == "BlockListTooLong"
    blob.commit_block_list([BlobBlock(bid(0)), BlobBlock(bid(2))])
    assert blob.download_blob().readall() == b"xy"


def test_a_block_over_the_servers_body_limit_is_refused(box, settings):
    """A block may be as large as a body may be here (LEASEHOLD_MAX_BLOB_BYTES,
    64 MiB by default; Azure allows 4000 MiB); lowered to 1 MiB for the test."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = MIB
    blob = box.get_blob_client("big-block")
    with pytest.raises(HttpResponseError) as exc:
        blob.stage_block(bid(1), b"x" * (MIB + 1))
    assert (exc.value.status_code, _code(exc)) == (413, "RequestBodyTooLarge")
    blob.stage_block(bid(1), b"x" * MIB)
    assert not BlobContent.objects.filter(state="staged").exists()


def test_the_service_limits_are_azures():
    assert (block_service.MAX_COMMITTED, block_service.MAX_UNCOMMITTED) == (50_000, 100_000)


def test_a_block_list_that_is_no_xml_is_refused(box):
    path = f"/{azure_raw.DEV_ACCOUNT}/{box.container_name}/x?comp=blocklist"
    for body in (b"<BlockList><Latest>", b'<!DOCTYPE x [<!ENTITY a "b">]><BlockList/>', b"<Other/>"):
        response = azure_raw.signed("PUT", azure_raw_base(box), path, body=body)
        assert response.status_code == 400 and azure_raw.error_code(response) == "InvalidXmlDocument"


def test_commit_conditions(box):
    from azure.core import MatchConditions

    blob = box.get_blob_client("cond")
    blob.stage_block(bid(1), b"a")
    blob.commit_block_list([BlobBlock(bid(1))])
    blob.stage_block(bid(2), b"b")
    with pytest.raises(HttpResponseError) as exc:
        blob.commit_block_list([BlobBlock(bid(2))], etag='"0x1"', match_condition=MatchConditions.IfNotModified)
    assert exc.value.status_code == 412 and _code(exc) == "ConditionNotMet"
    etag = blob.get_blob_properties().etag
    blob.commit_block_list([BlobBlock(bid(2))], etag=etag, match_condition=MatchConditions.IfNotModified)
    assert blob.download_blob().readall() == b"b"
    with pytest.raises(ResourceExistsError):  # overwrite=False: the commit's If-None-Match: *
        blob.upload_blob(Generated(10))
    assert blob.download_blob().readall() == b"b"


def azure_raw_base(box) -> str:
    return box.url.rsplit(f"/{azure_raw.DEV_ACCOUNT}/", 1)[0]


# ------------------------------------------------------------------ lease cells

def _cell(blob, clock, cell: str, create=None):
    """Put ``blob`` (made by ``create``, else a block blob "base") in the
    lease state ``cell`` names; the lease id to send."""
    if create is not None:
        create()
    else:
        blob.upload_blob(b"base", overwrite=True)
    lease = blob.acquire_lease(lease_duration=15)
    wrong = str(uuid.uuid4())
    if cell == "breaking":
        lease.break_lease(lease_break_period=10)
    elif cell == "broken":
        lease.break_lease(lease_break_period=0)
    elif cell == "expired":
        clock.advance(16)
    return {"no-id": None, "right-id": lease.id, "wrong-id": wrong, "breaking": lease.id,
            "broken": lease.id, "expired": lease.id, "breaking-no-id": None, "broken-no-id": None,
            "expired-no-id": None}[cell]


# (state set up, lease id sent) -> the answer of a write (Put Block, Put Block List, Copy Blob onto it)
WRITE_CELLS = {
    "no-id": (412, "LeaseIdMissing"),
    "right-id": (None, None),
    "wrong-id": (412, "LeaseIdMismatchWithBlobOperation"),
    "breaking": (None, None),  # the holder may write while it breaks
    "breaking-no-id": (412, "LeaseIdMissing"),
    "broken": (412, "LeaseLost"),
    "broken-no-id": (None, None),
    "expired": (412, "LeaseLost"),
    "expired-no-id": (None, None),
}


def _setup(cell: str) -> str:
    return cell.removesuffix("-no-id") if cell.endswith("-no-id") else cell


@pytest.mark.parametrize("cell", list(WRITE_CELLS))
@pytest.mark.parametrize("operation", ["put-block", "put-block-list", "copy-blob"])
def test_lease_cells_of_the_writes(box, clock, cell, operation):
    blob = box.get_blob_client("leased")
    if operation == "put-block-list":
        blob.stage_block(bid(1), b"new")  # before the blob (and its lease) exists
    lease_id = _cell(blob, clock, _setup(cell))
    if cell.endswith("-no-id"):
        lease_id = None
    box.upload_blob("source", b"copied")
    events = LeaseEvent.objects.count()
    status, code = WRITE_CELLS[cell]

    def act():
        if operation == "put-block":
            blob.stage_block(bid(1), b"new", lease=lease_id)
        elif operation == "put-block-list":
            blob.commit_block_list([BlobBlock(bid(1))], lease=lease_id)
        else:
            blob.start_copy_from_url(box.get_blob_client("source").url, destination_lease=lease_id)

    if status is None:
        act()
        if operation != "put-block":
            assert blob.download_blob().readall() == (b"new" if operation == "put-block-list" else b"copied")
            state = blob.get_blob_properties().lease.state
            assert state == {"right-id": "leased", "breaking": "breaking"}.get(cell, "available")
        return
    with pytest.raises(HttpResponseError) as exc:
        act()
    assert (exc.value.status_code, _code(exc)) == (status, code)
    assert blob.download_blob().readall() == b"base"  # changed nothing
    refusal = LeaseEvent.objects.order_by("-id").first()
    assert LeaseEvent.objects.count() == events + 1 and refusal.error_code == code
    assert refusal.action == operation


@pytest.mark.parametrize("cell,expected", [("no-id", None), ("right-id", None), ("breaking", None),
                                           ("wrong-id", "LeaseIdMismatchWithBlobOperation"),
                                           ("broken", "LeaseLost"), ("expired", "LeaseLost")])
def test_lease_cells_of_get_block_list(box, clock, cell, expected):
    blob = box.get_blob_client("leased")
    lease_id = _cell(blob, clock, cell)
    if expected is None:
        assert blob.get_block_list("all", lease=lease_id) == ([], [])
        return
    with pytest.raises(HttpResponseError) as exc:
        blob.get_block_list("all", lease=lease_id)
    assert (exc.value.status_code, _code(exc)) == (412, expected)


def test_a_lease_id_on_a_blob_that_does_not_exist_is_refused(box):
    blob = box.get_blob_client("none")
    with pytest.raises(HttpResponseError) as exc:
        blob.stage_block(bid(1), b"x", lease=str(uuid.uuid4()))
    assert (exc.value.status_code, _code(exc)) == (412, "LeaseNotPresentWithBlobOperation")
    assert not BlobContent.objects.exists()


def test_a_refused_block_stages_nothing(box):
    blob = box.get_blob_client("refused")
    blob.upload_blob(b"x")
    blob.acquire_lease(lease_duration=-1)
    with pytest.raises(HttpResponseError):
        blob.stage_block(bid(1), b"y" * (3 * MIB))
    assert not BlobContent.objects.exists() and not BlockRow.objects.exists()


# ------------------------------------------------------------------ Copy Blob

@pytest.mark.parametrize("sync", [False, True], ids=["copy-blob", "copy-from-url"])
def test_copy_blob_completes_at_once_and_shows_its_properties(box, sync):
    source = box.upload_blob("src", b"s" * (2 * MIB + 5), metadata={"from": "src"})
    dest = box.get_blob_client("dst")
    result = dest.start_copy_from_url(source.url, requires_sync=sync)
    assert result["copy_status"] == "success"
    props = dest.get_blob_properties()
    assert props.copy.status == "success" and props.copy.id == result["copy_id"]
    assert props.copy.source == source.url and props.copy.progress == f"{2 * MIB + 5}/{2 * MIB + 5}"
    assert props.copy.completion_time is not None and props.metadata == {"from": "src"}
    assert dest.download_blob().readall() == b"s" * (2 * MIB + 5)
    # shared, not copied: one version for both
    assert BlobContent.objects.count() == 1
    dest.upload_blob(b"other", overwrite=True)  # a write clears the copy properties
    assert dest.get_blob_properties().copy.id is None


def test_copy_blob_under_leases(box):
    source = box.upload_blob("src", b"source")
    dest = box.upload_blob("dst", b"dest")
    lease = dest.acquire_lease(lease_duration=-1)
    with pytest.raises(HttpResponseError) as exc:
        dest.start_copy_from_url(source.url)
    assert (exc.value.status_code, _code(exc)) == (412, "LeaseIdMissing")
    assert dest.download_blob().readall() == b"dest"
    dest.start_copy_from_url(source.url, destination_lease=lease)
    assert dest.download_blob().readall() == b"source"
    assert dest.get_blob_properties().lease.state == "leased"
    # the source's lease: a read, checked only when its id is given (x-ms-source-lease-id)
    source_lease = source.acquire_lease(lease_duration=-1)
    box.get_blob_client("other").start_copy_from_url(source.url)
    path = f"/{azure_raw.DEV_ACCOUNT}/{box.container_name}/third"
    for given, status in ((str(uuid.uuid4()), 412), (source_lease.id, 202)):
        response = azure_raw.signed("PUT", azure_raw_base(box), path,
                                    headers={"x-ms-copy-source": source.url, "x-ms-source-lease-id": given})
        assert response.status_code == status, response.text


def test_copy_blob_refusals(box):
    dest = box.get_blob_client("dst")
    with pytest.raises(HttpResponseError) as exc:
        dest.start_copy_from_url(box.get_blob_client("missing").url)
    assert (exc.value.status_code, _code(exc)) == (404, "CannotVerifyCopySource")
    path = f"/{azure_raw.DEV_ACCOUNT}/{box.container_name}/dst"
    response = azure_raw.signed("PUT", azure_raw_base(box), path,
                                headers={"x-ms-copy-source": "http://127.0.0.1/otheraccount/c/b"})
    assert response.status_code == 403 and azure_raw.error_code(response) == "CannotVerifyCopySource"


def test_abort_copy_answers_that_no_copy_is_pending(box):
    source = box.upload_blob("src", b"s")
    dest = box.get_blob_client("dst")
    copy_id = dest.start_copy_from_url(source.url)["copy_id"]
    with pytest.raises(HttpResponseError) as exc:
        dest.abort_copy(copy_id)
    assert (exc.value.status_code, _code(exc)) == (409, "NoPendingCopyOperation")


def test_put_block_list_checks_its_own_checksum_and_stores_the_blobs(box):
    blob = box.get_blob_client("sums")
    blob.stage_block(bid(1), b"content")
    sdk_id = base64.b64encode(bid(1).encode()).decode()  # the SDK encodes the ids it is given
    body = f'<?xml version="1.0" encoding="utf-8"?><BlockList><Latest>{sdk_id}</Latest></BlockList>'.encode()
    path = f"/{azure_raw.DEV_ACCOUNT}/{box.container_name}/sums?comp=blocklist"
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    response = azure_raw.signed("PUT", azure_raw_base(box), path, body=body, headers={"Content-MD5": wrong})
    assert response.status_code == 400 and azure_raw.error_code(response) == "Md5Mismatch"
    blob_md5 = base64.b64encode(hashlib.md5(b"content").digest()).decode()
    right = base64.b64encode(hashlib.md5(body).digest()).decode()
    response = azure_raw.signed("PUT", azure_raw_base(box), path, body=body,
                                headers={"Content-MD5": right, "x-ms-blob-content-md5": blob_md5})
    assert response.status_code == 201 and response.headers["Content-MD5"] == right
    assert blob.download_blob().readall() == b"content"
    assert base64.b64encode(blob.get_blob_properties().content_settings.content_md5).decode() == blob_md5
