"""Blobs: create or overwrite, read, metadata, delete, snapshot."""

from __future__ import annotations

import base64
import hashlib
import uuid

from django.db import IntegrityError, transaction

from leases.storage import blob_content, compiled_reads
from leases.domain import clock, machine, names
from leases.domain import metadata as metadata_rules
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.models import Blob, Container, FencingGeneration, new_etag
from leases.storage import dbclock
from leases.services.access import after_blob_write, check_access, committing_refusals, ended_by_delete, reading
from leases.services.common import NO_CONDITIONS, Actor, ResourceRef, container_must_exist, load_resource, now_etag


def validate_blob_name(name: str) -> None:
    names.validate_blob_name(name)


# -- blobs

def blob_put(*, ref: ResourceRef, actor: Actor, content: bytes, content_type: str = "",
             metadata: dict | None = None, properties: dict | None = None, lease_id: uuid.UUID | None = None,
             conditions: Conditions = NO_CONDITIONS) -> Blob:
    """Put Blob: create or overwrite. The lease is checked before the
    conditions, so an If-None-Match: * upload onto a leased blob is 412
    LeaseIdMissing as on Azure, not 409. Content over one chunk is first
    staged in pieces, each its own short write transaction, then made
    visible by one short transaction (leases.storage.blob_content); an upload the
    blob's state refuses stages nothing, or has its pieces discarded."""
    assert ref.blob is not None  # the doors route only a blob's URL here
    validate_blob_name(ref.blob)
    metadata = metadata_rules.validate(metadata)
    md5 = base64.b64encode(hashlib.md5(content).digest()).decode()  # before, not under, the writer lock
    args = dict(ref=ref, actor=actor, content=content, md5=md5, content_type=content_type, metadata=metadata,
                properties=properties, lease_id=lease_id, conditions=conditions)
    staged = None
    try:
        if not blob_content.inline(len(content)) and not _put_refused_now(ref, lease_id, conditions):
            staged = blob_content.stage(content)
        try:
            blob = _blob_put_swap(**args, staged=staged)
        except _NeedsStaging:  # allowed after all: the state changed since the look
            staged = blob_content.stage(content)
            blob = _blob_put_swap(**args, staged=staged)
    except BaseException:
        if staged is not None:
            blob_content.discard(staged)
        raise
    blob_content.collect_after_request(written=len(content))
    return blob


class _NeedsStaging(Exception):
    """The swap found a large upload allowed whose content was not staged."""


def _put_refused_now(ref: ResourceRef, lease_id: uuid.UUID | None, conditions: Conditions) -> bool:
    """Whether Put Blob's checks refuse it now, read without any lock: then
    its content is not staged (the swap's transaction checks again, and
    records the refusal)."""
    now = clock.now()
    blob = (Blob.objects.defer("content", "metadata")
            .filter(container__account__name=ref.account, container__name=ref.container, name=ref.blob,
                    snapshot="").first())
    try:
        if blob is None:
            if conditions.if_match is not None:
                return True
            conditions.check_write(None, None)
            container_must_exist(ref)
            return False
        machine.check_access(blob.lease_record, now, lease_id=lease_id, write=True, noun=machine.BLOB)
        if conditions.if_none_match == ["*"] and conditions.if_match is None:
            return True
        conditions.check_write(blob.etag, blob.last_modified)
    except LeaseholdError:
        return True
    return False


@committing_refusals
def _blob_put_swap(*, ref: ResourceRef, actor: Actor, content: bytes, md5: str, content_type: str,
                   metadata: dict, properties: dict | None, lease_id: uuid.UUID | None, conditions: Conditions,
                   staged) -> Blob:
    """Put Blob's one transaction: load the blob row locked, check the lease
    and conditions, write the content (inline) or point at the ``staged``
    version, append the history event."""
    container = container_must_exist(ref)
    blob = blob_for_write(container, ref)
    now = dbclock.transaction_now()  # read once the row is locked (services.lease_actions says why)
    props = {k: v for k, v in (properties or {}).items() if v is not None}
    large = not blob_content.inline(len(content))
    fields = {"content": b"" if large else content, "content_version": staged, "size": len(content),
              "content_md5": md5,
              "content_type": content_type or "application/octet-stream", "metadata": metadata or {},
              "content_encoding": props.get("content_encoding", ""),
              "content_language": props.get("content_language", ""),
              "content_disposition": props.get("content_disposition", ""),
              "cache_control": props.get("cache_control", ""),
              # a write after a Copy Blob clears its copy properties (as on Azure)
              "copy_id": "", "copy_source": "", "copy_progress": "", "copy_completed_at": None,
              "blob_type": "BlockBlob"}
    if blob is None:
        if conditions.if_match is not None:  # nothing to match
            raise LeaseholdError("ConditionNotMet")
        conditions.check_write(None, None)
        if large and staged is None:
            raise _NeedsStaging
        generation = last_generation(ref)
        stamp = now.replace(microsecond=0)
        try:
            with transaction.atomic():  # a savepoint: a concurrent create of the name may get there first
                created = Blob.objects.create(container=container, name=ref.blob, etag=new_etag(),
                                              last_modified=stamp, created_at=stamp, lease_generation=generation,
                                              **fields)
            if staged is not None:
                blob_content.make_live(staged)
            return created
        except IntegrityError:
            # Another server instance created the name since the read above
            # (PostgreSQL; SQLite's write lock excludes that). Its row has
            # committed, so a new read sees it: as on Azure, the later write
            # wins, and this one goes on as an overwrite.
            blob = blob_for_write(container, ref)
            if blob is None:  # the container went instead
                container_must_exist(ref)
                raise
    check_access(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, write=True, operation="put-blob")
    if conditions.if_none_match == ["*"] and conditions.if_match is None:
        raise LeaseholdError("BlobAlreadyExists")
    conditions.check_write(blob.etag, blob.last_modified)
    if large and staged is None:
        raise _NeedsStaging
    replaced = blob.content_version
    for name, value in fields.items():
        setattr(blob, name, value)
    changed = after_blob_write(blob, ref=ref, actor=actor, now=now)
    blob.save(update_fields=[*fields, *now_etag(blob, now), *changed])
    if staged is not None:
        blob_content.make_live(staged)
    blob_content.release_unreferenced([replaced], now=now)
    return blob


