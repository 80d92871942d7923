"""What every lease admin page shares: one instant per request, the acting
staff user as a service ``Actor``, and the indexed search terms."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from django.db.models import Case, DateTimeField, F, Q, Value, When
from django.urls import reverse
from django.utils.http import urlencode

from leases.domain import client_headers, clock, fingerprints, machine
from leases.models import Blob, Container
from leases.services import Actor, ResourceRef


# A break changes something only while a lease exists: leased, breaking, or
# expired (breaking an expired lease stops its holder from renewing it).
BREAKABLE = (machine.LEASED, machine.BREAKING, machine.EXPIRED)


def lease_now(request) -> datetime:
    """The request's single instant: filters, badges, countdowns and the
    break confirmation all judge lease state at the same ``now``."""
    if not hasattr(request, "_lease_now"):
        request._lease_now = clock.now()
    return request._lease_now


def admin_actor(request) -> Actor:
    """The staff user as the services record them. One Actor per request,
    so every event of one bulk break shares a request id."""
    if not hasattr(request, "_lease_actor"):
        request._lease_actor = Actor(
            name=f"user:{request.user.get_username()}", via="admin",
            remote_addr=request.META.get("REMOTE_ADDR", ""),
            user_agent=client_headers.user_agent(request.META))
    return request._lease_actor


def resource_ref(obj: Container | Blob) -> ResourceRef:
    """The service name of a row (loaded with its container and account)."""
    if isinstance(obj, Blob):
        return ResourceRef(obj.container.account.name, obj.container.name, obj.name, obj.snapshot)
    return ResourceRef(obj.account.name, obj.name)


# Sorts after every real deadline: an infinite lease has the most time left.
NEVER = datetime(9999, 12, 31, tzinfo=UTC)


class DeadlineOrder(Case):
    """"Time left" as a sort key (machine.deadline in SQL): a live lease's
    expiry, a breaking lease's break end, far in the future for an infinite
    lease, and NULL (last, either way) for leases with no time left: expired,
    broken, available.
    Judged at the request's instant (the ``lease_as_of`` annotation), as the
    badges are. A sort of the matching rows rather than an index walk: a top-N
    sort of one page, which stays cheap (bench/admin_pages.py)."""

    def __init__(self):
        as_of = F("lease_as_of")
        super().__init__(
            When(lease_state=machine.LEASED, lease_duration=machine.INFINITE, then=Value(NEVER)),
            When(lease_state=machine.LEASED, lease_expires_at__gt=as_of, then=F("lease_expires_at")),
            When(lease_state=machine.BREAKING, lease_break_at__gt=as_of, then=F("lease_break_at")),
            default=None, output_field=DateTimeField())

    def asc(self, **kwargs):
        return super().asc(nulls_last=True, **kwargs)

    def desc(self, **kwargs):
        return super().desc(nulls_last=True, **kwargs)


def history_url(account: str, container: str, blob: str, *, current_app: str) -> str:
    """The lease history list narrowed to one resource (blob "" for a
    container's own lease), as the resource index answers it."""
    query = urlencode({"account": account, "container": container, "blob": blob})
    return reverse("admin:leases_leaseevent_changelist", current_app=current_app) + "?" + query


def tenures_url(account: str, container: str, blob: str, *, current_app: str) -> str:
    """The tenures list narrowed to one resource (leases/admin/tenures.py)."""
    query = urlencode({"account": account, "container": container, "blob": blob})
    return reverse("admin:leases_tenure_changelist", current_app=current_app) + "?" + query


# ------------------------------------------------------------------ search

def lease_id_q(term: str) -> Q | None:
    """Containers or blobs whose lease has the id ``term`` (any GUID
    spelling), by the lease id index; None if ``term`` is no full id. Only a
    full id: the pages show fingerprints, and a prefix would let a reader
    find an id by digits."""
    if fingerprints.of_id_text(term) is None:
        return None
    return Q(lease_id=uuid.UUID(term.strip().strip("{}()")))


def lease_fingerprint_q(term: str) -> Q | None:
    """Events of the lease ``term`` names, by its fingerprint or its full id
    (found by its fingerprint: the history keeps no more), a change to or
    from it included; None if ``term`` is neither."""
    fingerprint = fingerprints.from_term(term)
    if fingerprint is None:
        return None
    return Q(lease_fingerprint=fingerprint) | Q(proposed_lease_fingerprint=fingerprint)


class ReadOnlyColumnsMixin:
    """Nobody adds, changes or deletes these rows here, superusers included:
    leases change only through the services, and history never changes."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
