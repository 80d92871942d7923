"""The dashboard on the admin index: how many leases are in each state, which end within the minute,
and the latest breaks and refusals. The admin index is Django's own view, so the index template
loads this panel from its own URL (and refreshes it); without script it is a page of its own. Every
number is an indexed read: state counts stop at the list pages' cap."""

from __future__ import annotations

from datetime import timedelta

from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import reverse

from leases.domain import machine
from leases.models import Blob, Container, LeaseEvent, LedgerBlock, LedgerCheck, effective_state_q

from leases.admin import display
from leases.admin.common import lease_now
from leases.admin.paging import CappedCountPaginator

SOON = timedelta(minutes=1)
ROWS = 10


def dashboard(request, admin_site):
    user = request.user
    models = [m for m in (Container, Blob) if user.has_perm(f"leases.view_{m._meta.model_name}")]
    see_history = user.has_perm("leases.view_leaseevent")
    if not models and not see_history:
        raise PermissionDenied
    now = lease_now(request)
    context: dict = {
        "title": "Lease dashboard",
        "now": display.timestamp(now),
        "counts": [_state_counts(model, now, admin_site) for model in models],
        "ending": _ending_soon(models, now, admin_site),
    }
    if see_history:
        events = LeaseEvent.objects.all()
        context["breaks"] = _with_paths(events.filter(action="break", outcome=LeaseEvent.Outcome.SUCCESS)[:ROWS])
        context["refusals"] = _with_paths(events.filter(outcome=LeaseEvent.Outcome.REFUSED)[:ROWS])
        context["history_url"] = reverse("admin:leases_leaseevent_changelist", current_app=admin_site.name)
        context["ledger"] = _ledger()
    if request.GET.get("embed"):
        return TemplateResponse(request, "admin/leases/dashboard_panel.html", context)
    return TemplateResponse(request, "admin/leases/dashboard.html", {**admin_site.each_context(request), **context})


def _ledger() -> dict:
    """The newest sealed block and the last verification (leasehold_ledger verify): two indexed reads."""
    block = LedgerBlock.objects.order_by("-position").first()
    check = LedgerCheck.objects.order_by("-id").first()
    return {"block": block, "sealed_at": block and display.timestamp(block.sealed_at),
            "check": check, "checked_at": check and display.timestamp(check.finished_at)}


def _changelist(model, admin_site) -> str:
    return reverse(f"admin:leases_{model._meta.model_name}_changelist", current_app=admin_site.name)


def _state_counts(model, now, admin_site) -> dict:
    url = _changelist(model, admin_site)
    cap = CappedCountPaginator.CAP
    states = []
    for state in machine.STATES:
        seen = model.objects.filter(effective_state_q(state, now)).order_by()[: cap + 1].count()
        states.append({"state": state, "badge": display.badge(state), "url": f"{url}?state={state}",
                       "count": f"{cap:,}+" if seen > cap else f"{seen:,}"})
    return {"name": model._meta.verbose_name_plural, "url": url, "states": states}


def _ending_soon(models, now, admin_site) -> list[dict]:
    """Leases that expire or finish breaking within the next minute, by
    deadline, from the (state, expiry) and (state, break time) indexes."""
    rows = []
    for model in models:
        related = "container__account" if model is Blob else "account"
        base = model.objects.select_related(related).defer(*(["content"] if model is Blob else []))
        expiring = base.filter(lease_state=machine.LEASED, lease_expires_at__gt=now,
                               lease_expires_at__lte=now + SOON).order_by("lease_expires_at")[:ROWS]
        breaking = base.filter(lease_state=machine.BREAKING, lease_break_at__gt=now,
                               lease_break_at__lte=now + SOON).order_by("lease_break_at")[:ROWS]
        for obj, deadline, then in [*((o, o.lease_expires_at, machine.EXPIRED) for o in expiring),
                                    *((o, o.lease_break_at, machine.BROKEN) for o in breaking)]:
            state = obj.effective_lease_state(now)
            rows.append({"obj": obj, "kind": model._meta.verbose_name, "deadline": deadline,
                         "badge": display.badge(state), "left": display.countdown(deadline, now, then),
                         "holder": obj.lease_holder, "lease_id": display.lease_fingerprint(obj),
                         "url": reverse(f"admin:leases_{model._meta.model_name}_change", args=[obj.pk],
                                        current_app=admin_site.name)})
    return sorted(rows, key=lambda row: row["deadline"])[:ROWS]


def _with_paths(events) -> list:
    """Each event with its resource path as HTML that wraps at the slashes."""
    rows = list(events)
    for event in rows:
        event.path_html = display.path(event.resource_path)
    return rows
