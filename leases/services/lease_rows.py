"""The lease row as a lease action reads and writes it: loaded locked in one
compiled statement with the time of the decision, saved with its history
event, and the next fencing token of a new lease."""

from __future__ import annotations

from datetime import datetime, timedelta

from leases.domain import machine
from leases.domain.errors import LeaseholdError
from leases.models import Blob, Container, FencingGeneration
from leases.storage import dbclock, statements
from leases.services.common import ResourceRef, container_must_exist

_LOOKUPS = {Container: ("account__name", "name"),
            Blob: ("container__account__name", "container__name", "name", "snapshot")}
_DEFERRED = {Container: ("metadata",), Blob: ("content", "metadata")}  # a lease action reads neither


def load_for_lease(ref: ResourceRef, conn, cursor):
    """``load_resource(ref, for_update=True)`` in one compiled statement, and the
    time of the decision, read once the row is locked (on PostgreSQL by
    that same statement: leases.storage.dbclock): (row, time)."""
    also = dbclock.lock_columns(conn)
    if ref.blob is None:
        obj, extra = _locked(Container, (ref.account, ref.container), also, conn, cursor)
        if obj is None:
            raise LeaseholdError("ContainerNotFound", noun=machine.CONTAINER)
    else:
        obj, extra = _locked(Blob, (ref.account, ref.container, ref.blob, ref.snapshot), also, conn, cursor)
        if obj is None:
            container_must_exist(ref)
            raise LeaseholdError("BlobNotFound")
    return obj, dbclock.decided(extra, floor=_decided_at_least(obj))


def _decided_at_least(obj) -> datetime | None:
    """A time the last decisions on the row used (its last new lease, its
    last acquire or renew: expiry minus duration), which the next one may
    not precede, so a step back of the clock shortens no lease."""
    floor = obj.lease_acquired_at
    if obj.lease_expires_at is not None and obj.lease_duration is not None and obj.lease_duration > 0:
        renewed = obj.lease_expires_at - timedelta(seconds=obj.lease_duration)
        floor = renewed if floor is None or renewed > floor else floor
    return floor


def _locked(model, values: tuple, also: tuple[str, ...], conn, cursor):
    if also:
        return statements.load_locked(model, _LOOKUPS[model], values, deferred=_DEFERRED[model], also=also,
                                      conn=conn, cursor=cursor)
    return statements.load_locked(model, _LOOKUPS[model], values, deferred=_DEFERRED[model],
                                  conn=conn, cursor=cursor), ()


def lease_saved(obj: Container | Blob, record: machine.LeaseRecord, *extra: str) -> tuple | None:
    """``record`` set on ``obj``; what its history event saves with it
    (history._event_finish's ``saving``): ``obj.save(update_fields=[changed
    lease columns, *extra])`` as one compiled UPDATE; None if nothing changed."""
    columns = (*obj.set_lease_record(record), *extra)
    return (obj, columns) if columns else None


def next_generation(ref: ResourceRef, proposed: int, *, conn, cursor) -> int:
    """The fencing token of a new lease on ``ref``, recorded for its name in
    the lease transaction: one statement, run only when a lease is new (not
    on renew, change, release or break)."""
    return statements.next_generation(
        FencingGeneration, key=FencingGeneration.key_for(ref.account, ref.container, ref.blob),
        account=ref.account, container=ref.container, blob=ref.blob or "", proposed=proposed,
        conn=conn, cursor=cursor)
