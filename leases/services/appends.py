"""Append blobs: created empty by Put Blob (x-ms-blob-type: AppendBlob), grown by Append Block under
the blob's lease. An append blob's content is a block list (BlobPart rows, as Put Block List's) that
only grows: each Append Block stages its bytes as a version of their own (chunks in short
transactions), then one short transaction checks the lease and conditions and adds one part past the
blob's end. A reader (a download, a snapshot) reads at most the size it saw, so a part added later
never shows through; a copy of an append blob gets a list of its own."""

from __future__ import annotations

import functools
import uuid

from leases.storage import blob_content
from leases.domain import clock, machine
from leases.domain import metadata as metadata_rules
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.models import Blob, BlobContent, BlobPart
from leases.storage import dbclock
from leases.services.access import after_blob_write, check_access, committing_refusals
from leases.services.blobs import blob_for_write, validate_blob_name
from leases.services.blocks import COPY_CLEARED, MAX_COMMITTED, NeedsStaging, write_checks, stage_and_record, write_blob
from leases.services.common import NO_CONDITIONS, Actor, ResourceRef, container_must_exist, now_etag

APPEND_BLOB = "AppendBlob"


def append_blob_create(*, ref: ResourceRef, actor: Actor, content_type: str = "", metadata: dict | None = None,
                       properties: dict | None = None, lease_id: uuid.UUID | None = None,
                       conditions: Conditions = NO_CONDITIONS) -> Blob:
    """Put Blob of an append blob: an empty one, created or replacing what
    the name held (under its lease, as any Put Blob)."""
    assert ref.blob is not None
    validate_blob_name(ref.blob)
    metadata = metadata_rules.validate(metadata)
    blob = _create(ref=ref, actor=actor, content_type=content_type, metadata=metadata, properties=properties,
                   lease_id=lease_id, conditions=conditions)
    blob_content.collect_after_request()
    return blob


@committing_refusals
def _create(*, ref: ResourceRef, actor: Actor, content_type, metadata, properties, lease_id, conditions) -> Blob:
    container = container_must_exist(ref)
    blob = blob_for_write(container, ref)
    now = dbclock.transaction_now()  # read once the row is locked (services.lease_actions says why)
    write_checks(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, conditions=conditions, operation="put-blob")
    version = uuid.uuid4()
    BlobContent.objects.create(id=version, state=BlobContent.LIVE, size=0, chunk_bytes=0, staged_at=now)
    props = {k: v for k, v in (properties or {}).items() if v is not None}
    fields = {"content": b"", "content_version": version, "size": 0, "content_md5": "", "blob_type": APPEND_BLOB,
              "content_type": content_type or "application/octet-stream", "metadata": metadata or {},
              "content_encoding": props.get("content_encoding", ""),
              "content_language": props.get("content_language", ""),
              "content_disposition": props.get("content_disposition", ""),
              "cache_control": props.get("cache_control", ""), **COPY_CLEARED}
    return write_blob(container, blob, ref=ref, actor=actor, now=now, fields=fields, lease_id=lease_id,
                      conditions=conditions, operation="put-blob")


def block_append(*, ref: ResourceRef, actor: Actor, read, length: int, md5: bytes | None = None,
                 crc64: bytes | None = None, lease_id: uuid.UUID | None = None,
                 conditions: Conditions = NO_CONDITIONS, max_size: int | None = None,
                 append_position: int | None = None) -> tuple[Blob, int, int]:
    """Append Block: ``length`` bytes read by ``read(n)`` added at the end
    of the append blob; (the blob, the offset they were added at, its block
    count). ``max_size``/``append_position``: x-ms-blob-condition-maxsize
    and -appendpos."""
    assert ref.blob is not None
    record = functools.partial(_append, ref=ref, actor=actor, length=length, lease_id=lease_id,
                               conditions=conditions, max_size=max_size, append_position=append_position)
    result, _ = stage_and_record(record, refused_now=_refused_now(ref, lease_id), read=read, length=length,
                                 md5=md5, crc64=crc64)
    return result


def _refused_now(ref: ResourceRef, lease_id) -> bool:
    """Whether the blob's state refuses the append now, read without a lock
    (then nothing is staged; the transaction checks again and records)."""
    blob = (Blob.objects.defer("content").filter(container__account__name=ref.account,
                                                 container__name=ref.container, name=ref.blob, snapshot="").first())
    if blob is None or blob.blob_type != APPEND_BLOB:
        return True
    try:
        machine.check_access(blob.lease_record, clock.now(), lease_id=lease_id, write=True, noun=machine.BLOB)
    except LeaseholdError:
        return True
    return False


@committing_refusals
def _append(*, ref: ResourceRef, actor: Actor, length: int, lease_id, conditions: Conditions, max_size,
            append_position, staged) -> tuple[Blob, int, int]:
    container = container_must_exist(ref)
    blob = blob_for_write(container, ref)
    if blob is None:
        raise LeaseholdError("BlobNotFound")
    now = dbclock.transaction_now()
    check_access(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, write=True, operation="append-block")
    if blob.blob_type != APPEND_BLOB or blob.content_version is None:
        raise LeaseholdError("InvalidBlobType")
    conditions.check_write(blob.etag, blob.last_modified)
    if append_position is not None and append_position != blob.size:
        raise LeaseholdError("AppendPositionConditionNotMet")
    if max_size is not None and blob.size + length > max_size:
        raise LeaseholdError("MaxBlobSizeConditionNotMet")
    count = BlobPart.objects.filter(version=blob.content_version).count()
    if count >= MAX_COMMITTED:
        raise LeaseholdError("BlockCountExceedsLimit",
                             message="The committed block count cannot exceed the maximum limit of 50,000 blocks.")
    if staged is None:
        raise NeedsStaging
    blob_content.make_live(staged)
    offset = blob.size
    BlobPart.objects.create(version=blob.content_version, seq=count, block_id="", start=offset, size=length,
                            source=staged)
    BlobContent.objects.filter(id=blob.content_version).update(size=offset + length)
    blob.size = offset + length
    changed = after_blob_write(blob, ref=ref, actor=actor, now=now)
    blob.save(update_fields=["size", *now_etag(blob, now), *changed])
    return blob, offset, count + 1


def clone_list(version: uuid.UUID, *, size: int, now) -> uuid.UUID:
    """In the caller's transaction: a new append list holding the first
    ``size`` bytes of ``version``'s (a copy's own: appends to either never
    show in the other); the blocks' bytes are shared, not copied."""
    new = uuid.uuid4()
    BlobContent.objects.create(id=new, state=BlobContent.LIVE, size=size, chunk_bytes=0, staged_at=now)
    BlobPart.objects.bulk_create(
        [BlobPart(version=new, seq=seq, block_id=block_id, start=start, size=part_size, source=source)
         for seq, block_id, start, part_size, source in BlobPart.objects.filter(version=version, start__lt=size)
         .order_by("seq").values_list("seq", "block_id", "start", "size", "source")], batch_size=500)
    return new


def committed_block_count(blob: Blob) -> int:
    return BlobPart.objects.filter(version=blob.content_version, start__lt=blob.size).count() if blob.size else 0
