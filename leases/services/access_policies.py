"""A container's stored access policies (Set/Get Container ACL): the signed
identifiers a service SAS may name (leases/auth/sas.py), and the container's
public access level, which Set Container ACL sets with them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from leases.domain import machine
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.models import Container, StoredAccessPolicy
from leases.storage import dbclock
from leases.services.access import check_access, committing_refusals, reading
from leases.services.common import NO_CONDITIONS, Actor, ResourceRef, load_resource, now_etag

PUBLIC_ACCESS = ("", "container", "blob")


@dataclass(frozen=True)
class SignedIdentifier:
    identifier: str
    start: datetime | None
    expiry: datetime | None
    permission: str


@committing_refusals
def container_set_acl(*, ref: ResourceRef, actor: Actor, identifiers: list[SignedIdentifier],
                      public_access: str = "", lease_id: uuid.UUID | None = None,
                      conditions: Conditions = NO_CONDITIONS) -> Container:
    """Replace the container's stored access policies (at most five, each
    identifier once) and public access level; a SAS naming a policy no
    longer there is refused from the next request on."""
    if len(identifiers) > StoredAccessPolicy.MAX_PER_CONTAINER:
        raise LeaseholdError("InvalidXmlDocument", message="XML specified is not syntactically valid: "
                             f"more than {StoredAccessPolicy.MAX_PER_CONTAINER} signed identifiers.")
    names = [item.identifier for item in identifiers]
    if len(set(names)) != len(names) or any(not 1 <= len(name) <= 64 for name in names):
        raise LeaseholdError("InvalidXmlDocument", message="XML specified is not syntactically valid: "
                             "each signed identifier's Id must be unique and 1 to 64 characters.")
    if public_access not in PUBLIC_ACCESS:
        raise LeaseholdError("InvalidHeaderValue", field="x-ms-blob-public-access", value=public_access[:200])
    obj = load_resource(ref, for_update=True)
    now = dbclock.transaction_now()  # read once the row is locked (services.lease_actions says why)
    conditions.dates_only().check_write(obj.etag, obj.last_modified, noun=machine.CONTAINER)
    # A container lease does not guard its ACL; an id, if given, must match.
    check_access(obj, ref=ref, actor=actor, now=now, lease_id=lease_id, write=False, operation="set-acl")
    StoredAccessPolicy.objects.filter(container=obj).delete()
    StoredAccessPolicy.objects.bulk_create(
        StoredAccessPolicy(container=obj, identifier=item.identifier, start=item.start, expiry=item.expiry,
                           permission=item.permission) for item in identifiers)
    obj.public_access = public_access
    obj.save(update_fields=["public_access", *now_etag(obj, now)])
    return obj


@reading
def container_get_acl(*, ref: ResourceRef, actor: Actor, lease_id: uuid.UUID | None = None
                      ) -> tuple[Container, list[StoredAccessPolicy]]:
    obj = load_resource(ref, for_update=False)
    if lease_id is not None:
        check_access(obj, ref=ref, actor=actor, now=dbclock.transaction_now(), lease_id=lease_id, write=False,
                      operation="read-acl")
    return obj, list(StoredAccessPolicy.objects.filter(container=obj).order_by("id"))


def stored_policy(account: str, container: str, identifier: str) -> StoredAccessPolicy | None:
    """The policy a service SAS names (``si``), or None: read on every such
    request, so that a removed policy stops its SAS at once."""
    return (StoredAccessPolicy.objects
            .filter(container__account__name=account, container__name=container, identifier=identifier)
            .only("start", "expiry", "permission").first())
