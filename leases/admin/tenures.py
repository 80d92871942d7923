"""Tenures for auditors: one row per lease lifetime (leases.models.Tenure), read-only for everyone,
shown to whoever may read the lease history (view_leaseevent; no break right needed). Its list
accepts only the parameters it declares (decision 0039): its filters', and a resource's names, which
the resource pages' "tenures" links put in the URL."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from leases.domain import clock
from leases.models import Account, Tenure
from leases.models.tenure import end_q

from leases.admin import display
from leases.admin.common import ReadOnlyColumnsMixin
from leases.admin.filters import MAX_CHOICES, CheckedFilter
from leases.admin.paging import CappedCountPaginator
from leases.admin.queries import DeclaredQueryAdmin

READ_HISTORY = "leases.view_leaseevent"
ENDS = [("held", "held"), *Tenure.End.choices]


class TenureEndFilter(CheckedFilter):
    """How it ended, as known now (one that expired or finished breaking unrecorded, by its deadline)."""

    title = "end"
    parameter_name = "end"

    def lookups(self, request, model_admin):
        return ENDS

    def narrow(self, request, queryset, value):
        now = clock.now()
        return queryset.filter(end_q(value, now)) if value in dict(ENDS) else None

    def expected(self, request):
        return "An end is one of: " + ", ".join(v for v, _ in ENDS) + "."


class TenureAccountFilter(CheckedFilter):
    """By account name (index: account, began_at)."""

    title = "account"
    parameter_name = "account"

    def lookups(self, request, model_admin):
        names = list(Account.objects.order_by("name").values_list("name", flat=True)[:MAX_CHOICES])
        if self.value() and self.value() not in names:
            names.append(self.value())  # an account deleted since keeps its tenures
        return [(n, n) for n in names]

    def narrow(self, request, queryset, value):
        return queryset.filter(account=value)


@admin.register(Tenure)
class TenureAdmin(ReadOnlyColumnsMixin, DeclaredQueryAdmin):
    list_display = ("began", "resource", "holder_shown", "generation", "fingerprint", "deadline_shown",
                    "end_shown", "ended_by")
    list_filter = (TenureEndFilter, TenureAccountFilter)
    drilldown_lookups = ("container", "blob")  # with account: one resource's tenures
    sortable_by = ()
    paginator = CappedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    fieldsets = (
        ("Resource", {"fields": ("resource_type", "account", "container", "blob", "generation")}),
        ("Holder", {"fields": ("holder", "holder_address", "client_request_id", "via", "began_by", "began_at")}),
        ("Lease", {"fields": ("lease_fingerprint", "fingerprints", "deadline_shown", "breaking_since")}),
        ("End", {"fields": ("end_shown", "ended_at", "ended_by", "settled_by")}),
    )

    # The history's readers read tenures: no model permission of their own to hand out.
    def has_view_permission(self, request, obj=None):
        return request.user.is_active and request.user.has_perm(READ_HISTORY)

    def has_module_permission(self, request):
        return self.has_view_permission(request)

    def get_ordering(self, request):
        # Newest first within a resource or an account (their indexes end with began_at);
        # the whole list newest recorded first (the primary key), not a sort of every tenure.
        return ("-began_at", "-id") if request.GET.get("account") else ("-id",)

    @admin.display(description="began")
    def began(self, obj: Tenure) -> str:
        return display.timestamp(obj.began_at)

    @admin.display(description="resource")
    def resource(self, obj: Tenure) -> str:
        return display.path(obj.resource_path)

    @admin.display(description="holder")
    def holder_shown(self, obj: Tenure) -> str:
        return display.holder(obj.holder, obj.holder_address, obj.client_request_id)

    @admin.display(description="lease id fingerprint")
    def fingerprint(self, obj: Tenure) -> str:
        changed = len(obj.fingerprints.split()) - 1
        shown = display.fingerprint(obj.lease_fingerprint)
        return format_html("{} (+{} changed)", shown, changed) if changed else shown

    @admin.display(description="latest deadline")
    def deadline_shown(self, obj: Tenure) -> str:
        deadline = obj.latest_deadline
        return display.timestamp(deadline) if deadline else "none (infinite)"

    @admin.display(description="end")
    def end_shown(self, obj: Tenure) -> str:
        how, at = obj.end_at(clock.now())
        if not how:
            return "held"
        return format_html("{} {}", how, display.timestamp(at))
