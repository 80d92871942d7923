"""HTML fragments shared by the lease pages. Times are rendered in the server's time zone with
seconds and re-rendered in the operator's by the script in ``admin/base_site.html``. A countdown
carries the seconds left when the page was rendered, so the browser's clock never has to agree with
the server's (nor with a test's moved clock)."""

from __future__ import annotations

import math
from datetime import datetime

from django.utils import timezone
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe

from leases.domain import fingerprints, machine

EMPTY = "–"


def row_state(obj) -> str:
    """A list row's effective lease state at the request's instant (the
    ``lease_as_of`` annotation of the lease admins' querysets)."""
    return machine.effective_state(obj.lease_record, obj.lease_as_of)


def badge(state: str) -> str:
    return format_html('<span class="lease-badge lease-{}">{}</span>', state, state)


def timestamp(when: datetime | None) -> str:
    if when is None:
        return EMPTY
    local = timezone.localtime(when)
    return format_html('<time datetime="{}" data-local>{}</time>', when.isoformat(),
                       local.strftime("%Y-%m-%d %H:%M:%S %Z"))


def seconds_text(seconds: float) -> str:
    """Whole seconds rounded up, as ``machine.seconds_left`` answers clients."""
    return f"{max(0, math.ceil(seconds))} s"


def countdown(deadline: datetime, now: datetime, then: str) -> str:
    """Seconds until ``deadline``, counting down in the browser; at zero the
    row's badge turns to ``then``."""
    left = (deadline - now).total_seconds()
    return format_html('<span class="lease-countdown" data-remaining="{}" data-then="{}">{}</span>',
                       f"{left:.3f}", then, seconds_text(left))


def time_left(obj, state: str, now: datetime) -> str:
    end = machine.deadline(obj.lease_record, now)
    if state == machine.LEASED:
        if end is None:
            return mark_safe('<span class="lease-quiet">never (infinite)</span>')
        return countdown(end, now, machine.EXPIRED)
    if state == machine.BREAKING:
        assert end is not None  # breaking at ``now``: the break period's end
        return format_html("breaks in {}", countdown(end, now, machine.BROKEN))
    return EMPTY


def duration_type(obj) -> str:
    """Fixed or infinite, from the stored duration (kept while expired)."""
    if obj.lease_duration is None:
        return EMPTY
    if obj.lease_duration == machine.INFINITE:
        return "infinite"
    return f"fixed, {obj.lease_duration} s"


def fingerprint(value: str | None) -> str:
    """A lease id's fingerprint (leases/domain/fingerprints.py): pages show no id."""
    if not value:
        return EMPTY
    return format_html('<code class="lease-id" title="fingerprint of the lease id">{}</code>', value)


def lease_fingerprint(obj) -> str:
    """The fingerprint of a container's or blob's current lease id."""
    return fingerprint(fingerprints.of(obj.lease_id))


def holder(actor: str, address: str, client_request_id: str) -> str:
    """Who took the lease, from where, with which client request id."""
    if not actor:
        return EMPTY
    lines = [format_html("<strong>{}</strong>", actor)]
    if address:
        lines.append(format_html('<span class="lease-quiet" title="address">{}</span>', address))
    if client_request_id:
        lines.append(format_html('<span class="lease-quiet" title="client request id">{}</span>',
                                 client_request_id))
    return mark_safe("<br>".join(lines))  # each line is escaped above


def path(resource_path: str) -> str:
    """account/container/blob with a line-break chance after each slash, so
    a long path wraps at its parts instead of widening a list."""
    return mark_safe("/<wbr>".join(conditional_escape(part) for part in resource_path.split("/")))
