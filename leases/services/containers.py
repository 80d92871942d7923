"""Containers (and the accounts that hold them)."""

from __future__ import annotations

import base64
import uuid

from django.db import IntegrityError

from leases.storage import blob_content
from leases.domain import machine
from leases.domain import metadata as metadata_rules
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.models import Account, Blob, Container, FencingGeneration, new_etag
from leases.storage import dbclock
from leases.storage.transactions import write_transaction
from leases.services.access import check_access, committing_refusals, ended_by_delete, reading
from leases.services.common import NO_CONDITIONS, Actor, ResourceRef, load_resource, now_etag


CONTAINER_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


def validate_container_name(name: str) -> None:
    if name.startswith("$") and name in ("$root", "$logs", "$web"):
        return
    if not 3 <= len(name) <= 63:
        raise LeaseholdError("OutOfRangeInput", noun=machine.CONTAINER)
    if (set(name) - CONTAINER_NAME_CHARS or name[0] == "-" or name[-1] == "-" or "--" in name):
        raise LeaseholdError("InvalidResourceName", noun=machine.CONTAINER)


def container_create(*, account: str, name: str, metadata: dict | None = None, public_access: str = "",
                     actor: Actor | None = None) -> Container:
    validate_container_name(name)
    metadata = metadata_rules.validate(metadata)
    acct = Account.objects.filter(name=account).first()
    if acct is None:
        raise LeaseholdError("ResourceNotFound")
    def write() -> Container:
        now = dbclock.transaction_now().replace(microsecond=0)
        return Container.objects.create(account=acct, name=name, metadata=metadata or {},
                                        public_access=public_access, etag=new_etag(),
                                        last_modified=now, created_at=now,
                                        lease_generation=FencingGeneration.last(account, name))

    try:
        return write_transaction(write)
    except IntegrityError:
        raise LeaseholdError("ContainerAlreadyExists", noun=machine.CONTAINER) from None


@committing_refusals
def container_delete(*, ref: ResourceRef, actor: Actor, lease_id: uuid.UUID | None = None,
                     conditions: Conditions = NO_CONDITIONS) -> None:
    obj = load_resource(ref, for_update=True)
    now = dbclock.transaction_now()  # read once the row is locked (services.lease_actions says why)
    conditions.dates_only().check_write(obj.etag, obj.last_modified, noun=machine.CONTAINER)
    check_access(obj, ref=ref, actor=actor, now=now, lease_id=lease_id, write=True, operation="delete-container")
    ended_by_delete(obj, ref=ref, actor=actor, now=now)
    # Blob leases do not protect a container: its blobs go with it, and their leases end with it.
    for blob in Blob.objects.filter(container=obj, snapshot="").exclude(lease_state=machine.AVAILABLE).defer("content"):
        ended_by_delete(blob, ref=ResourceRef(ref.account, ref.container, blob.name), actor=actor, now=now)
    versions = set(Blob.objects.filter(container=obj, content_version__isnull=False)
                   .values_list("content_version", flat=True))
    blob_content.discard_blocks(container_id=obj.pk, name=None, now=now)  # its names' uncommitted blocks
    obj.delete()
    blob_content.release_unreferenced(versions, now=now)


@reading
def container_read(*, ref: ResourceRef, actor: Actor, lease_id: uuid.UUID | None = None) -> Container:
    """Get Container Properties/Metadata: an optional lease id must match."""
    obj = load_resource(ref, for_update=False)
    if lease_id is not None:
        check_access(obj, ref=ref, actor=actor, now=dbclock.transaction_now(),
                      lease_id=lease_id, write=False,
                      operation="read-container")
    return obj


@committing_refusals
def container_set_metadata(*, ref: ResourceRef, actor: Actor, metadata: dict,
                           lease_id: uuid.UUID | None = None,
                           conditions: Conditions = NO_CONDITIONS) -> Container:
    metadata = metadata_rules.validate(metadata)
    obj = load_resource(ref, for_update=True)
    now = dbclock.transaction_now()  # read once the row is locked (services.lease_actions says why)
    Conditions(if_modified_since=conditions.if_modified_since).check_write(
        obj.etag, obj.last_modified, noun=machine.CONTAINER)
    # A container lease does not guard container writes; an id, if given, must match.
    check_access(obj, ref=ref, actor=actor, now=now, lease_id=lease_id, write=False, operation="set-metadata")
    obj.metadata = metadata
    obj.save(update_fields=["metadata", *now_etag(obj, now)])
    return obj


# ------------------------------------------------------------------ accounts

def account_ensure(*, name: str, key1: str, key2: str = "") -> Account:
    base64.b64decode(key1, validate=True)  # refuse a key that cannot sign
    account, _ = Account.objects.update_or_create(name=name, defaults={"key1": key1, "key2": key2})
    return account
