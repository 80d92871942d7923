"""Holders: who holds how many leases now and since when (as Consul lists sessions per node), and
breaking all of one holder's leases at once, for a crashed node, through the same confirmation,
reason and service as any break. "Holds now" is a lease locked at the request's instant: leased (not
past its expiry) or breaking (not past its break end). The holder is the actor of the acquire that
started the lease (an account's key, an API token, an admin user) and the address it came from:
services sharing one account key are told apart by their addresses. In URLs a holder is ``name from
address`` (``name`` alone: every address). One grouped read per model, narrowed by the (lease_state,
expiry) and (lease_state, break time) indexes; no index leads with the holder column, so the holder
filter and this page read the held leases' rows (bench/admin_pages.py times them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, Min, Q
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.http import urlencode

from leases.domain import machine
from leases.models import Blob, Container, effective_state_q

from leases.admin import display
from leases.admin.common import lease_now
from leases.admin.forms import BreakForm

MAX_HOLDERS = 200  # rows on the page, most leases first
REFRESH_SECONDS = 30  # as the lists


def held_now_q(now) -> Q:
    return effective_state_q(machine.LEASED, now) | effective_state_q(machine.BREAKING, now)


FROM = " from "


def holder_key(name: str, address: str) -> str:
    """A holder as the URLs name it: ``account:x from 10.0.0.5``."""
    return f"{name}{FROM}{address}" if address else name


def _holds(key: str) -> str:
    name, sep, address = key.rpartition(FROM)
    return f"{name} holds from {address}" if sep else f"{key} holds"


def holder_q(key: str) -> Q:
    """The leases of the holder a URL names (``name`` alone: at any address)."""
    name, sep, address = key.rpartition(FROM)
    return Q(lease_holder=name, lease_holder_address=address) if sep else Q(lease_holder=key)


def holder_rows(model, now) -> list[dict]:
    rows = (model.objects.filter(held_now_q(now)).exclude(lease_holder="").order_by()
            .values("lease_holder", "lease_holder_address")
            .annotate(leases=Count("pk"), breaking=Count("pk", filter=Q(lease_state=machine.BREAKING)),
                      since=Min("lease_acquired_at"), latest=Max("lease_acquired_at"))
            .order_by("-leases", "lease_holder", "lease_holder_address")[:MAX_HOLDERS])
    return list(rows)


class HolderFilter(admin.SimpleListFilter):
    """Leases held now by one holder (exact, as the holders page links it).
    Its sidebar shows the chosen holder, a box to type one, and the way to
    the holders page: listing every holder here would read every held lease
    on every page of the list."""

    title = "holder"
    parameter_name = "holder"
    template = "admin/leases/holder_filter.html"

    def lookups(self, request, model_admin):
        chosen = self.value()
        return [(chosen, chosen)] if chosen else []

    def has_output(self):
        return True

    def queryset(self, request, queryset):
        if self.value() is None:
            return queryset
        return queryset.filter(held_now_q(lease_now(request)), holder_q(self.value()))


if TYPE_CHECKING:  # the admin the mixin is mixed into, with the lease actions it uses (perform_break)
    from leases.admin.lease_actions import LeaseActionsMixin as _LeaseAdmin
else:
    _LeaseAdmin = object


class HolderViewsMixin(_LeaseAdmin):
    """For the container and blob admins: ``holders/`` (both kinds of lease
    on one page) and ``holders/break/?holder=…`` (this admin's kind)."""

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        return [
            path("holders/", self.admin_site.admin_view(self.holders_view), name="{}_{}_holders".format(*info)),
            path("holders/break/", self.admin_site.admin_view(self.holder_break_view),
                 name="{}_{}_holder_break".format(*info)),
            *super().get_urls(),
        ]

    def holders_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        now = lease_now(request)
        holders: dict[str, dict] = {}
        for model in (Blob, Container):
            name = model._meta.model_name
            if not request.user.has_perm(f"leases.view_{name}"):
                continue
            model_admin = self.admin_site.get_model_admin(model)  # public since Django 5.0
            for row in holder_rows(model, now):
                key = holder_key(row["lease_holder"], row["lease_holder_address"])
                entry = holders.setdefault(key, {"holder": row["lease_holder"], "key": key,
                                                 "address": row["lease_holder_address"], "kinds": {}})
                query = urlencode({"holder": key})
                entry["kinds"][name] = {
                    **row, "since_html": display.timestamp(row["since"]),
                    "latest_html": display.timestamp(row["latest"]),
                    "list_url": reverse(f"admin:leases_{name}_changelist", current_app=self.admin_site.name)
                    + "?" + query,
                    "break_url": (reverse(f"admin:leases_{name}_holder_break", current_app=self.admin_site.name)
                                  + "?" + query) if model_admin.has_break_permission(request) else None,
                }
        rows = sorted(holders.values(), key=lambda e: (-sum(k["leases"] for k in e["kinds"].values()), e["key"]))
        for entry in rows:
            entry["blob"], entry["container"] = entry["kinds"].get("blob"), entry["kinds"].get("container")
            starts = [kind["since"] for kind in entry["kinds"].values() if kind["since"] is not None]
            entry["since_html"] = display.timestamp(min(starts) if starts else None)
        context = {
            **self.admin_site.each_context(request),
            "title": "Lease holders",
            "opts": self.opts,
            "rows": rows,
            "max_holders": MAX_HOLDERS,
            "show_blobs": request.user.has_perm("leases.view_blob"),
            "show_containers": request.user.has_perm("leases.view_container"),
            "lease_as_of": display.timestamp(now),
            "refresh_seconds": REFRESH_SECONDS,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/leases/holders.html", context)

    def holder_break_view(self, request):
        """Every lease of this kind that one holder holds now, on the break
        confirmation; posting it breaks those the operator saw (generations)."""
        holder = request.GET.get("holder", "")
        holders_url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_holders",
                              current_app=self.admin_site.name)
        if not self.has_break_permission(request):
            return self.refuse_to(request, holders_url, f"You may not break {self.opts.verbose_name} leases: that "
                                  f"needs the “Can break {self.opts.verbose_name} lease” permission.")
        if not holder:
            return self.refuse_to(request, holders_url, "Choose a holder whose leases to break.")
        form = BreakForm(request.POST if request.method == "POST" else None)
        if form.is_valid():
            self.perform_break(request, form)
            return HttpResponseRedirect(holders_url)
        from leases.admin.lease_actions import MAX_BREAK

        objects = list(self.get_queryset(request).filter(held_now_q(lease_now(request)), holder_q(holder))
                       .order_by("pk")[: MAX_BREAK + 1])
        if len(objects) > MAX_BREAK:
            messages.warning(request, f"{holder} holds more than {MAX_BREAK} {self.opts.verbose_name} leases: this "
                             f"confirmation breaks the first {MAX_BREAK}; repeat it for the rest.")
            objects = objects[:MAX_BREAK]
        if not objects:
            return self.refuse_to(request, holders_url, f"{holder} holds no {self.opts.verbose_name} lease now.")
        return self.confirmation(request, "break", objects, form, cancel_url=holders_url,
                                 heading=f"Break every {self.opts.verbose_name} lease that {_holds(holder)}")

    def refuse_to(self, request, url: str, message: str):
        self.message_user(request, message, messages.ERROR)
        return HttpResponseRedirect(url)
