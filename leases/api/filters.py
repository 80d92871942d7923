"""Query filters of the list endpoints (django-filter). Lease state filters are evaluated in SQL as
of the request's instant (``effective_state_q``), so "expired" and "broken" find leases whose
deadline passed without any write having touched the row."""

from __future__ import annotations

import operator
from datetime import timezone
from functools import reduce

import django_filters
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db.models import Q
from django_filters.fields import IsoDateTimeField, RangeField
from django_filters.rest_framework import DjangoFilterBackend
from django_filters.widgets import DateRangeWidget
from rest_framework.filters import OrderingFilter

from leases.domain import clock, fingerprints, machine
from leases.domain.errors import LeaseholdError
from leases.models import Blob, Container, LeaseEvent, effective_state_q
from leases.services.selectors import name_starts_with


class QueryFilterBackend(DjangoFilterBackend):
    """django-filter, refusing bad values with the Azure code for them."""

    def filter_queryset(self, request, queryset, view):
        filterset = self.get_filterset(request, queryset, view)
        if filterset is None:
            return queryset
        if not filterset.is_valid():
            errors = {name: [str(m) for m in messages] for name, messages in filterset.errors.items()}
            name = next(iter(errors))
            raise LeaseholdError("InvalidQueryParameterValue", field=name, value=request.query_params.get(name),
                                 detail={"errors": errors})
        return filterset.qs


class LeaseFilterSet(django_filters.FilterSet):
    lease_state = django_filters.MultipleChoiceFilter(
        choices=[(s, s) for s in machine.STATES], method="filter_lease_state",
        help_text="The lease state now; repeat for any of several.")
    duration = django_filters.ChoiceFilter(
        choices=[("fixed", "fixed"), ("infinite", "infinite")], method="filter_duration",
        help_text="Leased now, with a fixed or an infinite duration.")
    prefix = django_filters.CharFilter(method="filter_prefix", help_text="Name prefix (case-sensitive).")

    def filter_lease_state(self, queryset, name, states):
        now = clock.now()
        return queryset.filter(reduce(operator.or_, (effective_state_q(s, now) for s in states)))

    def filter_duration(self, queryset, name, kind):
        infinite = Q(lease_duration=machine.INFINITE)
        return queryset.filter(effective_state_q(machine.LEASED, clock.now()) & (infinite if kind == "infinite"
                                                                                 else ~infinite))

    def filter_prefix(self, queryset, name, prefix):
        return queryset.filter(name_starts_with(prefix))


class ContainerFilter(LeaseFilterSet):
    account = django_filters.CharFilter(field_name="account__name")

    class Meta:
        model = Container
        fields = ["account"]