def blob_for_write(container: Container, ref: ResourceRef) -> Blob | None:
    """The base blob, row-locked (PostgreSQL; SQLite's write transaction
    already excludes other writers) so that lease columns saved from this read
    cannot overwrite a lease granted meanwhile; its old content is not read."""
    return compiled_reads.load_one("blob for write", lambda container_id, name: Blob.objects.select_for_update().defer(
        "content").filter(container_id=container_id, name=name, snapshot=""), container.pk, ref.blob or "")


def last_generation(ref: ResourceRef) -> int:
    """A re-created blob continues its name's fencing-token sequence, so a
    token is never handed out twice for the same name."""
    return FencingGeneration.last(ref.account, ref.container, ref.blob)


@reading
def blob_read(*, ref: ResourceRef, actor: Actor, lease_id: uuid.UUID | None = None,
              content: bool = True) -> Blob:
    """Get Blob / Get Blob Properties: an optional lease id must match.
    ``content=False`` when only properties are answered."""
    obj = load_resource(ref, for_update=False, content=content)
    if lease_id is not None:
        check_access(obj, ref=ref, actor=actor, now=dbclock.transaction_now(), lease_id=lease_id,
                      write=False, operation="read-blob")
    return obj


@committing_refusals
def blob_set_metadata(*, ref: ResourceRef, actor: Actor, metadata: dict,
                      lease_id: uuid.UUID | None = None,
                      conditions: Conditions = NO_CONDITIONS) -> Blob:
    metadata = metadata_rules.validate(metadata)
    if ref.snapshot:
        raise LeaseholdError("InvalidQueryParameterValue", field="snapshot", value=ref.snapshot)
    blob = load_resource(ref, for_update=True)
    now = dbclock.transaction_now()  # read once the row is locked (services.lease_actions says why)
    conditions.check_write(blob.etag, blob.last_modified)
    check_access(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, write=True, operation="set-metadata")
    blob.metadata = metadata
    changed = after_blob_write(blob, ref=ref, actor=actor, now=now)
    blob.save(update_fields=["metadata", *now_etag(blob, now), *changed])
    return blob


@committing_refusals
def blob_delete(*, ref: ResourceRef, actor: Actor, lease_id: uuid.UUID | None = None,
                delete_snapshots: str | None = None,
                conditions: Conditions = NO_CONDITIONS) -> None:
    if delete_snapshots not in (None, "include", "only"):
        raise LeaseholdError("InvalidHeaderValue", field="delete_snapshots", value=delete_snapshots)
    blob = load_resource(ref, for_update=True, content=False)
    now = dbclock.transaction_now()  # read once the row is locked (services.lease_actions says why)
    conditions.check_write(blob.etag, blob.last_modified)
    if ref.snapshot:  # a snapshot carries no lease of its own
        blob.delete()
        blob_content.release_unreferenced([blob.content_version], now=now)
        return
    snapshots = Blob.objects.filter(container_id=blob.container_id, name=blob.name).exclude(snapshot="")
    if delete_snapshots is None and snapshots.exists():
        raise LeaseholdError("SnapshotsPresent")
    check_access(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, write=True, operation="delete-blob")
    versions = {blob.content_version, *snapshots.values_list("content_version", flat=True)}
    snapshots.delete()
    if delete_snapshots != "only":
        ended_by_delete(blob, ref=ref, actor=actor, now=now)
        blob.delete()
        blob_content.discard_blocks(container_id=blob.container_id, name=blob.name, now=now)  # uncommitted ones
    blob_content.release_unreferenced(versions, now=now)


@committing_refusals
def blob_snapshot(*, ref: ResourceRef, actor: Actor, metadata: dict | None = None, lease_id: uuid.UUID | None = None,
                  conditions: Conditions = NO_CONDITIONS) -> Blob:
    metadata = None if metadata is None else metadata_rules.validate(metadata)
    blob = load_resource(ref, for_update=True)
    now = dbclock.transaction_now()  # read once the row is locked (services.lease_actions says why)
    conditions.check_write(blob.etag, blob.last_modified)
    if lease_id is not None:
        check_access(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, write=False, operation="snapshot")
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}0Z"
    # A large content's chunks are shared, not copied: a version never changes.
    snap = Blob(container_id=blob.container_id, name=blob.name, snapshot=stamp, content=blob.content,
                content_version=blob.content_version, size=blob.size, content_type=blob.content_type, content_encoding=blob.content_encoding,
                content_language=blob.content_language, content_disposition=blob.content_disposition,
                cache_control=blob.cache_control, content_md5=blob.content_md5,
                metadata=blob.metadata if metadata is None else metadata,
                etag=blob.etag, last_modified=blob.last_modified, created_at=blob.created_at,
                blob_type=blob.blob_type, copy_id=blob.copy_id, copy_source=blob.copy_source,
                copy_progress=blob.copy_progress, copy_completed_at=blob.copy_completed_at)
    snap.save(force_insert=True)
    snap.container = blob.container
    return snap
