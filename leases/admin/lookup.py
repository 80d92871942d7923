""""Who held it at T", and how that lease (or the one before T) ended, from the resource's tenures
(leases.models.Tenure): right for a resource deleted since, and whatever retention pruned of its
events. The event that recorded an end, while retained, adds its reason and a link."""

from __future__ import annotations

from datetime import datetime

from leases.domain import clock
from leases.models import LeaseEvent, Tenure
from leases.services.selectors import holder_at, tenure_at

HOW = {Tenure.End.RELEASED: "released", Tenure.End.BROKEN: "broken", Tenure.End.EXPIRED: "expired",
       Tenure.End.ENDED_BY_DELETE: "ended by a delete"}


def holder_lookup(*, account: str, container: str, blob: str, when: datetime) -> dict:
    """``held``: holder_at's answer (or None); ``ending``: how the lease held
    at ``when`` ended (or will), else how the one before ``when`` ended."""
    held = holder_at(account=account, container=container, blob=blob, when=when)
    tenure = tenure_at(account=account, container=container, blob=blob, when=when)
    return {"held": held, "ending": ending(tenure) if tenure is not None else None}


def ending(tenure: Tenure) -> dict:
    """How ``tenure`` ended, or until when it holds."""
    how, at = tenure.end_at(clock.now())
    if not how:
        return {"how": "still held, until", "at": at} if at is not None else {"how": "still held (infinite)", "at": None}
    said = HOW[Tenure.End(how)]
    if how == Tenure.End.BROKEN and not tenure.ended_by:
        said = "broken (break period ended)"
    if tenure.settled_by == "ended-by-write":
        said += ", then ended by a write"
    answer = {"how": said, "at": at}
    if tenure.ended_by:
        event = (LeaseEvent.objects.filter(account=tenure.account, container=tenure.container, blob=tenure.blob,
                                           occurred_at=tenure.ended_at, action=tenure.settled_by)
                 .only("id", "reason").first())
        answer.update(by=tenure.ended_by, reason=event.reason if event else "", event=event.pk if event else None)
    return answer
