"""Reads and writes under a lease, and refusals whose history event must commit."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import NoReturn

from django.db import transaction

from leases.domain import machine
from leases.operations import metrics
from leases.services import tenures, wakeups
from leases.domain.errors import LeaseholdError
from leases.models import Blob
from leases.services.common import Actor, ResourceRef
from leases.services.history import event_start, record_event, record_refusal
from leases.storage import statements
from leases.storage.transactions import write_transaction


# ------------------------------------------------------------------ use under a lease

def check_access(obj, *, ref: ResourceRef, actor: Actor, now: datetime, lease_id, write: bool,
                  operation: str) -> None:
    """Raise the 412 a lease imposes on this read or write; a refusal caused
    by a lease is an event auditors want ("who tried to write while X held
    it"), recorded in the caller's transaction."""
    try:
        machine.check_access(obj.lease_record, now, lease_id=lease_id, write=write, noun=ref.noun)
    except LeaseholdError as err:
        state = obj.effective_lease_state(now)
        refuse(err, ref=ref, actor=actor, operation=operation, now=now, lease_id=lease_id, state_before=state,
               state_after=state, generation=obj.lease_generation)


def refuse(error: LeaseholdError, *, ref: ResourceRef, actor: Actor, operation: str, now: datetime,
           **outcome) -> NoReturn:
    """Record ``error`` in a savepoint of the caller's transaction (inside a
    write service; for a read, the only write transaction it opens) and
    raise it so that the service's transaction commits the event before
    the error goes out (``committing_refusals``, ``reading``)."""
    with transaction.atomic():
        values = event_start(ref=ref, actor=actor, action=operation, now=now, conn=transaction.get_connection())
        record_refusal(error, values, **outcome)
    raise _Recorded(error) from None


class _Recorded(Exception):
    """A refusal whose event must commit before the error goes out."""

    def __init__(self, error: LeaseholdError):
        self.error = error


def committing_refusals(fn):
    """Run ``fn`` as one write transaction (through the write queue); if it
    refuses with an event already written, commit that event and then raise
    the refusal."""
    def wrapper(*args, **kwargs):
        def write():
            try:
                return fn(*args, **kwargs), None
            except _Recorded as rec:
                return None, rec.error

        result, refusal = write_transaction(write)
        if refusal is not None:
            raise refusal
        return result
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def reading(fn):
    """A read takes no write lock; a refusal it records has committed by the
    time the error goes out."""
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _Recorded as rec:
            raise rec.error from None
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def after_blob_write(blob: Blob, *, ref: ResourceRef, actor: Actor, now: datetime) -> list[str]:
    """A blob write ends an expired or broken lease; record that it did."""
    before = blob.effective_lease_state(now)
    record = machine.after_write(blob.lease_record, now, noun=machine.BLOB)
    if record == blob.lease_record:
        return []
    record_event(ref=ref, actor=actor, action="ended-by-write", now=now, status=200, lease_id=blob.lease_id,
            state_before=before, state_after=machine.AVAILABLE, generation=blob.lease_generation)
    _tenure_after(blob, record, ref=ref, actor=actor, action="ended-by-write", state_before=before, now=now)
    transaction.on_commit(partial(metrics.lease_ended, ref.noun, before))
    return list(blob.set_lease_record(record))


def ended_by_delete(obj, *, ref: ResourceRef, actor: Actor, now: datetime) -> None:
    """A delete ends the lease of what it deletes (held, breaking, or one
    remembered after expiry or a break): record that it did, with the actor."""
    before = obj.effective_lease_state(now)
    if before == machine.AVAILABLE:
        return
    record_event(ref=ref, actor=actor, action="ended-by-delete", now=now, status=202, lease_id=obj.lease_id,
            state_before=before, state_after=machine.AVAILABLE, generation=obj.lease_generation)
    _tenure_after(obj, machine.LeaseRecord(generation=obj.lease_generation), ref=ref, actor=actor,
                  action="ended-by-delete", state_before=before, now=now)
    transaction.on_commit(partial(metrics.lease_ended, ref.noun, before))
    wakeups.at_delete(wakeups.key(ref.account, ref.container, ref.blob))  # its waiters learn it is gone


def _tenure_after(obj, record: machine.LeaseRecord, *, ref: ResourceRef, actor: Actor, action: str,
                  state_before: str, now: datetime) -> None:
    """The lease's tenure after a write or delete ended it (services.tenures), in this transaction."""
    conn = transaction.get_connection()
    with statements.driver_cursor(conn) as cursor:
        tenures.after_write(ref=ref, actor=actor, action=action, state_before=state_before,
                            before=obj.lease_record, after=record, now=now, conn=conn, cursor=cursor)
