""""Who held it at T", and how that lease (or the one before T) ended, from
the history alone: it works for a resource deleted since, whose events
outlive it. A few seeks of the (account, container, blob, occurred_at)
index, and at most ``SCAN`` events after T."""

from __future__ import annotations

from datetime import datetime

from leases.domain import clock, machine
from leases.models import LeaseEvent
from leases.services.selectors import HOLDING_ACTIONS, holder_at

SCAN = 200  # events after T read to find the end; a lease renewed more often says "still held as of …"


def holder_lookup(*, account: str, container: str, blob: str, when: datetime) -> dict:
    """``held``: holder_at's answer (or None); ``ending``: how the lease held
    at ``when`` ended (or will), else how the one before ``when`` ended."""
    events = LeaseEvent.objects.filter(account=account, container=container, blob=blob,
                                       outcome=LeaseEvent.Outcome.SUCCESS, action__in=HOLDING_ACTIONS)
    held = holder_at(account=account, container=container, blob=blob, when=when)
    if held is not None:
        later = events.filter(occurred_at__gt=when).order_by("occurred_at", "id")[:SCAN]
        return {"held": held, "ending": _end_after(held, list(later))}
    last = events.filter(occurred_at__lte=when).order_by("-occurred_at", "-id").first()
    return {"held": None, "ending": _end_of(last) if last else None}


def _end_after(held: dict, later: list[LeaseEvent]) -> dict:
    state, deadline = held["state"], held["until"]
    for event in later:
        if deadline is not None and event.occurred_at >= deadline:
            break  # it had ended by its deadline before this event
        if event.generation != held["generation"] and event.action == "acquire":
            break
        if event.action == "release":
            return _said("released", event.occurred_at, event)
        if event.action == "ended-by-write":
            return _said("ended by a write", event.occurred_at, event)
        if event.action == "ended-by-delete":
            return _said("ended by a delete", event.occurred_at, event)
        if event.action == "break" and event.state_after == machine.BROKEN:
            return _said("broken", event.occurred_at, event)
        state, deadline = event.state_after or state, event.expires_at
    else:
        if len(later) == SCAN:
            return {"how": "still held after the events read", "at": later[-1].occurred_at}
    if deadline is None:
        return {"how": "still held (infinite)", "at": None}
    if deadline > clock.now():
        return {"how": "still held, until", "at": deadline}
    return {"how": "broken (break period ended)" if state == machine.BREAKING else "expired", "at": deadline}


def _end_of(last: LeaseEvent) -> dict | None:
    """How the lease of the last event before T had ended by T."""
    if last.action == "release":
        return _said("released", last.occurred_at, last)
    if last.action == "ended-by-write":
        return _said("ended by a write", last.occurred_at, last)
    if last.action == "ended-by-delete":
        return _said("ended by a delete", last.occurred_at, last)
    if last.state_after == machine.BROKEN:
        return _said("broken", last.occurred_at, last)
    if last.state_after == machine.BREAKING and last.expires_at:
        return {"how": "broken (break period ended)", "at": last.expires_at}
    if last.state_after == machine.LEASED and last.expires_at:
        return {"how": "expired", "at": last.expires_at}
    return None


def _said(how: str, at: datetime, event: LeaseEvent) -> dict:
    return {"how": how, "at": at, "by": event.actor, "reason": event.reason, "event": event.pk}
