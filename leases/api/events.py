"""The lease history for auditors: filtered lists, exports, and "who held
resource R at time T". Read-only: LeaseEvent is append-only and this API
never writes it (only the services do, as a side effect of actions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from leases.domain import clock

from leases.services import selectors
from leases import services
from leases.services.keyset import keyset_rows
from leases.api import schema
from leases.api.base import ApiGenericView, ApiListView, ApiMixin, ApiView, validated_query
from leases.api.filters import EventFilter, QueryFilterBackend, StrictOrderingFilter
from leases.api.pagination import EventCursor
from leases.api.renderers import CsvRenderer, NdjsonRenderer
from leases.api.selectors import events_for
from leases.models import LeaseEvent
from leases.api.serializers import EVENT_FIELDS, EventSerializer, HolderAnswerSerializer, HolderQuery

READ_EVENTS: dict[str, tuple[str, ...]] = {"GET": ("leases.view_leaseevent",)}


if TYPE_CHECKING:  # the view RefusesHistoryChanges is mixed into, for the checker
    _View = ApiMixin
else:
    _View = object


class RefusesHistoryChanges(_View):
    """History is read-only here: a POST, PUT, PATCH or DELETE gets 405 and
    is recorded as a refused event (auditors want the attempt)."""

    def http_method_not_allowed(self, request, *args, **kwargs):
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            # Only a principal who may read the history has its attempts recorded; any
            # other is refused as its GET would be, so no token can fill the history.
            if not request.user.has_perm("leases.view_leaseevent"):
                raise PermissionDenied
            services.history_tamper_refused(
                actor=self.actor(), attempt="history-delete" if request.method == "DELETE" else "history-change",
                status=405, target=f"{request.method} {request.path}")
        return super().http_method_not_allowed(request, *args, **kwargs)


class EventQueryMixin(RefusesHistoryChanges):
    required_permissions = READ_EVENTS
    filter_backends = [QueryFilterBackend]
    filterset_class = EventFilter

    def get_queryset(self):
        return events_for(self.request.user)


def by_ids_if_few(queryset, *, bound: bool = True):
    """A filtered list that matches at most ``selectors.FEW`` events, narrowed to their ids
    (``selectors.ids_if_few``): its pages are then read by primary key. A filter matching more is
    read by a walk of the primary key: it finds a page among the newest events."""
    if not queryset.query.where:
        return queryset
    ids = selectors.ids_if_few(queryset)
    if ids is not None:
        return queryset.filter(pk__in=ids)
    if not bound:
        return queryset
    # Many match: said as a range of the primary key (the history's first and last ids, each a seek),
    # so that SQLite walks it, as it does for a cursor's next page, rather than sorting every match
    # its filter's index finds (an actor's 270,000 events: 3.9 s). Not beside a cursor's own bound:
    # of two bounds on one side SQLite starts the walk at one, maybe the history's end, not the cursor.
    everything = LeaseEvent.objects.values_list("pk", flat=True)
    first, last = everything.order_by("pk").first(), everything.order_by("-pk").first()
    return queryset if first is None or last is None else queryset.filter(pk__gte=first, pk__lte=last)


@extend_schema(tags=["events"])
class EventListView(EventQueryMixin, ApiListView):
    serializer_class = EventSerializer
    filter_backends = [QueryFilterBackend, StrictOrderingFilter]
    ordering_fields = ["id", "occurred_at"]
    pagination_class = EventCursor

    def filter_queryset(self, queryset):
        # The primary key's bounds steer a walk of the ids: only for the id order (by time, the
        # occurred_at index is walked).
        by_id = self.request.query_params.get("ordering", "-id").lstrip("-") == "id"
        cursor = self.request.query_params.get(self.pagination_class.cursor_query_param)
        return by_ids_if_few(super().filter_queryset(queryset), bound=by_id and not cursor)

    @extend_schema(summary="List lease events", description=(
        "Newest first (`ordering=id` for oldest first). Ids follow the order events were recorded in, so a "
        "cursor walk neither skips nor repeats events while new ones are appended. `ordering=-occurred_at` "
        "or `occurred_at`: in time order, ties by id, which reads a time range by its index; such a walk can "
        "miss an event recorded after it passed with an earlier time (at most the write wait)."),
        responses={200: OpenApiResponse(EventSerializer(many=True), description="A page of events."),
                   **schema.errors()})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


@extend_schema(tags=["events"])
class EventExportView(EventQueryMixin, ApiGenericView):
    renderer_classes = [CsvRenderer, NdjsonRenderer]

    @extend_schema(
        summary="Export lease events as CSV or NDJSON",
        description="Every matching event, oldest first, streamed. Choose the format with `format` or Accept.",
        filters=True,
        parameters=[OpenApiParameter("format", OpenApiTypes.STR, enum=["csv", "ndjson"])],
        responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="One CSV row or NDJSON line "
                                                                                    "per event."),
                   (200, "application/x-ndjson"): OpenApiTypes.STR,
                   **schema.errors(404, 406)})
    def get(self, request):
        # In short keyset-paged reads, not one cursor held for the whole
        # download (leases/services/keyset.py).
        rows = keyset_rows(self.filter_queryset(self.get_queryset()).order_by("id"), EVENT_FIELDS)
        renderer = request.accepted_renderer
        response = StreamingHttpResponse(renderer.stream(EVENT_FIELDS, rows),
                                         content_type=f"{renderer.media_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="lease-events.{renderer.format}"'
        return response


@extend_schema(tags=["events"])
class HolderView(RefusesHistoryChanges, ApiView):
    required_permissions = READ_EVENTS

    def target_account(self) -> str | None:
        return self.request.query_params.get("account")

    @extend_schema(summary="Who held a resource's lease at a given time", parameters=[HolderQuery],
                   responses={200: OpenApiResponse(HolderAnswerSerializer, description="The holder, or null."),
                              **schema.errors()})
    def get(self, request):
        query = validated_query(HolderQuery, request)
        at = query.get("at") or clock.now()
        holder = selectors.holder_at(account=query["account"], container=query["container"], blob=query["blob"],
                                     when=at)
        return Response(HolderAnswerSerializer({**query, "at": at, "holder": holder}).data)
