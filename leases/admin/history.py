"""The lease history: read-only for everyone, filterable, exportable. Events are append-only (the
model refuses updates, and so does a database trigger); the admin refuses add, change and delete to
superusers as well."""

from __future__ import annotations

import csv
import operator
from datetime import UTC, datetime
from functools import reduce

from django.contrib import admin, messages
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpResponseRedirect, StreamingHttpResponse
from django.urls import path, reverse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode

from leases.domain import spreadsheet
from leases.services.keyset import keyset_rows
from leases.models import Blob, Container, LeaseEvent

from leases.admin import display
from leases.admin.common import ReadOnlyColumnsMixin, admin_actor, history_url, lease_fingerprint_q, tenures_url
from leases.admin.dashboard import dashboard
from leases.admin.drilldown import date_drilldown
from leases.admin.chips import filter_chips
from leases.admin.filters import ActionFilter, ActorFilter, EventAccountFilter, EventContainerFilter, OutcomeFilter
from leases.admin.forms import HolderAtForm
from leases.admin.lookup import holder_lookup
from leases.admin.paging import CappedCountPaginator
from leases.admin.queries import (DeclaredQueryAdmin, QueryRefused, bounded_pieces, bounded_reads, matching,
                                  refused_page)

SUBSTRING_WINDOW = 50_000  # events a substring search reads at most (see get_search_results)

CSV_COLUMNS = ("occurred_at", "action", "outcome", "resource_type", "account", "container", "blob",
               "lease_fingerprint", "proposed_lease_fingerprint", "duration", "break_period", "lease_time", "expires_at", "state_before",
               "state_after", "generation", "status_code", "error_code", "actor", "via", "reason", "request_id",
               "client_request_id", "remote_addr", "user_agent")


