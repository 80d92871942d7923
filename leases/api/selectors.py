"""What a principal may list: everything (subject to model permissions)
for users and tokens, its own account's resources and history for a
SharedKey account."""

from __future__ import annotations

from django.db.models import QuerySet

from leases.auth.sharedkey import AccountPrincipal
from leases.models import Blob, Container, LeaseEvent, Tenure


def _scoped(queryset: QuerySet, principal, account_field: str) -> QuerySet:
    if isinstance(principal, AccountPrincipal):
        return queryset.filter(**{account_field: principal.name})
    return queryset


def containers_for(principal) -> QuerySet[Container]:
    return _scoped(Container.objects.select_related("account"), principal, "account__name")


def blobs_for(principal) -> QuerySet[Blob]:
    """Base blobs (no snapshots), without their content."""
    blobs = Blob.objects.filter(snapshot="").select_related("container__account").defer("content")
    return _scoped(blobs, principal, "container__account__name")


def events_for(principal) -> QuerySet[LeaseEvent]:
    return _scoped(LeaseEvent.objects.all(), principal, "account")


def tenures_for(principal) -> QuerySet[Tenure]:
    return _scoped(Tenure.objects.all(), principal, "account")
