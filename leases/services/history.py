"""Appending history events, in the caller's transaction."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from leases.domain import fingerprints, ledger
from leases.domain.client_headers import USER_AGENT_MAX
from leases.domain.errors import LeaseholdError
from leases.models import LeaseEvent
from leases.storage import dbclock
from leases.storage.statements import RowInsert
from leases.storage.transactions import write_transaction
from leases.services.common import Actor, ResourceRef

EVENTS = RowInsert(LeaseEvent)  # the history's one INSERT, compiled once per connection


def event_start(*, ref: ResourceRef, actor: Actor, action: str | None, now: datetime | None, reason: str = "",
                 conn) -> list:
    """A history row's values known before the resource is read -- what, on
    what, by whom, and when if ``now`` is given -- prepared for the database,
    so that the lease hot path builds them before it takes the write lock, not
    while holding it (it sets ``occurred_at`` under the lock)."""
    return EVENTS.start(
        conn, occurred_at=now, action=(action or "")[:16], resource_type=ref.noun, account=ref.account,
        container=ref.container, blob=ref.blob or "", reason=reason[:500], **actor_columns(actor))


def actor_columns(actor: Actor) -> dict:
    """Who asked, as an event's columns: each value cut to its column's length, here only."""
    return {"actor": actor.name[:200], "via": actor.via, "request_id": actor.request_id,
            "client_request_id": actor.client_request_id[:1024], "remote_addr": actor.remote_addr[:64],
            "user_agent": actor.user_agent[:USER_AGENT_MAX]}


def event_finish(values: list, *, status: int, error: LeaseholdError | None = None, lease_id=None,
                  proposed_id=None, duration=None, break_period=None, lease_time=None, state_before="",
                  state_after="", generation=None, expires_at=None, cursor=None, conn=None,
                  saving: tuple | None = None) -> None:
    """Complete a row from ``event_start`` with the outcome and append it in
    the caller's transaction (on ``cursor`` of ``conn`` if given); ``saving``:
    (resource, changed columns), saved with it (statements.RowInsert.insert).
    The lease ids are kept as their fingerprints only."""
    conn = conn or transaction.get_connection()
    EVENTS.set(values, conn,
               # The choice's plain str for the driver. Django is untyped here: to mypy the members
               # are the str they are declared as, not enum members with a value.
               outcome=(LeaseEvent.Outcome.REFUSED.value if error  # type: ignore[attr-defined]
                        else LeaseEvent.Outcome.SUCCESS.value),  # type: ignore[attr-defined]
               status_code=error.status if error else status, error_code=error.code if error else "",
               lease_fingerprint=fingerprints.of(lease_id) or None,
               proposed_lease_fingerprint=fingerprints.of(proposed_id) or None, duration=duration, break_period=break_period,
               lease_time=lease_time, expires_at=expires_at, state_before=state_before, state_after=state_after,
               generation=generation)
    # The event's hash (leases/domain/ledger.py), from the values as sent, last: nothing changes after.
    EVENTS.set(values, conn, row_hash=ledger.event_hash([values[i] for i in EVENTS.positions(conn, ledger.HASHED)]))
    EVENTS.insert(values, conn=conn, cursor=cursor, saving=saving)


def record_refusal(error: LeaseholdError, values: list, **outcome) -> None:
    """Append a refused action's event (``values`` from ``event_start``) in
    the caller's transaction: the one way every service records a refusal.
    If it cannot be written (a full disk, ...) the database's error goes
    out, which the doors answer as a storage fault, with a note naming the
    refusal it hid."""
    try:
        event_finish(values, status=error.status, error=error, **outcome)
    except Exception as exc:  # the driver's own error on the hot path, Django's elsewhere
        exc.add_note(f"while recording the refusal {error.status} {error.code}, which is not in the history")
        raise


def record_event(*, ref: ResourceRef, actor: Actor, action: str, now: datetime, reason: str = "",
            **outcome) -> None:
    """Append one history event in the caller's transaction."""
    values = event_start(ref=ref, actor=actor, action=action, now=now, reason=reason,
                          conn=transaction.get_connection())
    event_finish(values, **outcome)


def history_tamper_refused(*, actor: Actor, attempt: str, status: int, target: str = "") -> None:
    """Record a refused attempt to change or delete lease history (a DELETE
    on the events API, a POST to an event's admin page): the database would
    refuse it anyway, and auditors want to know someone tried."""
    def write():
        LeaseEvent.objects.create(
            occurred_at=dbclock.transaction_now(), action=attempt[:16], outcome=LeaseEvent.Outcome.REFUSED,
            resource_type="history", account="", container="", blob="", status_code=status,
            error_code="HistoryIsAppendOnly", reason=target[:500], **actor_columns(actor))

    write_transaction(write)
