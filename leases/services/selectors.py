"""Read-only queries (the selectors half of services/selectors). None of
these take a write lock; lease state is derived from the row and the clock."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q
from django.db.models.functions import Left
from django.db.models.lookups import Exact

from leases.models import Blob, Container

MAX_RESULTS = 5000
FEW = 5_000  # a history filter matching at most this many events is read by their ids (ids_if_few)


def ids_if_few(queryset) -> list | None:
    """The primary keys of ``queryset``'s rows, read with no order (by its filter's own index: a
    seek when it matches nothing), if at most ``FEW`` match; else None. A list narrowed to them is
    then read by primary key: on a column of few values (an action, an actor, an account) SQLite
    otherwise walks the primary key, or another filter's index, to find that few or none match
    (bench/README.md, the 10,000,000-event history)."""
    ids = list(queryset.order_by().values_list("pk", flat=True)[:FEW + 1])
    return ids if len(ids) <= FEW else None


def name_starts_with(prefix: str, field: str = "name") -> Q:
    """``field`` starts with ``prefix``, case-sensitively, as Azure's
    ``prefix`` (the one prefix filter of every door: listings, the JSON API).
    Django's ``startswith`` is a LIKE, which ignores ASCII case on SQLite; a
    bare range ``[prefix, successor)`` is exact only under a binary
    collation. Comparing the first ``len(prefix)`` characters is exact on
    SQLite and PostgreSQL alike, and the ``>=`` lets the name index narrow
    the scan."""
    return Q(**{f"{field}__gte": prefix}) & Q(Exact(Left(field, len(prefix)), prefix))


def list_containers(*, account: str, prefix: str = "", marker: str = "", maxresults: int = MAX_RESULTS):
    """Containers in name order after ``marker``; returns (page, next_marker)."""
    qs = Container.objects.filter(account__name=account).order_by("name")
    if prefix:
        qs = qs.filter(name_starts_with(prefix))
    if marker:
        qs = qs.filter(name__gte=marker)
    page = list(qs[: maxresults + 1])
    next_marker = page[maxresults].name if len(page) > maxresults else ""
    return page[:maxresults], next_marker


def list_blobs(*, container: Container, prefix: str = "", delimiter: str = "", marker: str = "",
               maxresults: int = MAX_RESULTS, snapshots: bool = False):
    """Blobs (and, with a delimiter, collapsed BlobPrefixes) in name order.
    Returns (blobs, prefixes, next_marker); content is never loaded."""
    qs = Blob.objects.filter(container=container).defer("content").order_by("name", "snapshot")
    if not snapshots:
        qs = qs.filter(snapshot="")
    if prefix:
        qs = qs.filter(name_starts_with(prefix))
    if marker:
        qs = qs.filter(name__gte=marker)
    blobs: list[Blob] = []
    prefixes: list[str] = []
    count = 0
    for blob in qs.iterator(chunk_size=1000):
        entry = blob.name
        if delimiter:
            cut = blob.name.find(delimiter, len(prefix))
            if cut >= 0:
                entry = blob.name[: cut + len(delimiter)]
                if prefixes and prefixes[-1] == entry:
                    continue
        if count == maxresults:
            return blobs, prefixes, entry
        count += 1
        if entry != blob.name:
            prefixes.append(entry)
        else:
            blob.container = container
            blobs.append(blob)
    return blobs, prefixes, ""


HOLDING_ACTIONS = ("acquire", "renew", "change", "release", "break", "ended-by-write", "ended-by-delete")


def tenure_at(*, account: str, container: str, blob: str = "", when):
    """The resource's last tenure begun at or before ``when`` (held then or
    not), or None: one seek of the tenures' resource index."""
    from leases.models import Tenure

    return (Tenure.objects.filter(account=account, container=container, blob=blob, began_at__lte=when)
            .order_by("-began_at", "-id").first())


def holder_at(*, account: str, container: str, blob: str = "", when):
    """Who held the lease on a resource at time ``when``, from its tenures
    (leases.models.Tenure), which retention does not prune with the events:
    the last tenure begun at or before ``when``, if it had not ended by then
    (its end, or its deadline). Returns None or a dict with the lease id's
    fingerprint at ``when``, the holder (actor of the request that began the
    tenure), since, until (its end, or its latest deadline; None: infinite),
    state and generation, and the tenure itself."""
    tenure = tenure_at(account=account, container=container, blob=blob, when=when)
    if tenure is None or not tenure.held_at(when):
        return None
    breaking = tenure.breaking_since is not None and tenure.breaking_since <= when
    return {
        "lease_fingerprint": tenure.fingerprint_at(when),
        "holder": tenure.holder,
        "client_request_id": tenure.client_request_id,
        "remote_addr": tenure.holder_address,
        "since": tenure.began_at,
        "until": tenure.until(),
        "state": "breaking" if breaking else "leased",
        "generation": tenure.generation,
        "tenure": tenure.pk,
    }


def lease_unheld_since(*, account: str, container: str, blob: str = "",
                       now: datetime) -> tuple[bool, datetime | None]:
    """For a watched lease (leases.operations.metrics): (True, None) while the lease has
    a holder (leased or breaking), else (False, since when it has had none),
    the time None if nothing says (no such resource, no history). One read of
    the row; for a lease released, broken at once or ended by a write or
    delete, the last two successful lease events (the resource's index)."""
    from leases.domain import machine
    from leases.models import LeaseEvent

    rows = (Blob.objects.filter(container__account__name=account, container__name=container, name=blob,
                                snapshot="") if blob
            else Container.objects.filter(account__name=account, name=container))
    row = rows.only(*rows.model.LEASE_COLUMNS, "created_at").first()
    state = row.effective_lease_state(now) if row is not None else machine.AVAILABLE
    if state in machine.LOCKED_STATES:
        return True, None
    if state == machine.EXPIRED:
        return False, row.lease_expires_at
    if state == machine.BROKEN and row.lease_break_at is not None:  # its break period ended
        return False, row.lease_break_at
    last, *before = (LeaseEvent.objects.filter(account=account, container=container, blob=blob,
                                               outcome=LeaseEvent.Outcome.SUCCESS, action__in=HOLDING_ACTIONS)
                     .order_by("-occurred_at", "-id").only("occurred_at", "state_before", "state_after",
                                                            "expires_at")[:2]) or [None]
    if last is None:  # never leased since it was created (or its history pruned)
        return False, row.created_at if row is not None else None
    if last.state_before in (machine.EXPIRED, machine.BROKEN) and before:  # it had ended before ``last``:
        end = before[0].expires_at if before[0].state_after in machine.LOCKED_STATES else before[0].occurred_at
        return False, min(end or last.occurred_at, last.occurred_at)  # at the deadline the event before set
    return False, last.occurred_at