class BlobFilter(LeaseFilterSet):
    account = django_filters.CharFilter(field_name="container__account__name")
    container = django_filters.CharFilter(field_name="container__name")

    class Meta:
        model = Blob
        fields = ["account", "container"]


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, converted to UTC. PostgreSQL refuses UTC offsets
    beyond 15:59 that Python accepts (up to 23:59); once in UTC no offset is
    sent. A time that leaves the calendar on the way is invalid (400)."""

    def to_python(self, value):
        parsed = super().to_python(value)
        if parsed is None or parsed.tzinfo is None:
            return parsed
        try:
            return parsed.astimezone(timezone.utc)
        except OverflowError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


class UtcIsoDateTimeRangeField(RangeField):
    widget = DateRangeWidget

    def __init__(self, *args, **kwargs):
        super().__init__((UtcIsoDateTimeField(), UtcIsoDateTimeField()), *args, **kwargs)


class UtcIsoDateTimeFromToRangeFilter(django_filters.IsoDateTimeFromToRangeFilter):
    field_class = UtcIsoDateTimeRangeField


class CharInFilter(django_filters.BaseInFilter, django_filters.CharFilter):
    pass


class ByResourceAndLease(django_filters.FilterSet):
    """The history's and the tenures' ``resource`` ("account/container[/blob]") and ``lease_id``
    (found by its fingerprint: neither keeps ids) filters; each says what its fingerprints are.
    The fields both name alike are declared here once."""

    account = django_filters.CharFilter()
    container = django_filters.CharFilter(help_text="A container and all its blobs.")
    blob = django_filters.CharFilter()
    resource_type = django_filters.ChoiceFilter(choices=[(machine.CONTAINER, machine.CONTAINER),
                                                         (machine.BLOB, machine.BLOB)])

    def filter_resource(self, queryset, name, value):
        account, _, rest = value.partition("/")
        container, _, blob = rest.partition("/")
        return queryset.filter(account=account, container=container, blob=blob)

    def filter_lease_id(self, queryset, name, value):
        return self.filter_lease_fingerprint(queryset, name, fingerprints.of(value))

    def filter_lease_fingerprint(self, queryset, name, value):
        raise NotImplementedError


class EventFilter(ByResourceAndLease):
    resource = django_filters.CharFilter(
        method="filter_resource",
        help_text='One resource\'s events: "account/container" (the container itself) or "account/container/blob".')
    lease_id = django_filters.UUIDFilter(method="filter_lease_id",
                                         help_text="Events of this lease id, including a change to or from it.")
    lease_fingerprint = django_filters.CharFilter(
        method="filter_lease_fingerprint", validators=[RegexValidator(fingerprints.FINGERPRINT, "Not a fingerprint.")],
        help_text="Events of the lease with this fingerprint (12 hex digits, as the events show), including a "
                  "change to or from it.")
    action = CharInFilter(help_text="Comma-separated, e.g. acquire,renew (also writes: put-blob, ended-by-write, ended-by-delete...).")
    outcome = django_filters.ChoiceFilter(choices=LeaseEvent.Outcome.choices)
    actor = django_filters.CharFilter(help_text='e.g. "token:deployer", "user:alice", "account:devstoreaccount1".')
    via = django_filters.ChoiceFilter(choices=[(v, v) for v in ("azure", "api", "admin", "cli")], method="filter_via")
    error_code = django_filters.CharFilter(method="filter_error_code")
    request_id = django_filters.CharFilter()
    client_request_id = django_filters.CharFilter()
    occurred_at = UtcIsoDateTimeFromToRangeFilter(
        help_text="occurred_at_after / occurred_at_before: ISO 8601, both inclusive.")
    resource_type = django_filters.ChoiceFilter(choices=[(machine.CONTAINER, machine.CONTAINER),
                                                         (machine.BLOB, machine.BLOB)],
                                                method="filter_resource_type")

    class Meta:
        model = LeaseEvent
        fields: list[str] = []

    # Neither column is indexed. Each value implies one of an indexed column (services.history writes
    # them so), said beside it so that the index finds the events: a container's events name no blob
    # (event_resource_idx is led by the blob), and only a refusal has an error code (event_refused_idx).

    def filter_resource_type(self, queryset, name, value):
        return queryset.filter(resource_type=value, **({"blob": ""} if value == machine.CONTAINER else {}))

    def filter_error_code(self, queryset, name, value):
        return queryset.filter(error_code=value, **({"outcome": LeaseEvent.Outcome.REFUSED} if value else {}))

    def filter_via(self, queryset, name, value):
        # event_via_idx holds the events of every door but the Azure door's: its condition said beside
        # the value, as SQLite uses a partial index only for a query that says its condition.
        return queryset.filter(via=value) if value == "azure" else queryset.filter(~Q(via="azure"), via=value)

    def filter_lease_fingerprint(self, queryset, name, value):
        # The history keeps fingerprints only: a full id is found by its fingerprint.
        return queryset.filter(Q(lease_fingerprint=value) | Q(proposed_lease_fingerprint=value))


class StrictOrderingFilter(OrderingFilter):
    """DRF's ordering, but a field it cannot order by is 400, not ignored."""

    def get_ordering(self, request, queryset, view):
        raw = request.query_params.get(self.ordering_param)
        if raw:
            allowed = {name for name, _ in self.get_valid_fields(queryset, view, {"request": request})}
            terms = [term.strip() for term in raw.split(",")]
            if not all(term.lstrip("-") in allowed for term in terms):
                raise LeaseholdError("InvalidQueryParameterValue", field=self.ordering_param, value=raw[:100],
                                     message="ordering must be one of: " + ", ".join(
                                         sorted(f"{sign}{name}" for name in allowed for sign in ("", "-"))) + ".")
        ordering = super().get_ordering(request, queryset, view)
        # A field that repeats (a time) is ordered by the id after it, in its direction: pages then
        # split ties the same way every time (the cursor counts its place among them).
        if ordering and ordering[-1].lstrip("-") not in ("id", "pk"):
            ordering = (*ordering, "-id" if ordering[-1].startswith("-") else "id")
        return ordering

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        fields = getattr(view, "ordering_fields", None) or []
        for parameter in parameters:
            if parameter["name"] == self.ordering_param and fields:
                parameter["schema"] = {"type": "string", "enum": [f"{sign}{name}" for name in fields
                                                                  for sign in ("", "-")]}
        return parameters
