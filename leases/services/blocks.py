"""Block blobs in blocks: Put Block, Put Block List, Get Block List. A block's bytes are staged as a
content version of their own (chunks, one short write transaction each:
leases.storage.blob_content), then one short transaction checks the lease and names it as an
uncommitted block of the blob name (BlobBlock). Put Block List is one short transaction: the lease
and conditions checked, the listed blocks resolved, a new version made of them (BlobPart rows naming
the blocks' versions: nothing is copied), the blob pointed at it, every uncommitted block of the
name discarded."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import uuid

from django.db import IntegrityError, transaction

from leases.storage import blob_content, block_lists
from leases.domain import clock, machine
from leases.domain import metadata as metadata_rules
from leases.domain.checksums import Crc64
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.models import Blob, BlobBlock, BlobContent, BlobPart, Container, new_etag
from leases.storage import dbclock
from leases.services.access import after_blob_write, check_access, committing_refusals, reading, refuse
from leases.services.blobs import blob_for_write, last_generation, validate_blob_name
from leases.services.common import NO_CONDITIONS, Actor, ResourceRef, container_must_exist, now_etag

from leases.domain.block_limits import MAX_COMMITTED, MAX_ID_BYTES, MAX_LIST_BYTES, MAX_UNCOMMITTED  # noqa: F401

LIST_KINDS = ("Committed", "Uncommitted", "Latest")
COPY_CLEARED = {"copy_id": "", "copy_source": "", "copy_progress": "", "copy_completed_at": None}


def valid_block_id(block_id: str) -> bool:
    """Base64 (standard alphabet, padded) of 1 to 64 bytes."""
    try:
        raw = base64.b64decode(block_id, validate=True)
    except (binascii.Error, ValueError):
        return False
    return 0 < len(raw) <= MAX_ID_BYTES


# ------------------------------------------------------------------ Put Block

def block_put(*, ref: ResourceRef, actor: Actor, block_id: str, read, length: int, md5: bytes | None = None,
              crc64: bytes | None = None, lease_id: uuid.UUID | None = None) -> bytes:
    """Stage ``length`` bytes read by ``read(n)`` as the uncommitted block
    ``block_id`` of the blob (which need not exist yet); their MD5.
    ``md5``/``crc64``: the transactional checksums the client sent, checked
    on the bytes."""
    assert ref.blob is not None
    validate_blob_name(ref.blob)
    if not valid_block_id(block_id):
        raise LeaseholdError("InvalidQueryParameterValue", field="blockid", value=block_id[:200],
                             detail={"query": True})
    record = functools.partial(_block_record, ref=ref, actor=actor, block_id=block_id, size=length,
                               lease_id=lease_id)
    _, digest = stage_and_record(record, refused_now=_refused_now(ref, block_id, lease_id), read=read,
                                 length=length, md5=md5, crc64=crc64)
    return digest


def stage_and_record(record, *, refused_now: bool, read, length: int, md5: bytes | None, crc64: bytes | None):
    """A streamed body's write (Put Block, Append Block): when a look without
    a lock finds it refused, ``record(staged=None)`` refuses (and records)
    with nothing staged; else the body is staged and checked, and
    ``record(staged=...)`` makes it part of the blob. Staged content is
    discarded on any failure. Answers (what ``record`` answered, the body's MD5)."""
    staged = None
    try:
        if refused_now:
            try:
                record(staged=None)  # refuses again, and records it
            except NeedsStaging:  # allowed after all: the state changed since the look
                pass
        staged, digest = stage_checked(read, length, md5=md5, crc64=crc64)
        result = record(staged=staged)
    except BaseException:
        if staged is not None:
            blob_content.discard(staged)
        raise
    blob_content.collect_after_request(written=length)
    return result, digest


def stage_checked(read, length: int, *, md5: bytes | None, crc64: bytes | None) -> tuple[uuid.UUID, bytes]:
    """A body staged as a version (blob_content.stage_stream) and its MD5,
    checked against the checksums sent with it (400 Md5Mismatch /
    Crc64Mismatch, nothing left staged); a body that ends short is 400
    IncompleteBody."""
    digest, crc = hashlib.md5(), Crc64() if crc64 else None
    try:
        staged = blob_content.stage_stream(read, length, hashes=[h for h in (digest, crc) if h is not None])
    except OSError:
        raise LeaseholdError("IncompleteBody") from None
    wrong = ("Md5Mismatch" if md5 and digest.digest() != md5
             else "Crc64Mismatch" if crc is not None and crc.digest() != crc64 else None)
    if wrong:
        blob_content.discard(staged)
        raise LeaseholdError(wrong)
    return staged, digest.digest()


class NeedsStaging(Exception):
    """A record transaction found an allowed write whose body was not staged."""


def _refused_now(ref: ResourceRef, block_id: str, lease_id) -> bool:
    """Whether Put Block's checks refuse it now, read without a lock: then
    nothing is staged (the record transaction checks again and records)."""
    try:
        container = container_must_exist(ref)
        blob = Blob.objects.defer("content").filter(container=container, name=ref.blob, snapshot="").first()
        if blob is not None:
            machine.check_access(blob.lease_record, clock.now(), lease_id=lease_id, write=True, noun=machine.BLOB)
            _block_blob_only(blob)
        elif lease_id is not None:
            return True
        _block_checks(container, ref, block_id)
    except LeaseholdError:
        return True
    return False


def _block_checks(container: Container, ref: ResourceRef, block_id: str) -> BlobBlock | None:
    """Block ids of one length per name, at most MAX_UNCOMMITTED blocks; the
    uncommitted block of this id, if any."""
    blocks = BlobBlock.objects.filter(container=container, name=ref.blob)
    other = blocks.exclude(block_id=block_id).values_list("block_id", flat=True).first()
    if other is not None and len(other) != len(block_id):
        raise LeaseholdError("InvalidBlobOrBlock")
    existing = blocks.filter(block_id=block_id).first()
    if existing is None and blocks.count() >= MAX_UNCOMMITTED:
        raise LeaseholdError("BlockCountExceedsLimit")
    return existing


def _block_blob_only(blob: Blob | None) -> None:
    if blob is not None and blob.blob_type != "BlockBlob":
        raise LeaseholdError("InvalidBlobType")


@committing_refusals
def _block_record(*, ref: ResourceRef, actor: Actor, block_id: str, size: int, lease_id, staged) -> None:
    """Put Block's one transaction: the lease checked, the staged version
    named as the block (replacing an uncommitted block of the same id)."""
    container = container_must_exist(ref)
    blob = blob_for_write(container, ref)
    now = dbclock.transaction_now()
    lease_for_write(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, operation="put-block")
    _block_blob_only(blob)
    existing = _block_checks(container, ref, block_id)
    if staged is None:
        raise NeedsStaging
    blob_content.make_live(staged, state=BlobContent.BLOCK)
    if existing is None:
        try:
            with transaction.atomic():  # a savepoint: the same id may be staged at once elsewhere (PostgreSQL)
                BlobBlock.objects.create(container=container, name=ref.blob, block_id=block_id, size=size,
                                         version=staged, staged_at=now)
            return
        except IntegrityError:
            existing = BlobBlock.objects.select_for_update().get(container=container, name=ref.blob,
                                                                 block_id=block_id)
    (BlobContent.objects.filter(id=existing.version, state=BlobContent.BLOCK)
     .update(state=BlobContent.RELEASED, released_at=now))
    existing.version, existing.size, existing.staged_at = staged, size, now
    existing.save(update_fields=["version", "size", "staged_at"])


def lease_for_write(blob: Blob | None, *, ref: ResourceRef, actor: Actor, now, lease_id, operation: str) -> None:
    """A write onto ``blob`` (None: no committed blob yet) under its lease;
    a refusal is recorded. A lease id for a blob that does not exist is
    412 LeaseNotPresentWithBlobOperation."""
    if blob is not None:
        check_access(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, write=True, operation=operation)
    elif lease_id is not None:
        refuse(LeaseholdError("LeaseNotPresentWithBlobOperation"), ref=ref, actor=actor, operation=operation,
               now=now, lease_id=lease_id, state_before="available", state_after="available")


# ------------------------------------------------------------------ Put Block List

def block_list_put(*, ref: ResourceRef, actor: Actor, entries: list[tuple[str, str]], content_type: str = "",
                   metadata: dict | None = None, properties: dict | None = None, content_md5: str = "",
                   lease_id: uuid.UUID | None = None, conditions: Conditions = NO_CONDITIONS) -> Blob:
    """Commit ``entries`` ((kind, block id), kind one of LIST_KINDS) as the
    blob's content; every other uncommitted block of the name is discarded."""
    assert ref.blob is not None
    validate_blob_name(ref.blob)
    metadata = metadata_rules.validate(metadata)
    if len(entries) > MAX_COMMITTED:
        raise LeaseholdError("BlockListTooLong")
    if any(kind not in LIST_KINDS or not valid_block_id(block_id) for kind, block_id in entries):
        raise LeaseholdError("InvalidBlockList")
    blob = _commit(ref=ref, actor=actor, entries=entries, content_type=content_type, metadata=metadata,
                   properties=properties, content_md5=content_md5, lease_id=lease_id, conditions=conditions)
    blob_content.collect_after_request()
    return blob


@committing_refusals
def _commit(*, ref: ResourceRef, actor: Actor, entries, content_type, metadata, properties, content_md5, lease_id,
            conditions: Conditions) -> Blob:
    container = container_must_exist(ref)
    blob = blob_for_write(container, ref)
    now = dbclock.transaction_now()  # read once the row is locked (services.lease_actions says why)
    write_checks(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, conditions=conditions,
                  operation="put-block-list")
    _block_blob_only(blob)
    uncommitted = {b: (size, v) for b, size, v in BlobBlock.objects.filter(container=container, name=ref.blob)
                   .values_list("block_id", "size", "version")}
    committed = {} if blob is None else committed_blocks(blob.content_version, as_dict=True)
    version, parts, newly = uuid.uuid4(), [], set()
    for kind, block_id in entries:
        found = uncommitted.get(block_id) if kind != "Committed" else None
        if found is not None:
            newly.add(found[1])
        elif kind != "Uncommitted":
            found = committed.get(block_id)
        if found is None:
            raise LeaseholdError("InvalidBlockList")
        parts.append((block_id, *found))
    BlobContent.objects.create(id=version, state=BlobContent.LIVE, size=sum(size for _, size, _ in parts),
                               chunk_bytes=0, staged_at=now)
    start = block_lists.write(version, parts)  # a row per distinct block, and the order
    newly_list = list(newly)
    for at in range(0, len(newly_list), 500):
        (BlobContent.objects.filter(id__in=newly_list[at:at + 500], state=BlobContent.BLOCK)
         .update(state=BlobContent.LIVE))
    blob_content.discard_blocks(container_id=container.pk, name=ref.blob or "", now=now)
    props = {k: v for k, v in (properties or {}).items() if v is not None}
    fields = {"content": b"", "content_version": version, "size": start, "content_md5": content_md5,
              "content_type": content_type or "application/octet-stream", "metadata": metadata or {},
              "content_encoding": props.get("content_encoding", ""),
              "content_language": props.get("content_language", ""),
              "content_disposition": props.get("content_disposition", ""),
              "cache_control": props.get("cache_control", ""), "blob_type": "BlockBlob", **COPY_CLEARED}
    return write_blob(container, blob, ref=ref, actor=actor, now=now, fields=fields, lease_id=lease_id,
                      conditions=conditions, operation="put-block-list")


def write_checks(blob: Blob | None, *, ref, actor, now, lease_id, conditions: Conditions, operation: str) -> None:
    """The lease, then the conditions, as Put Blob checks them."""
    lease_for_write(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, operation=operation)
    if blob is None:
        if conditions.if_match is not None:  # nothing to match
            raise LeaseholdError("ConditionNotMet")
        conditions.check_write(None, None)
        return
    if conditions.if_none_match == ["*"] and conditions.if_match is None:
        raise LeaseholdError("BlobAlreadyExists")
    conditions.check_write(blob.etag, blob.last_modified)


def write_blob(container: Container, blob: Blob | None, *, ref: ResourceRef, actor: Actor, now, fields: dict,
               lease_id, conditions: Conditions, operation: str) -> Blob:
    """In the caller's transaction, after its checks: create the blob or
    overwrite it with ``fields`` (its lease kept; an expired or broken one
    ended and recorded); the replaced content released."""
    if blob is None:
        stamp = now.replace(microsecond=0)
        try:
            with transaction.atomic():  # a savepoint: a concurrent create of the name may get there first
                return Blob.objects.create(container=container, name=ref.blob, etag=new_etag(), last_modified=stamp,
                                           created_at=stamp, lease_generation=last_generation(ref), **fields)
        except IntegrityError:
            # Another instance created the name meanwhile (PostgreSQL): the
            # later write wins, as on Azure, after this one's checks on it.
            blob = blob_for_write(container, ref)
            if blob is None:
                raise
            write_checks(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, conditions=conditions,
                          operation=operation)
    replaced = blob.content_version
    for name, value in fields.items():
        setattr(blob, name, value)
    changed = after_blob_write(blob, ref=ref, actor=actor, now=now)
    blob.save(update_fields=[*fields, *now_etag(blob, now), *changed])
    if replaced != blob.content_version:
        blob_content.release_unreferenced([replaced], now=now)
    return blob


# ------------------------------------------------------------------ Get Block List

def committed_blocks(version: uuid.UUID | None, *, as_dict: bool = False):
    """A content version's committed blocks in order: (id, size), or with
    ``as_dict`` id -> (size, block version). Content from Put Blob has none."""
    if version is None:
        return {} if as_dict else []
    if as_dict:
        return {b: (size, source) for b, size, source in
                BlobPart.objects.filter(version=version).values_list("block_id", "size", "source")}
    return block_lists.in_order(version)


@reading
def block_list_get(*, ref: ResourceRef, actor: Actor, lease_id: uuid.UUID | None = None, committed: bool = True,
                   uncommitted: bool = False) -> tuple[Blob | None, list, list]:
    """The blob (None: only uncommitted blocks), its committed and
    uncommitted blocks as asked; 404 BlobNotFound if it has neither."""
    container = container_must_exist(ref)
    blob = (Blob.objects.defer("content").select_related("container__account")
            .filter(container=container, name=ref.blob, snapshot=ref.snapshot).first())
    if blob is not None and lease_id is not None and not ref.snapshot:
        check_access(blob, ref=ref, actor=actor, now=dbclock.transaction_now(), lease_id=lease_id, write=False,
                      operation="get-block-list")
    blocks = BlobBlock.objects.filter(container=container, name=ref.blob).order_by("pk")
    if blob is None and (ref.snapshot or not blocks.exists()):
        raise LeaseholdError("BlobNotFound")
    return (blob, committed_blocks(blob.content_version) if blob is not None and committed else [],
            list(blocks.values_list("block_id", "size")) if uncommitted and not ref.snapshot else [])
