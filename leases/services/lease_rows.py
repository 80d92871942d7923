"""The lease row as a lease action reads and writes it: loaded locked in one
compiled statement with the time of the decision, saved with its history
event, and the next fencing token of a new lease."""

from __future__ import annotations

from datetime import datetime, timedelta

from leases.domain import machine
from leases.domain.errors import LeaseholdError
from leases.models import Account, Blob, Container, FencingGeneration
from leases.storage import dbclock, statements
from leases.storage.compiled_reads import values_one
from leases.services.common import ResourceRef, container_must_exist

_LOOKUPS = {Container: ("account__name", "name"),
            Blob: ("container__account__name", "container__name", "name", "snapshot")}
_DEFERRED = {Container: ("metadata",), Blob: ("content", "metadata")}  # a lease action reads neither
# The account's keys, joined as the lookups join the account (a signing key checked in the write).
_KEYS = {Container: ("account__key1", "account__key2"),
         Blob: ("container__account__key1", "container__account__key2")}


def load_for_lease(ref: ResourceRef, conn, cursor, signed_with: str | None = None):
    """``load_resource(ref, for_update=True)`` in one compiled statement, and the
    time of the decision, read once the row is locked (on PostgreSQL by
    that same statement: leases.storage.dbclock): (row, time).
    ``signed_with``: the key that signed the request, which must still be
    one of the account's keys, read by that same statement (KeyGone if not,
    before anything else is decided)."""
    also = dbclock.lock_columns(conn)
    related = _KEYS[Blob if ref.blob is not None else Container] if signed_with is not None else ()
    if ref.blob is None:
        obj, extra = _locked(Container, (ref.account, ref.container), also, related, conn, cursor)
    else:
        obj, extra = _locked(Blob, (ref.account, ref.container, ref.blob, ref.snapshot), also, related, conn, cursor)
    if signed_with is not None:
        if obj is None:
            key_still_valid(ref.account, signed_with, conn=conn)
        elif signed_with not in extra[:2]:
            raise KeyGone(tuple(k for k in extra[:2] if k))
        extra = extra[2:]
    if obj is None:
        if ref.blob is None:
            raise LeaseholdError("ContainerNotFound", noun=machine.CONTAINER)
        container_must_exist(ref)
        raise LeaseholdError("BlobNotFound")
    return obj, dbclock.decided(extra, floor=_decided_at_least(obj))


class KeyGone(Exception):
    """The key that signed a request is no longer one of its account's keys
    in the write's snapshot (``keys``: the account's keys there; None: no
    such account): the write is refused and rolled back, nothing recorded;
    the door answers it as it answers a key that does not sign."""

    def __init__(self, keys: tuple[str, ...] | None):
        super().__init__("the signing key is no longer one of the account's keys")
        self.keys = keys


def key_still_valid(account: str, signed_with: str, *, conn) -> None:
    """KeyGone unless ``signed_with`` is one of ``account``'s keys, read in
    conn's transaction (a write refused before it read its row)."""
    row = values_one("write-account-keys", _account_keys_query, account, conn=conn)
    if row is None:
        raise KeyGone(None)
    if signed_with not in row:
        raise KeyGone(tuple(k for k in row if k))


def _account_keys_query(name: str):
    return Account.objects.filter(name=name).values_list("key1", "key2")


def _decided_at_least(obj) -> datetime | None:
    """A time the last decisions on the row used (its last new lease, its
    last acquire or renew: expiry minus duration), which the next one may
    not precede, so a step back of the clock shortens no lease."""
    floor = obj.lease_acquired_at
    if obj.lease_expires_at is not None and obj.lease_duration is not None and obj.lease_duration > 0:
        renewed = obj.lease_expires_at - timedelta(seconds=obj.lease_duration)
        floor = renewed if floor is None or renewed > floor else floor
    return floor


def _locked(model, values: tuple, also: tuple[str, ...], related: tuple[str, ...], conn, cursor):
    if also or related:
        return statements.load_locked(model, _LOOKUPS[model], values, deferred=_DEFERRED[model], also=also,
                                      related=related, conn=conn, cursor=cursor)
    return statements.load_locked(model, _LOOKUPS[model], values, deferred=_DEFERRED[model],
                                  conn=conn, cursor=cursor), ()


def lease_saved(obj: Container | Blob, record: machine.LeaseRecord, *extra: str) -> tuple | None:
    """``record`` set on ``obj``; what its history event saves with it
    (history.event_finish's ``saving``): ``obj.save(update_fields=[changed
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
