"""Containers and blobs with their leases: lists, filters, search, and a detail page with the recent
history and a "who held it at T" lookup. Nothing here writes a row. Lease columns change only
through the services, as they do for the Azure endpoint and the API, so both admins are read-only
for everyone, superusers included; breaking and releasing are the views of ``lease_actions``, which
call the services as the staff user."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, DateTimeField, OuterRef, Prefetch, Q, Subquery, Value
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils.html import format_html

from leases.domain import machine
from leases.models import Blob, Container, LeaseEvent

from leases.admin import display
from leases.admin.common import BREAKABLE, DeadlineOrder, ReadOnlyColumnsMixin, history_url, lease_id_q, tenures_url, lease_now, resource_ref
from leases.admin.chips import filter_chips
from leases.admin.filters import AccountFilter, BlobAccountFilter, ContainerFilter, DurationTypeFilter, EffectiveStateFilter
from leases.admin.forms import HolderAtForm
from leases.admin.holders import HolderFilter, HolderViewsMixin
from leases.admin.lease_actions import LeaseActionsMixin
from leases.admin.lookup import holder_lookup
from leases.admin.paging import CappedCountPaginator
from leases.admin.queries import DeclaredQueryAdmin

HISTORY_ROWS = 20
REFRESH_SECONDS = 30  # lists and detail pages reload themselves this often (and when a deadline passes)


class LeaseResourceAdmin(HolderViewsMixin, LeaseActionsMixin, ReadOnlyColumnsMixin, DeclaredQueryAdmin):
    """What the container and blob admins share: lease columns, filters that
    judge state in SQL, indexed search, the lease panels of a detail page,
    and (from the mixin) the break and release flows."""

    paginator = CappedCountPaginator
    show_full_result_count = False  # a second COUNT(*), of the whole table
    show_facets = admin.ShowFacets.NEVER  # a COUNT per filter choice
    list_per_page = 50
    change_form_template = "admin/leases/lease_resource_change_form.html"
    search_fields = ("name", "lease_id")  # what get_search_results searches, by index
    search_help_text = ("Part of a name (any case), or a full lease id. Several words: rows matching all of "
                        "them. A lease's fingerprint: search the history.")
    lease_fieldset = ("Lease", {"fields": (
        "lease_state_badge", "lease_status", "lease_duration_type", "time_left_alone", "lease_fingerprint",
        "generation", "expires_at", "break_at")})
    holder_fieldset = ("Holder (from the last acquire)", {"fields": (
        "holder_actor", "holder_address", "holder_client_request_id", "acquired_at")})

    def changelist_view(self, request, extra_context=None):
        # Read-only for everyone, so Django's "Select blob to view" says less than the name.
        extra_context = {"title": self.opts.verbose_name_plural.capitalize(), **self.as_of_context(request),
                         **(extra_context or {})}
        return super().changelist_view(request, extra_context)

    def changelist_context(self, request, cl, context):
        context["filter_chips"] = filter_chips(cl)

    def as_of_context(self, request) -> dict:
        return {"lease_as_of": display.timestamp(lease_now(request)), "refresh_seconds": REFRESH_SECONDS}

    # ------------------------------------------------------------ queries

    def get_queryset(self, request):
        # Every row carries the request's instant, so badges and countdowns
        # agree with the state filter, which judged the rows at that instant.
        return super().get_queryset(request).annotate(
            lease_as_of=Value(lease_now(request), output_field=DateTimeField()))

    def get_search_results(self, request, queryset, search_term):
        """Each word is part of the name (case-insensitive, as an operator
        types it; a scan of the name column, which at 100,000 blobs stays
        well inside a page's time: bench/admin_pages.py) or a lease id."""
        for word in dict.fromkeys(search_term.split()):  # a word repeated narrows nothing more
            query = Q(name__icontains=word)
            if (by_id := lease_id_q(word)) is not None:
                query |= by_id
            queryset = queryset.filter(query)
        return queryset, False

    # ------------------------------------------------------------ columns

    @admin.display(description="state")
    def lease_state_badge(self, obj):
        return display.badge(display.row_state(obj))

    # The list packs two facts per column (state and status, time left and
    # duration, lease id and generation) so that it fits 1366 px with both
    # sidebars open; the detail page keeps them apart.
    @admin.display(description="state")
    def state_and_status(self, obj):
        state = display.row_state(obj)
        return format_html('{}<br><span class="lease-quiet">{}</span>', display.badge(state),
                           machine.lease_status(state))

    @admin.display(description="lease")
    def lease_and_generation(self, obj):
        if obj.lease_id is None:
            return display.EMPTY
        return format_html('{}<br><span class="lease-quiet">gen. {}</span>', display.lease_fingerprint(obj),
                           obj.lease_generation)

    @admin.display(description="lease id fingerprint")
    def lease_fingerprint(self, obj):
        return display.lease_fingerprint(obj)

    @admin.display(description="status")
    def lease_status(self, obj):
        return machine.lease_status(display.row_state(obj))

    @admin.display(description="duration")
    def lease_duration_type(self, obj):
        return display.duration_type(obj)

    # Soonest deadline first (expiry, or a breaking lease's break end); no time left last.
    @admin.display(description="time left", ordering=DeadlineOrder())
    def time_left(self, obj):
        state = display.row_state(obj)
        left = display.time_left(obj, state, obj.lease_as_of)
        if state in (machine.LEASED, machine.EXPIRED) and obj.lease_duration is not None:
            return format_html('{}<br><span class="lease-quiet">{}</span>', left, display.duration_type(obj))
        return left

    @admin.display(description="time left")
    def time_left_alone(self, obj):
        """The detail page's: its duration has a line of its own there."""
        return display.time_left(obj, display.row_state(obj), obj.lease_as_of)

    @admin.display(description="generation")
    def generation(self, obj):
        return obj.lease_generation

    @admin.display(description="holder")
    def holder(self, obj):
        if display.row_state(obj) == machine.AVAILABLE:
            return display.EMPTY  # released or never leased: nobody holds it
        return display.holder(obj.lease_holder, obj.lease_holder_address, obj.lease_holder_request_id)

    @admin.display(description="actor")
    def holder_actor(self, obj):
        return obj.lease_holder or display.EMPTY

    @admin.display(description="address")
    def holder_address(self, obj):
        return obj.lease_holder_address or display.EMPTY

    @admin.display(description="client request id")
    def holder_client_request_id(self, obj):
        return obj.lease_holder_request_id or display.EMPTY

    @admin.display(description="expires at")
    def expires_at(self, obj):
        return display.timestamp(obj.lease_expires_at)

    @admin.display(description="breaks at")
    def break_at(self, obj):
        return display.timestamp(obj.lease_break_at)

    @admin.display(description="acquired at")
    def acquired_at(self, obj):
        return display.timestamp(obj.lease_acquired_at)

    @admin.display(description="last modified")
    def modified(self, obj):
        return display.timestamp(obj.last_modified)

    @admin.display(description="created")
    def created(self, obj):
        return display.timestamp(obj.created_at)

    # ------------------------------------------------------------ detail page

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context.update(self.lease_context(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def lease_context(self, request, obj) -> dict:
        """The lease tools, recent history and holder lookup of a detail page."""
        ref = resource_ref(obj)
        state = display.row_state(obj)
        events = LeaseEvent.objects.filter(account=ref.account, container=ref.container, blob=ref.blob or "")
        holder_form = HolderAtForm(request.GET if "held_at" in request.GET else None)
        return {
            **self.as_of_context(request),
            "can_break": state in BREAKABLE and self.has_break_permission(request, obj),
            "can_release": (obj.lease_id is not None and state != machine.AVAILABLE
                            and self.has_release_permission(request, obj)),
            "history": events[:HISTORY_ROWS],
            "history_url": history_url(ref.account, ref.container, ref.blob or "", current_app=self.admin_site.name),
            "tenures_url": tenures_url(ref.account, ref.container, ref.blob or "", current_app=self.admin_site.name),
            "holder_form": holder_form,
            "lookup": holder_lookup(account=ref.account, container=ref.container, blob=ref.blob or "",
                                    when=holder_form.cleaned_data["held_at"]) if holder_form.is_valid() else None,
        }


@admin.register(Container)
class ContainerAdmin(LeaseResourceAdmin):
    list_display = ("name", "account", "blobs", "state_and_status", "time_left", "lease_and_generation", "holder",
                    "modified")
    list_filter = (EffectiveStateFilter, DurationTypeFilter, HolderFilter, AccountFilter)
    list_select_related = ("account",)
    sortable_by = ("name", "time_left")  # others would sort the whole table; time left has the expiry index
    ordering = ("account_id", "name")  # the unique (account, name) index; "account" would sort by its name
    # The lease first: it is what an operator comes for.
    fieldsets = (
        (None, {"fields": ("account", "name")}),
        LeaseResourceAdmin.lease_fieldset,
        LeaseResourceAdmin.holder_fieldset,
        ("Container", {"fields": ("public_access", "etag", "modified", "created", "metadata")}),
    )

    def get_queryset(self, request):
        # Each container's blob count, from the (container, name, snapshot)
        # index: a correlated count, computed for the page's rows only.
        blob_count = Subquery(Blob.objects.filter(container=OuterRef("pk")).order_by()
                              .values("container").annotate(n=Count("pk")).values("n"))
        return super().get_queryset(request).select_related("account").annotate(
            blob_count=Coalesce(blob_count, 0))

    @admin.display(description="blobs")
    def blobs(self, obj):
        """How many blobs, one click from the list of them."""
        url = reverse("admin:leases_blob_changelist", current_app=self.admin_site.name)
        return format_html('<a href="{}?container={}" title="The blobs of {}">{}</a>', url, obj.pk, obj,
                           f"{obj.blob_count:,}")

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            url = reverse("admin:leases_blob_changelist", current_app=self.admin_site.name)
            context["blobs_url"] = f"{url}?container={obj.pk}"
            context["blobs_count"] = obj.blob_count
        return super().render_change_form(request, context, add, change, form_url, obj)


@admin.register(Blob)
class BlobAdmin(LeaseResourceAdmin):
    list_display = ("blob_name", "container_path", "state_and_status", "time_left", "lease_and_generation",
                    "holder", "modified")
    list_filter = (EffectiveStateFilter, DurationTypeFilter, HolderFilter, BlobAccountFilter, ContainerFilter)
    sortable_by = ("blob_name", "time_left")
    ordering = ("name", "container_id", "snapshot")  # by name, as the list marks it (blob_name_idx)
    # The lease first: it is what an operator comes for; file metadata after.
    fieldsets = (
        (None, {"fields": ("container_path", "name", "snapshot")}),
        LeaseResourceAdmin.lease_fieldset,
        LeaseResourceAdmin.holder_fieldset,
        ("File", {"fields": ("size", "content_type", "etag", "modified", "created", "metadata")}),
    )

    def get_queryset(self, request):
        # Containers and accounts come in one more query per page rather than
        # a join: joined, SQLite may plan from the small tables outward and
        # sort every blob for one page. The content, megabytes per row, is
        # never shown here.
        return super().get_queryset(request).defer("content").prefetch_related(
            Prefetch("container", Container.objects.select_related("account")))

    @admin.display(description="account / container")
    def container_path(self, obj):
        container = obj.container
        url = reverse("admin:leases_container_change", args=[container.pk], current_app=self.admin_site.name)
        return format_html('<a href="{}">{}/{}</a>', url, container.account.name, container.name)

    @admin.display(description="name", ordering="name")
    def blob_name(self, obj):
        return f"{obj.name}?snapshot={obj.snapshot}" if obj.snapshot else obj.name
