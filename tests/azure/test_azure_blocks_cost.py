"""What block lists cost the server, counted in rows and queries (never in time): a commit writes a
row per distinct block, not per part (leases/storage/block_lists.py); a download of a list of
50,000 parts runs a bounded number of queries and gives the right bytes through the SDK; a Put Block
that its checks refuse writes no chunk at all."""

from __future__ import annotations

import base64
import uuid

import pytest
from azure.storage.blob import BlobBlock
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leases.models import Blob, BlobBlock as BlockRow, BlobChunk, BlobContent, BlobPart
from leases.storage import blob_content
from leases.storage.block_lists import PARTS_PER_BATCH
from leases.domain.block_limits import MAX_COMMITTED

from tests import azure_raw

pytestmark = pytest.mark.also_postgres


@pytest.fixture
def box(service):
    return service.create_container(f"cost-{uuid.uuid4().hex[:12]}")


def _version(box, name: str) -> uuid.UUID:
    return Blob.objects.get(container__name=box.container_name, name=name, snapshot="").content_version


def _queries_to_read(version: uuid.UUID, size: int) -> tuple[bytes, int]:
    with CaptureQueriesContext(connection) as queries:
        data = b"".join(blob_content.stream(version, 0, size - 1))
    return data, len(queries)


# Per batch of PARTS_PER_BATCH parts: the parts (or their blocks' rows), and their blocks' bytes;
# and a few to start (the version, the layout or the first part). 150,000 before batching.
BOUND = 2 * (MAX_COMMITTED // PARTS_PER_BATCH + 2) + 8


def test_a_commit_of_50000_parts_of_one_block_writes_a_row_per_distinct_block(box):
    blob = box.get_blob_client("one")
    blob.stage_block("a", b"abcd")
    blob.commit_block_list([BlobBlock("a")] * MAX_COMMITTED)
    version = _version(box, "one")
    # The block once, the order in one chunk: not 50,000 rows.
    assert (BlobPart.objects.filter(version=version).count(), BlobChunk.objects.filter(version=version).count()) == (1, 1)
    assert blob.download_blob().readall() == b"abcd" * MAX_COMMITTED
    data, queries = _queries_to_read(version, 4 * MAX_COMMITTED)
    assert data == b"abcd" * MAX_COMMITTED and queries <= BOUND, queries

    # Two blocks alternating, one new and one from the committed list: two rows.
    blob.stage_block("b", b"EF")
    blob.commit_block_list([BlobBlock("a") if i % 2 else BlobBlock("b") for i in range(MAX_COMMITTED)])
    version = _version(box, "one")
    assert BlobPart.objects.filter(version=version).count() == 2
    assert blob.download_blob(offset=3, length=7).readall() == b"bcdEFab"
    assert blob.download_blob().readall() == b"EFabcd" * (MAX_COMMITTED // 2)
    assert [(b.id, b.size) for b in blob.get_block_list("committed")[0][:3]] == [("b", 2), ("a", 4), ("b", 2)]
    assert len(blob.get_block_list("committed")[0]) == MAX_COMMITTED


def test_a_list_written_a_row_per_part_is_read_in_batches_too(box):
    """A list committed before the layout (and an append blob's list) has a
    BlobPart row per part: read PARTS_PER_BATCH rows per query."""
    blob = box.get_blob_client("old")
    blob.stage_block("a", b"xyz")
    blob.commit_block_list([BlobBlock("a")])
    version, source = _version(box, "old"), BlobPart.objects.get(version=_version(box, "old")).source
    BlobPart.objects.filter(version=version).delete()
    BlobChunk.objects.filter(version=version).delete()
    BlobPart.objects.bulk_create([BlobPart(version=version, seq=seq, block_id="YQ==", start=3 * seq, size=3,
                                           source=source) for seq in range(MAX_COMMITTED)], batch_size=1000)
    BlobContent.objects.filter(id=version).update(size=3 * MAX_COMMITTED)
    Blob.objects.filter(content_version=version).update(size=3 * MAX_COMMITTED)
    assert blob.download_blob().readall() == b"xyz" * MAX_COMMITTED
    assert blob.download_blob(offset=4, length=5).readall() == b"yzxyz"
    data, queries = _queries_to_read(version, 3 * MAX_COMMITTED)
    assert data == b"xyz" * MAX_COMMITTED and queries <= BOUND, queries


def _last_chunk_id() -> int:
    """The id the last chunk written got (chunks deleted since included): a
    probe block staged before and after shows whether any was written between."""
    return BlobChunk.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def test_a_refused_put_block_writes_no_chunk(azure_server, box):
    """Each of Put Block's checks that needs no byte of the body refuses it
    before the body is staged: no chunk is written and discarded."""
    leased = box.get_blob_client("leased")
    leased.upload_blob(b"held")
    lease = leased.acquire_lease()
    box.get_blob_client("ids").stage_block("ab", b"x")  # base64 of a 2-byte id: ids of one length per name
    box.get_blob_client("appended").create_append_blob()
    path = f"/{azure_raw.DEV_ACCOUNT}/{box.container_name}"
    block = base64.b64encode(b"block-1").decode()
    refusals = [  # (path and query, headers, status, code)
        (f"{path}/leased?comp=block&blockid={block}", {}, 412, "LeaseIdMissing"),
        (f"{path}/leased?comp=block&blockid={block}", {"x-ms-lease-id": str(uuid.uuid4())}, 412,
         "LeaseIdMismatchWithBlobOperation"),
        (f"{path}/nothing?comp=block&blockid={block}", {"x-ms-lease-id": lease.id}, 412,
         "LeaseNotPresentWithBlobOperation"),
        (f"{path}/b?comp=block&blockid=not%20base64", {}, 400, "InvalidQueryParameterValue"),
        (f"{path}/ids?comp=block&blockid={block}", {}, 400, "InvalidBlobOrBlock"),
        (f"{path}/appended?comp=block&blockid={block}", {}, 409, "InvalidBlobType"),
        (f"/{azure_raw.DEV_ACCOUNT}/no-such-box/b?comp=block&blockid={block}", {}, 404, "ContainerNotFound"),
        (f"{path}/b?comp=block&blockid={block}", {"Content-MD5": "not an md5"}, 400, "InvalidMd5"),
    ]
    probe = box.get_blob_client("probe")
    probe.stage_block("probe-1", b"p")
    before, blocks = _last_chunk_id(), BlockRow.objects.count()
    for query, headers, status, code in refusals:
        response = azure_raw.signed("PUT", azure_raw_base(box), query, headers=headers, body=b"z" * 3000)
        assert (response.status_code, azure_raw.error_code(response)) == (status, code), (query, response.text)
    probe.stage_block("probe-2", b"p")
    assert _last_chunk_id() == before + 1  # the probe's own chunk, and none between
    assert BlockRow.objects.count() == blocks + 1


def azure_raw_base(box) -> str:
    return box.url.rsplit(f"/{azure_raw.DEV_ACCOUNT}/", 1)[0]
