"""Copy Blob within this server: complete when answered (x-ms-copy-status
success), sharing the source's content (a version never changes, so a copy
is one row, however large)."""

from __future__ import annotations

import uuid

from leases.domain import metadata as metadata_rules
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.models import Blob
from leases.storage import dbclock
from leases.services.access import check_access, committing_refusals
from leases.services.appends import APPEND_BLOB, clone_list
from leases.services.blobs import blob_for_write, validate_blob_name
from leases.services.blocks import lease_for_write, write_checks, write_blob
from leases.services.common import NO_CONDITIONS, Actor, ResourceRef, container_must_exist


def blob_copy(*, ref: ResourceRef, actor: Actor, source: ResourceRef, source_url: str, metadata: dict | None = None,
              lease_id: uuid.UUID | None = None, source_lease_id: uuid.UUID | None = None,
              conditions: Conditions = NO_CONDITIONS) -> Blob:
    """Copy ``source`` (a blob or snapshot of the same account) onto
    ``ref``, under the destination's lease and, if ``source_lease_id`` is
    given, the source's; ``metadata`` None keeps the source's."""
    assert ref.blob is not None
    validate_blob_name(ref.blob)
    metadata = None if metadata is None else metadata_rules.validate(metadata)
    return _copy(ref=ref, actor=actor, source=source, source_url=source_url, metadata=metadata, lease_id=lease_id,
                 source_lease_id=source_lease_id, conditions=conditions)


@committing_refusals
def _copy(*, ref: ResourceRef, actor: Actor, source: ResourceRef, source_url: str, metadata, lease_id,
          source_lease_id, conditions: Conditions) -> Blob:
    container = container_must_exist(ref)
    blob = blob_for_write(container, ref)
    now = dbclock.transaction_now()  # read once the row is locked (services.lease_actions says why)
    src = (Blob.objects.select_related("container__account")
           .filter(container__account__name=source.account, container__name=source.container, name=source.blob,
                   snapshot=source.snapshot).first())
    if src is None:
        raise LeaseholdError("CannotVerifyCopySource")
    if source_lease_id is not None and not source.snapshot:
        check_access(src, ref=source, actor=actor, now=now, lease_id=source_lease_id, write=False,
                      operation="copy-source")
    write_checks(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, conditions=conditions,
                  operation="copy-blob")
    version = src.content_version
    if src.blob_type == APPEND_BLOB:  # a list of its own, which appends to either never touch in the other
        version = clone_list(src.content_version, size=src.size, now=now)
    fields = {"content": src.content, "content_version": version, "size": src.size, "blob_type": src.blob_type,
              "content_md5": src.content_md5, "content_type": src.content_type,
              "content_encoding": src.content_encoding, "content_language": src.content_language,
              "content_disposition": src.content_disposition, "cache_control": src.cache_control,
              "metadata": src.metadata if metadata is None else metadata,
              "copy_id": str(uuid.uuid4()), "copy_source": source_url[:2048],
              "copy_progress": f"{src.size}/{src.size}", "copy_completed_at": now}
    return write_blob(container, blob, ref=ref, actor=actor, now=now, fields=fields, lease_id=lease_id,
                      conditions=conditions, operation="copy-blob")


def copy_abort(*, ref: ResourceRef, actor: Actor, copy_id: str, lease_id: uuid.UUID | None = None) -> None:
    """Abort Copy: every copy here completed when it was answered, so there
    is never one to abort: 409 NoPendingCopyOperation, after the checks
    Azure makes first (the blob exists, its lease)."""
    _abort(ref=ref, actor=actor, lease_id=lease_id)


@committing_refusals
def _abort(*, ref: ResourceRef, actor: Actor, lease_id) -> None:
    container = container_must_exist(ref)
    blob = blob_for_write(container, ref)
    if blob is None:
        raise LeaseholdError("BlobNotFound")
    lease_for_write(blob, ref=ref, actor=actor, now=dbclock.transaction_now(), lease_id=lease_id,
                     operation="abort-copy")
    raise LeaseholdError("NoPendingCopyOperation")