@admin.register(LeaseEvent)
class LeaseEventAdmin(ReadOnlyColumnsMixin, DeclaredQueryAdmin):
    # Two facts in some columns (action and outcome, lease id and
    # generation), so that the list fits 1366 px with both sidebars open.
    list_display = ("when", "action_and_outcome", "resource", "who", "lease_and_generation", "transition",
                    "status", "reason")
    list_filter = (ActionFilter, OutcomeFilter, ActorFilter, EventAccountFilter, EventContainerFilter)
    # The admin turns a year/month/day into an indexed occurred_at range; the
    # change list template replaces Django's drill-down links, which would
    # run MIN+MAX and a DISTINCT date per level over the table.
    date_hierarchy = "occurred_at"
    # A resource's history (common.history_url, the "only this" links) narrows by its blob as well.
    drilldown_lookups = ("blob",)
    search_fields = ("lease_fingerprint", "request_id", "client_request_id", "blob", "container", "actor", "reason")
    search_help_text = (
        "A lease id's fingerprint or the full id, a request id, a client request id, or "
        "account/container/blob as listed: in all history. Otherwise part of a resource, actor or reason (any "
        f"case, every word): in the newest {SUBSTRING_WINDOW:,} events of the chosen day and filters (choose a "
        "day to search older ones).")
    sortable_by = ("when",)  # newest first by default; the other columns have no index to sort by
    paginator = CappedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    fieldsets = (
        (None, {"fields": ("when", "action", "outcome_badge", "status", "reason")}),
        ("Resource", {"fields": ("resource_type", "account", "container", "blob")}),
        ("Lease", {"fields": ("lease_fingerprint_shown", "proposed_fingerprint_shown", "transition", "generation", "duration",
                              "break_period", "lease_time", "deadline")}),
        ("Who", {"fields": ("actor", "via", "remote_addr", "user_agent", "request_id", "client_request_id")}),
    )

    # ------------------------------------------------------------ search

    def get_search_results(self, request, queryset, search_term):
        """Exact terms first: ids and a resource path, by their indexes over
        all history, the list then narrowed by the columns they matched in
        alone (``matching``). Only if nothing matches exactly, every word as part of
        a resource, actor or reason, by a bounded scan: the newest
        ``SUBSTRING_WINDOW`` event ids of the filtered list, a rowid range
        (one seek finds its top), so a rare word costs what a common one
        does at a million events."""
        term = search_term.strip()
        if not term:
            return queryset, False
        exact = [Q(request_id=term), Q(client_request_id=term), Q(blob=term), Q(container=term)]
        if (by_id := lease_fingerprint_q(term)) is not None:
            exact.append(by_id)
        parts = term.split("/", 2)
        if len(parts) > 1:  # "account/container[/blob]", as the resource column shows it
            exact.append(Q(account=parts[0], container=parts[1], blob=parts[2] if len(parts) == 3 else ""))
        if found := matching(queryset, exact):
            return queryset.filter(reduce(operator.or_, found)), False
        top = queryset.order_by("-id").values_list("id", flat=True).first()
        if top is None:
            return queryset.none(), False
        words = Q()
        for word in dict.fromkeys(term.split()):  # a word repeated narrows nothing more
            words &= (Q(blob__icontains=word) | Q(container__icontains=word) | Q(account__icontains=word)
                      | Q(actor__icontains=word) | Q(reason__icontains=word))
        return queryset.filter(words, id__gt=top - SUBSTRING_WINDOW, id__lte=top), False

    # ------------------------------------------------------------ columns

    @admin.display(description="when", ordering="occurred_at")
    def when(self, obj):
        return display.timestamp(obj.occurred_at)

    @admin.display(description="outcome")
    def outcome_badge(self, obj):
        return format_html('<span class="lease-badge lease-{}">{}</span>', obj.outcome, obj.outcome)

    @admin.display(description="action")
    def action_and_outcome(self, obj):
        return format_html('{}<br><span class="lease-badge lease-{}">{}</span>', obj.action, obj.outcome,
                           obj.outcome)

    @admin.display(description="lease")
    def lease_and_generation(self, obj):
        if not obj.lease_fingerprint:
            return display.EMPTY
        generation = "" if obj.generation is None else f"gen. {obj.generation}"
        return format_html('{}<br><span class="lease-quiet">{}</span>', display.fingerprint(obj.lease_fingerprint),
                           generation)

    @admin.display(description="lease id fingerprint")
    def lease_fingerprint_shown(self, obj):
        return display.fingerprint(obj.lease_fingerprint)

    @admin.display(description="proposed lease id fingerprint")
    def proposed_fingerprint_shown(self, obj):
        return display.fingerprint(obj.proposed_lease_fingerprint)

    @admin.display(description="resource")
    def resource(self, obj):
        """The resource's page (through ``resource/``, which finds it or says
        it was deleted) and a link narrowing this list to it."""
        query = urlencode({"account": obj.account, "container": obj.container, "blob": obj.blob})
        return format_html('<a href="{}?{}">{}</a> <a href="?{}" class="lease-quiet" title="Only this {}">'
                           'only this</a>', self.tool_url("resource"), query, display.path(obj.resource_path),
                           query, obj.resource_type)

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
        # Recorded with the event (machine.deadline of the record it left), not computed here.
        return display.timestamp(obj.expires_at)

    # ------------------------------------------------------------ views

    def _refuse_history_change(self, request, attempt: str, object_id=None):
        """A POST that would change or delete events: 403, recorded."""
        from leases.services import history_tamper_refused

        history_tamper_refused(actor=admin_actor(request), attempt=attempt, status=403,
                               target=f"POST {request.path}" + (f" (event {object_id})" if object_id else ""))
        raise PermissionDenied

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method == "POST":
            self._refuse_history_change(request, "history-change", object_id)
        return super().changeform_view(request, object_id, form_url, extra_context)

    def delete_view(self, request, object_id, extra_context=None):
        if request.method == "POST":
            self._refuse_history_change(request, "history-delete", object_id)
        return super().delete_view(request, object_id, extra_context)

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        return [
            path("export.csv", self.admin_site.admin_view(self.export_view), name="{}_{}_export".format(*info)),
            path("dashboard/", self.admin_site.admin_view(self.dashboard_view), name="leases_dashboard"),
            path("resource/", self.admin_site.admin_view(self.resource_view), name="{}_{}_resource".format(*info)),
            path("holder/", self.admin_site.admin_view(self.holder_view), name="{}_{}_holder".format(*info)),
            *super().get_urls(),
        ]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context["resource_url"] = self.resource_url(obj)
            context["holder_url"] = self.tool_url("holder") + "?" + urlencode(
                {"account": obj.account, "container": obj.container, "blob": obj.blob})
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

    def tool_url(self, name: str) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_{name}", current_app=self.admin_site.name)

    def resource_view(self, request):
        """An event's resource: its page if it still exists, else its
        history's "who held it" page, which needs no resource row."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        account, container, blob = (request.GET.get(k, "") for k in ("account", "container", "blob"))
        if not (account and container):
            self.message_user(request, "Say which resource: account and container (and blob).", messages.ERROR)
            return HttpResponseRedirect(self.tool_url("changelist"))
        kind = "blob" if blob else "container"
        fake = LeaseEvent(resource_type=kind, account=account, container=container, blob=blob)
        url = self.resource_url(fake)
        if url and request.user.has_perm(f"leases.view_{kind}"):
            return HttpResponseRedirect(url)
        if url is None:
            self.message_user(request, f"The {kind} {fake.resource_path} no longer exists; its lease history "
                              "remains.", messages.WARNING)
        return HttpResponseRedirect(self.tool_url("holder") + "?" + urlencode(
            {"account": account, "container": container, "blob": blob}))

    def holder_view(self, request):
        """A resource's lease history summary and "who held it at T", from
        the events alone: for a blob or container deleted since."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        account, container, blob = (request.GET.get(k, "") for k in ("account", "container", "blob"))
        form = HolderAtForm(request.GET if "held_at" in request.GET else None)
        events = LeaseEvent.objects.filter(account=account, container=container, blob=blob)
        fake = LeaseEvent(resource_type="blob" if blob else "container", account=account, container=container,
                          blob=blob)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Lease history of {fake.resource_path}",
            "opts": self.opts,
            "resource": fake,
            "resource_url": self.resource_url(fake) if account and container else None,
            "history": events[:20],
            "history_url": history_url(account, container, blob, current_app=self.admin_site.name),
            "tenures_url": tenures_url(account, container, blob, current_app=self.admin_site.name),
            "holder_form": form,
            "holder_keep": [("account", account), ("container", container), ("blob", blob)],
            "lookup": holder_lookup(account=account, container=container, blob=blob,
                                    when=form.cleaned_data["held_at"]) if form.is_valid() else None,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/leases/leaseevent/holder.html", context)

    def dashboard_view(self, request):
        return dashboard(request, self.admin_site)

    def changelist_view(self, request, extra_context=None):
        extra_context = {"title": "Lease history", **(extra_context or {})}
        return super().changelist_view(request, extra_context)

    def changelist_context(self, request, cl, context):
        context["date_drilldown"] = date_drilldown(cl)
        context["filter_chips"] = filter_chips(cl)
        context["export_url"] = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_export",
                                        current_app=self.admin_site.name) + cl.get_query_string()

    def export_view(self, request):
        """The filtered list (same filters, search and dates as the page),
        streamed as CSV, newest first."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            self.check_query(request)
            with bounded_reads(request=request):
                cl = self.get_changelist_instance(request)
        except (DisallowedModelAdminLookup, QueryRefused) as refused:
            return refused_page(request, self, str(refused), 400)
        except IncorrectLookupParameters:  # as the list itself answers a bad filter
            changelist = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
                                 current_app=self.admin_site.name)
            return HttpResponseRedirect(changelist + "?e=1")
        # In short keyset-paged reads, not one cursor held for the whole
        # download (leases/services/keyset.py).
        with bounded_reads(request=request):
            rows = bounded_pieces(keyset_rows(cl.queryset, CSV_COLUMNS), request=request)
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
    (client request ids and reasons come from outside) is quoted (leases/domain/spreadsheet.py)."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, str):
        return spreadsheet.defused(value)
    return "" if value is None else value
