"""The lease history: read-only for everyone, filterable, exportable.

Events are append-only (the model refuses updates, and so does a database
trigger); the admin refuses add, change and delete to superusers as well.
"""

from __future__ import annotations

import csv
from datetime import UTC, datetime

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpResponseRedirect, StreamingHttpResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from leases.keyset import keyset_rows
from leases.models import Blob, Container, LeaseEvent

from . import display
from .common import ReadOnlyColumnsMixin, history_url, lease_id_q
from .dashboard import dashboard
from .drilldown import date_drilldown
from .filters import ActionFilter, ActorFilter, EventAccountFilter, EventContainerFilter
from .paging import CappedCountPaginator

CSV_COLUMNS = ("occurred_at", "action", "outcome", "resource_type", "account", "container", "blob", "lease_id",
               "proposed_lease_id", "duration", "break_period", "lease_time", "expires_at", "state_before",
               "state_after", "generation", "status_code", "error_code", "actor", "via", "reason", "request_id",
               "client_request_id", "remote_addr", "user_agent")


@admin.register(LeaseEvent)
class LeaseEventAdmin(ReadOnlyColumnsMixin, admin.ModelAdmin):
    list_display = ("when", "action", "outcome_badge", "resource", "who", "short_lease_id", "generation",
                    "transition", "status", "reason")
    list_filter = (ActionFilter, "outcome", ActorFilter, EventAccountFilter, EventContainerFilter)
    # The admin turns a year/month/day into an indexed occurred_at range; the
    # change list template replaces Django's drill-down links, which would
    # run MIN+MAX and a DISTINCT date per level over the table.
    date_hierarchy = "occurred_at"
    search_fields = ("lease_id", "request_id", "client_request_id", "blob", "container")
    search_help_text = ("A lease id (all of it or its first 4+ digits), a request id, a client request id, "
                        "or a resource: container or blob name, or account/container/blob as listed.")
    sortable_by = ("when",)  # newest first by default; the other columns have no index to sort by
    paginator = CappedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    fieldsets = (
        (None, {"fields": ("when", "action", "outcome_badge", "status", "reason")}),
        ("Resource", {"fields": ("resource_type", "account", "container", "blob")}),
        ("Lease", {"fields": ("full_lease_id", "proposed_lease_id", "transition", "generation", "duration",
                              "break_period", "lease_time", "deadline")}),
        ("Who", {"fields": ("actor", "via", "remote_addr", "user_agent", "request_id", "client_request_id")}),
    )

    # ------------------------------------------------------------ search

    def get_search_results(self, request, queryset, search_term):
        """Exact matches only (ids are prefixes too), each answered by an
        index: a substring or short prefix would sort most of the table."""
        term = search_term.strip()
        if not term:
            return queryset, False
        query = Q(request_id=term) | Q(client_request_id=term) | Q(blob=term) | Q(container=term)
        if (by_id := lease_id_q("lease_id", term)) is not None:
            query |= by_id
        parts = term.split("/", 2)
        if len(parts) > 1:  # "account/container[/blob]", as the resource column shows it
            query |= Q(account=parts[0], container=parts[1], blob=parts[2] if len(parts) == 3 else "")
        return queryset.filter(query), False

    # ------------------------------------------------------------ columns

    @admin.display(description="when", ordering="occurred_at")
    def when(self, obj):
        return display.timestamp(obj.occurred_at)

    @admin.display(description="outcome")
    def outcome_badge(self, obj):
        return format_html('<span class="lease-badge lease-{}">{}</span>', obj.outcome, obj.outcome)

    @admin.display(description="resource")
    def resource(self, obj):
        return obj.resource_path

    @admin.display(description="actor")
    def who(self, obj):
        if not obj.via:
            return obj.actor or display.EMPTY
        return format_html('{} <span class="lease-quiet">via {}</span>', obj.actor or display.EMPTY, obj.via)

    @admin.display(description="state")
    def transition(self, obj):
        if obj.state_before == obj.state_after:
            return obj.state_after or display.EMPTY
        return format_html("{} → {}", obj.state_before or display.EMPTY, obj.state_after)

    @admin.display(description="status")
    def status(self, obj):
        return f"{obj.status_code} {obj.error_code}".strip()

    @admin.display(description="deadline after")
    def deadline(self, obj):
        return display.timestamp(obj.expires_at)

    # ------------------------------------------------------------ views

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        return [
            path("export.csv", self.admin_site.admin_view(self.export_view), name="{}_{}_export".format(*info)),
            path("dashboard/", self.admin_site.admin_view(self.dashboard_view), name="leases_dashboard"),
            *super().get_urls(),
        ]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context["resource_url"] = self.resource_url(obj)
            context["history_url"] = history_url(obj.account, obj.container, obj.blob,
                                                 current_app=self.admin_site.name)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def resource_url(self, event) -> str | None:
        """The page of the event's container or blob, if it still exists."""
        if event.resource_type == "blob":
            model, rows = Blob, Blob.objects.filter(container__account__name=event.account,
                                                    container__name=event.container, name=event.blob, snapshot="")
        else:
            model, rows = Container, Container.objects.filter(account__name=event.account, name=event.container)
        pk = rows.values_list("pk", flat=True).first()
        if pk is None:
            return None
        return reverse(f"admin:leases_{model._meta.model_name}_change", args=[pk], current_app=self.admin_site.name)

    def dashboard_view(self, request):
        return dashboard(request, self.admin_site)

    def changelist_view(self, request, extra_context=None):
        extra_context = {"title": "Lease history", **(extra_context or {})}
        response = super().changelist_view(request, extra_context)
        context = getattr(response, "context_data", None)
        if context and "cl" in context:
            cl = context["cl"]
            context["date_drilldown"] = date_drilldown(cl)
            context["export_url"] = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_export",
                                            current_app=self.admin_site.name) + cl.get_query_string()
        return response

    def export_view(self, request):
        """The filtered list (same filters, search and dates as the page),
        streamed as CSV, newest first."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            cl = self.get_changelist_instance(request)
        except IncorrectLookupParameters:  # as the list itself answers a bad filter
            changelist = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
                                 current_app=self.admin_site.name)
            return HttpResponseRedirect(changelist + "?e=1")
        # In short keyset-paged reads, not one cursor held for the whole
        # download (leases/keyset.py).
        rows = keyset_rows(cl.queryset, CSV_COLUMNS)
        writer = csv.writer(_Echo())
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        return StreamingHttpResponse(
            (writer.writerow(row) for row in _csv_rows(rows)), content_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": f'attachment; filename="lease-history-{stamp}.csv"'})


class _Echo:
    """A file-like object whose write returns the line, for streaming."""

    def write(self, value):
        return value


def _csv_rows(rows):
    yield CSV_COLUMNS
    for row in rows:
        yield tuple(_cell(value) for value in row)


def _cell(value):
    """ISO 8601 UTC times; text that a spreadsheet would run as a formula
    (client request ids and reasons come from outside) is quoted."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return "" if value is None else value
