"""Tenures: one row per lease lifetime on a container or blob, from the moment a lease begins to
hold the resource until it stops (released, broken, expired, ended by a delete). Written by the
services in the transaction of the lease write (leases/services/tenures.py), so "who held R at T"
is answered from here, whatever retention prunes of the history. Names are copied, not foreign
keys, as the history's are: a tenure outlives its resource. The database refuses changes to a
settled tenure and to a tenure's fixed columns, and deletes but by retention (migration 0015)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.apps import apps
from django.db import models
from django.db.models import Case, DateTimeField, F, OuterRef, Q, Subquery, When
from django.db.models.functions import Coalesce


def latest_deadline_sql() -> Case:
    """The latest deadline a tenure's lease had, in SQL (the ``latest_deadline`` annotation): a
    renewal writes no tenure, so an open tenure's lease row holds it while its lease is leased in
    the tenure's generation (a renewal only moves it later); otherwise, and once ended, the stored
    ``deadline`` (written by every other write that moves it, and by the write that ends it)."""
    from leases.domain import machine

    Blob, Container = apps.get_model("leases", "Blob"), apps.get_model("leases", "Container")  # no import circle

    def live(rows):
        return Coalesce(Subquery(rows.filter(lease_state=machine.LEASED, lease_generation=OuterRef("generation"))
                                 .values("lease_expires_at")[:1]), F("deadline"))
    blob = Blob.objects.filter(container__account__name=OuterRef("account"), container__name=OuterRef("container"),
                               name=OuterRef("blob"), snapshot="")
    container = Container.objects.filter(account__name=OuterRef("account"), name=OuterRef("container"))
    return Case(When(ended_at__isnull=False, then=F("deadline")), When(resource_type="blob", then=live(blob)),
                default=live(container), output_field=DateTimeField())


class TenureQuerySet(models.QuerySet):
    """``.delete()`` and ``.update()`` refuse, as the database's triggers do: only the
    services change an open tenure, and only retention deletes settled ones."""

    def delete(self):
        raise PermissionError("tenures are kept (only retention prunes settled ones)")

    delete.alters_data = True  # type: ignore[attr-defined]
    delete.queryset_only = True  # type: ignore[attr-defined]

    def update(self, **kwargs):
        raise PermissionError("tenures are changed by lease writes only")

    update.alters_data = True  # type: ignore[attr-defined]

    def _raw_delete(self, using):
        raise PermissionError("tenures are kept (only retention prunes settled ones)")

    def bulk_create(self, objs, *args, **kwargs):
        for obj in objs:  # as the lease writes set it when a tenure ends
            if obj.length_class is None and obj.ended_at is not None:
                obj.length_class = length_class(obj.ended_at - obj.began_at)
        return super().bulk_create(objs, *args, **kwargs)


class TenureManager(models.Manager.from_queryset(TenureQuerySet)):  # type: ignore[misc]
    def get_queryset(self):
        return super().get_queryset().annotate(latest_deadline=latest_deadline_sql())


# A settled tenure's length class k: it held its resource at most 4**k seconds (0 <= k < LONG_CLASS).
# None: open (not ended yet), or held longer than 4**(LONG_CLASS - 1) s (8.5 years). "Held at T" is then
# one index range per class (began in (T - 4**k, T]) and one over the open and long ones (decision 0040).
LONG_CLASS = 15


def class_bound(k: int) -> timedelta:
    return timedelta(seconds=4 ** k)


def length_class(length: timedelta) -> int | None:
    return next((k for k in range(LONG_CLASS) if length <= class_bound(k)), None)


def end_q(value: str, now: datetime) -> Q:
    """Tenures that ended so as known at ``now`` ("held": not ended), as ``Tenure.end_at`` says;
    each branch names its ``end`` (the index tenure_end_idx)."""
    # The stored deadline first: the latest is never earlier, so it is read only where that could differ.
    passed = Q(end="", deadline__lte=now, latest_deadline__lte=now)
    if value == "held":
        return Q(end="") & (Q(deadline__isnull=True) | Q(deadline__gt=now) | Q(latest_deadline__gt=now))
    if value == Tenure.End.EXPIRED:
        return Q(end=value) | (passed & Q(breaking_since__isnull=True))
    if value == Tenure.End.BROKEN:
        return Q(end=value) | (passed & Q(breaking_since__isnull=False))
    return Q(end=value)


def held_at_q(when: datetime) -> Q:
    """Tenures holding their resource at ``when`` (``Tenure.held_at``): begun by then, and ended
    after it, or not ended with a deadline after it or none. Where they began is bounded by their
    length class: a range of the index tenure_length_idx per class, and the open and long ones."""
    until = Q(ended_at__gt=when) | Q(ended_at__isnull=True) & (
        Q(deadline__isnull=True) | Q(deadline__gt=when) | Q(latest_deadline__gt=when))
    ranges = [Q(length_class__isnull=True)]
    for k in range(LONG_CLASS):
        try:
            ranges.append(Q(length_class=k, began_at__gt=when - class_bound(k)))
        except OverflowError:  # T within 4**k s of the year 1: no lower bound
            ranges.append(Q(length_class=k))
    began = Q(*ranges, _connector=Q.OR) & Q(began_at__lte=when)  # one flat OR, not 16 nested
    # As ids: the ranges then drive the query (ordered by id, the databases scanned the table instead).
    return Q(id__in=Tenure.objects.filter(began & until).values("id"))


def fingerprint_q(value: str) -> Q:
    """Tenures whose lease had fingerprint ``value``, first or after a change. A change is looked
    for only among the tenures that had one (the partial index tenure_changed_idx), as ids: the
    databases use an index for each side of the OR then, where a LIKE beside it scanned."""
    changed = Tenure.objects.filter(~Q(fingerprints=F("lease_fingerprint")), fingerprints__contains=f" {value}@")
    return Q(lease_fingerprint=value) | Q(id__in=changed.values("id"))


class Tenure(models.Model):
    """One lease lifetime. ``latest_deadline``: the latest deadline its lease had (expiry while
    leased, the break's moment while breaking; None: infinite); ``deadline``: what is stored of it.
    ``fingerprints``: the lease id fingerprints it had, in order: the first, then each a change gave
    it as ``fp@time``.
    A lease renewed after it expired resumes (same generation) as a new tenure, begun by that
    renew: between the two, nobody held the resource."""

    class End(models.TextChoices):
        RELEASED = "released"
        BROKEN = "broken"
        EXPIRED = "expired"
        ENDED_BY_DELETE = "ended-by-delete"

    resource_type = models.CharField(max_length=9)  # container | blob
    account = models.CharField(max_length=24)
    container = models.CharField(max_length=63)
    blob = models.CharField(max_length=1024, blank=True)
    generation = models.BigIntegerField()
    lease_fingerprint = models.CharField(max_length=12)  # the one it began with
    fingerprints = models.TextField()
    holder = models.CharField(max_length=200, blank=True)  # the actor of the request that began it
    holder_address = models.CharField(max_length=64, blank=True)
    client_request_id = models.CharField(max_length=1024, blank=True)
    via = models.CharField(max_length=8, blank=True)
    began_by = models.CharField(max_length=16)  # acquire | renew (an expired lease resumed)
    began_at = models.DateTimeField()
    deadline = models.DateTimeField(null=True, blank=True)
    breaking_since = models.DateTimeField(null=True, blank=True)
    # Set once, when the end is known: at a release, break or delete, or for one that
    # expired or finished breaking, by the next write on the resource (state derives from
    # stored deadlines: nothing runs at the deadline itself).
    ended_at = models.DateTimeField(null=True, blank=True)
    end = models.CharField(max_length=16, blank=True, choices=End.choices)
    ended_by = models.CharField(max_length=200, blank=True)  # who released, broke or deleted
    settled_by = models.CharField(max_length=16, blank=True)  # the action whose write recorded the end
    # Written with ended_at (leases/storage/tenure_rows.py): see LONG_CLASS. Never by a renewal.
    length_class = models.PositiveSmallIntegerField(null=True, blank=True)

    objects = TenureManager()

    class Meta:
        ordering = ["-began_at", "-id"]
        indexes = [
            models.Index(fields=["blob", "container", "account", "began_at"], name="tenure_resource_idx"),
            models.Index(fields=["account", "began_at"], name="tenure_account_idx"),
            models.Index(fields=["lease_fingerprint"], name="tenure_lease_fp_idx"),
            # The auditors' filters (migration 0017, decision 0040): how it ended ("": open), the
            # generation, and the few tenures whose lease was changed (a fingerprint given after
            # a change). No index holds the deadline.
            models.Index(fields=["end"], name="tenure_end_idx"),
            models.Index(fields=["generation"], name="tenure_generation_idx"),
            models.Index(fields=["id"], condition=~Q(fingerprints=F("lease_fingerprint")), name="tenure_changed_idx"),
            # "Held at T" (migration 0020): a range of began_at per length class.
            models.Index(fields=["length_class", "began_at"], name="tenure_length_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.resource_path} generation {self.generation} from {self.began_at:%Y-%m-%d %H:%M:%S}"

    @property
    def resource_path(self) -> str:
        return "/".join(p for p in (self.account, self.container, self.blob) if p)

    @property
    def latest_deadline(self) -> datetime | None:
        """The latest deadline its lease had: as read with the row (the manager's annotation of
        the same name), else asked now. ``deadline`` is the stored one a renewal leaves behind."""
        if "_latest_deadline" not in self.__dict__:
            if self.ended_at is not None or self.pk is None:
                return self.deadline
            self._latest_deadline = type(self).objects.filter(pk=self.pk).values_list(
                "latest_deadline", flat=True).get()
        return self._latest_deadline

    @latest_deadline.setter
    def latest_deadline(self, value: datetime | None) -> None:
        self._latest_deadline = value

    def until(self) -> datetime | None:
        """When it stopped holding the resource (or will, or did without anyone having
        written since: its deadline); None while held without a deadline."""
        return self.ended_at or self.latest_deadline

    def held_at(self, when: datetime) -> bool:
        end = self.until()
        return self.began_at <= when and (end is None or when < end)

    def end_at(self, now: datetime) -> tuple[str, datetime | None]:
        """How it ended and when, as known at ``now``: its recorded end, else "expired" or
        "broken" at a deadline that has passed, else ("", deadline) while held."""
        if self.end:
            return self.end, self.ended_at
        deadline = self.latest_deadline
        if deadline is not None and deadline <= now:
            return (self.End.BROKEN if self.breaking_since else self.End.EXPIRED), deadline
        return "", deadline

    def fingerprint_at(self, when: datetime) -> str:
        """The fingerprint its lease had at ``when`` (after every change made by then)."""
        current = self.lease_fingerprint
        for entry in self.fingerprints.split()[1:]:
            fp, _, since = entry.partition("@")
            if datetime.fromisoformat(since) > when:
                break
            current = fp
        return current

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("tenures are changed by lease writes only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("tenures are kept (only retention prunes settled ones)")
