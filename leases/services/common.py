"""What every service shares: the names of a resource, who asks, loading a row."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from leases.domain import guids, machine
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.models import Blob, Container, new_etag
from leases.storage import compiled_reads


NO_CONDITIONS = Conditions()

@dataclass(frozen=True)
class ResourceRef:
    """Names a container (``blob`` None) or a blob, by account and names."""

    account: str
    container: str
    blob: str | None = None
    snapshot: str = ""

    def __post_init__(self):
        # No such resource can exist (names are checked when created), and a
        # NUL is a 500 on PostgreSQL, whose text cannot hold one: refuse the
        # name before any query, on every door.
        if any("\x00" in part for part in (self.account, self.container, self.blob or "", self.snapshot)):
            raise LeaseholdError("InvalidResourceName", noun=self.noun)

    @property
    def noun(self) -> str:
        return machine.CONTAINER if self.blob is None else machine.BLOB


@dataclass(frozen=True)
class Actor:
    """Who asks, and from where: copied onto every history event."""

    name: str = ""  # "account:devstoreaccount1", "user:alice", "cli"
    via: str = ""  # azure | api | admin | cli
    request_id: str = field(default_factory=lambda: guids.request_id())  # looked up per call: tests seed it
    client_request_id: str = ""
    remote_addr: str = ""
    user_agent: str = ""


# ------------------------------------------------------------------ loading

def load_resource(ref: ResourceRef, *, for_update: bool, content: bool = True) -> Container | Blob:
    """The row named by ``ref``, or 404 ContainerNotFound / BlobNotFound;
    ``content=False`` leaves a blob's body (up to 64 MiB) unread."""
    if ref.blob is None:
        obj = compiled_reads.load_one(("container", for_update), lambda account, name: _containers(for_update).filter(
            account__name=account, name=name), ref.account, ref.container)
        if obj is None:
            raise LeaseholdError("ContainerNotFound", noun=machine.CONTAINER)
        return obj

    def blobs(account, container, name, snapshot):
        qs = Blob.objects.select_related("container__account")
        if not content:
            qs = qs.defer("content")
        if for_update:
            qs = qs.select_for_update(of=("self",))
        return qs.filter(container__account__name=account, container__name=container, name=name, snapshot=snapshot)

    obj = compiled_reads.load_one(("blob", for_update, content), blobs, ref.account, ref.container, ref.blob,
                              ref.snapshot)
    if obj is None:
        container_must_exist(ref)
        raise LeaseholdError("BlobNotFound")
    return obj


def _containers(for_update: bool):
    qs = Container.objects.select_related("account")
    return qs.select_for_update(of=("self",)) if for_update else qs


def container_must_exist(ref: ResourceRef) -> Container:
    container = compiled_reads.load_one(("container", False), lambda account, name: _containers(False).filter(
        account__name=account, name=name), ref.account, ref.container)
    if container is None:
        raise LeaseholdError("ContainerNotFound", noun=machine.CONTAINER)
    return container


def now_etag(obj, now: datetime) -> list[str]:
    obj.etag = new_etag()
    obj.last_modified = now.replace(microsecond=0)
    return ["etag", "last_modified"]
