"""Tenures kept current: each lease write that begins, changes or ends a lease's hold on a resource
writes its tenure (leases.models.Tenure) in the same transaction, on the same cursor, beside the
history event. The rule is the lease state before and after the write: a lease that was not holding
the resource and is holding it now begins a tenure; one that holds it before and after moves its
deadline (or, by a change, its fingerprint), but for a renewal, whose deadline its lease row holds
until the tenure ends (Tenure.latest_deadline); one that held it and no longer does ends it. A lease
that expired or finished breaking ended at its deadline; the first write that sees so records it."""

from __future__ import annotations

from datetime import datetime

from leases.domain import fingerprints, machine
from leases.models import Tenure
from leases.storage.tenure_rows import TenureRows
from leases.services.common import Actor, ResourceRef

ROWS = TenureRows(Tenure)
LOCKED = machine.LOCKED_STATES
_ENDS = {"release": Tenure.End.RELEASED, "break": Tenure.End.BROKEN, "ended-by-delete": Tenure.End.ENDED_BY_DELETE}


def after_write(*, ref: ResourceRef, actor: Actor, action: str, state_before: str, before: machine.LeaseRecord,
                after: machine.LeaseRecord, now: datetime, conn, cursor) -> None:
    """The tenure of the lease on ``ref`` after ``action`` took its record from ``before``
    (``state_before`` at ``now``) to ``after``, written in the caller's transaction."""
    state_after = machine.effective_state(after, now)
    if state_before in LOCKED and state_after in LOCKED:  # held before and after (the common case)
        _held_on(ref, action, before, after, now, conn, cursor)
        return
    if state_before in (machine.EXPIRED, machine.BROKEN):  # it ended by itself; recorded now
        ended = before.expires_at if state_before == machine.EXPIRED else before.break_at
        if ended is not None:  # a break at once ended it then and there
            _settle(ref, before, conn, cursor, ended_at=min(ended, now), end=state_before,
                    ended_by="", settled_by=action)
    if state_before in LOCKED:
        _settle(ref, before, conn, cursor, ended_at=now, end=_ENDS.get(action, Tenure.End.RELEASED),
                ended_by=actor.name[:200], settled_by=action)
    elif state_after in LOCKED:
        fp = fingerprints.of(after.lease_id)
        ROWS.insert(conn, cursor, resource_type=ref.noun, account=ref.account, container=ref.container,
                    blob=ref.blob or "", generation=after.generation, lease_fingerprint=fp, fingerprints=fp,
                    holder=actor.name[:200], holder_address=actor.remote_addr[:64],
                    client_request_id=actor.client_request_id[:1024], via=actor.via, began_by=action,
                    began_at=now, deadline=machine.deadline(after, now))


def _held_on(ref: ResourceRef, action: str, before: machine.LeaseRecord, after: machine.LeaseRecord,
             now: datetime, conn, cursor) -> None:
    columns: dict = {}
    if after.lease_id != before.lease_id:  # a change
        columns["fingerprints+"] = f" {fingerprints.of(after.lease_id)}@{now.isoformat()}"
    if after.state == machine.BREAKING and before.state != machine.BREAKING:
        columns["breaking_since"] = now
    deadline = machine.deadline(after, now)
    if deadline != machine.deadline(before, now) and (columns or action != "renew"):
        columns["deadline"] = deadline  # a renewal alone: its lease row holds it (Tenure.latest_deadline)
    if columns:
        ROWS.update_open(conn, cursor, account=ref.account, container=ref.container, blob=ref.blob or "",
                         generation=after.generation, **columns)


def _settle(ref: ResourceRef, before: machine.LeaseRecord, conn, cursor, **columns) -> None:
    if before.state == machine.LEASED:  # the deadline its renewals left in the lease row only
        columns["deadline"] = before.expires_at
    ROWS.update_open(conn, cursor, account=ref.account, container=ref.container, blob=ref.blob or "",
                     generation=before.generation, **columns)
