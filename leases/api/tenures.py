"""Tenures for auditors (leases.models.Tenure): one row per lease lifetime, listed with filters and
cursor paging as the events are, and exported as CSV or NDJSON. Read-only, with the history's
permission (``view_leaseevent``): a tenure is what the history says, kept past its pruning."""

from __future__ import annotations

import operator
from functools import reduce

import django_filters
from django.core.validators import RegexValidator
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from leases.domain import clock, fingerprints
from leases.models import Tenure
from leases.models.tenure import end_q, fingerprint_q, held_at_q
from leases.services.keyset import keyset_rows
from leases.api import schema
from leases.api.base import ApiGenericView, ApiListView
from leases.api.events import READ_EVENTS, RefusesHistoryChanges
from leases.api.filters import (ByResourceAndLease, CharInFilter, QueryFilterBackend, StrictOrderingFilter,
                                UtcIsoDateTimeFromToRangeFilter, UtcIsoDateTimeField)
from leases.api.pagination import EventCursor
from leases.api.renderers import CsvRenderer, NdjsonRenderer
from leases.api.selectors import tenures_for

TENURE_FIELDS = ["id", "resource_type", "account", "container", "blob", "generation", "lease_fingerprint",
                 "fingerprints", "holder", "holder_address", "client_request_id", "via", "began_by", "began_at",
                 "deadline", "breaking_since", "ended_at", "end", "ended_by", "settled_by"]
ENDS = [*Tenure.End.values, "held"]
EXPORTED = ["latest_deadline" if name == "deadline" else name for name in TENURE_FIELDS]  # read as named


class TenureSerializer(serializers.ModelSerializer):
    end = serializers.SerializerMethodField(help_text=(
        "released, broken, expired, ended-by-delete; \"held\" while it holds. A lease that expired or finished "
        "breaking is recorded by the next write on its resource; until then this says so from its deadline."))
    ended_at = serializers.SerializerMethodField(help_text="When it stopped holding; null while it holds.")
    deadline = serializers.DateTimeField(source="latest_deadline", read_only=True, allow_null=True, help_text=(
        "The latest deadline its lease had: its expiry while leased, the break's end while breaking; null: "
        "infinite."))

    class Meta:
        model = Tenure
        fields = TENURE_FIELDS
        extra_kwargs = {"fingerprints": {"help_text": "Every lease id fingerprint it had, space-separated: the "
                                                      "first, then each a change gave it as fingerprint@time."}}

    def get_end(self, tenure: Tenure) -> str:
        return tenure.end_at(self.context["now"])[0] or "held"

    def get_ended_at(self, tenure: Tenure) -> str | None:
        how, at = tenure.end_at(self.context["now"])
        return serializers.DateTimeField().to_representation(at) if how and at else None


class UtcIsoDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class TenureFilter(ByResourceAndLease):
    resource = django_filters.CharFilter(
        method="filter_resource",
        help_text='One resource\'s tenures: "account/container" (the container itself) or "account/container/blob".')
    lease_id = django_filters.UUIDFilter(method="filter_lease_id",
                                         help_text="Tenures whose lease had this id, first or after a change.")
    lease_fingerprint = django_filters.CharFilter(
        method="filter_lease_fingerprint", validators=[RegexValidator(fingerprints.FINGERPRINT, "Not a fingerprint.")],
        help_text="Tenures whose lease had this fingerprint (12 hex digits), first or after a change.")
    holder = django_filters.CharFilter(help_text='The actor that began it, e.g. "account:devstoreaccount1".')
    via = django_filters.ChoiceFilter(choices=[(v, v) for v in ("azure", "api", "admin", "cli")])
    client_request_id = django_filters.CharFilter()
    generation = django_filters.NumberFilter()
    end = CharInFilter(method="filter_end", help_text="Comma-separated: " + ", ".join(ENDS) + ".")
    began_at = UtcIsoDateTimeFromToRangeFilter(help_text="began_at_after / began_at_before: ISO 8601, inclusive.")
    held_at = UtcIsoDateTimeFilter(method="filter_held_at",
                                   help_text="Tenures holding their resource at this time (ISO 8601).")

    class Meta:
        model = Tenure
        fields: list[str] = []

    def filter_lease_fingerprint(self, queryset, name, value):
        return queryset.filter(fingerprint_q(value))

    def filter_end(self, queryset, name, values):
        unknown = sorted(set(values) - set(ENDS))
        if unknown:
            from leases.domain.errors import LeaseholdError
            raise LeaseholdError("InvalidQueryParameterValue", field="end", value=",".join(unknown)[:100],
                                 message="end must be among: " + ", ".join(ENDS) + ".")
        now = clock.now()
        return queryset.filter(reduce(operator.or_, (end_q(value, now) for value in set(values))))

    def filter_held_at(self, queryset, name, when):
        return queryset.filter(held_at_q(when))


class TenureQueryMixin(RefusesHistoryChanges):
    required_permissions = READ_EVENTS
    filter_backends = [QueryFilterBackend]
    filterset_class = TenureFilter

    def get_queryset(self):
        return tenures_for(self.request.user)


@extend_schema(tags=["tenures"])
class TenureListView(TenureQueryMixin, ApiListView):
    serializer_class = TenureSerializer
    filter_backends = [QueryFilterBackend, StrictOrderingFilter]
    ordering_fields = ["id"]
    pagination_class = EventCursor

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "now": clock.now()}

    @extend_schema(summary="List tenures (one per lease lifetime)", description=(
        "Newest first (`ordering=id` for oldest first). Each tenure is one lease's hold on its resource, from "
        "the request that began it to its end; kept when retention prunes the events."),
        responses={200: OpenApiResponse(TenureSerializer(many=True), description="A page of tenures."),
                   **schema.errors()})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


@extend_schema(tags=["tenures"])
class TenureExportView(TenureQueryMixin, ApiGenericView):
    renderer_classes = [CsvRenderer, NdjsonRenderer]

    @extend_schema(
        summary="Export tenures as CSV or NDJSON",
        description=("Every matching tenure, oldest first, streamed, as stored: `end` is empty until an end "
                     "is recorded (see `deadline`). Choose the format with `format` or Accept."),
        filters=True,
        parameters=[OpenApiParameter("format", OpenApiTypes.STR, enum=["csv", "ndjson"])],
        responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="One CSV row or NDJSON line "
                                                                                    "per tenure."),
                   (200, "application/x-ndjson"): OpenApiTypes.STR,
                   **schema.errors(404, 406)})
    def get(self, request):
        rows = keyset_rows(self.filter_queryset(self.get_queryset()).order_by("id"), EXPORTED)
        renderer = request.accepted_renderer
        response = StreamingHttpResponse(renderer.stream(TENURE_FIELDS, rows),
                                         content_type=f"{renderer.media_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="lease-tenures.{renderer.format}"'
        return response
