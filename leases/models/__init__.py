"""Accounts, containers, blobs, their leases, and the lease history. A lease lives on the row it
protects (``LeaseFields``), as a session lives on its row in ``django.contrib.sessions``: one read
gives the resource and its lease, one conditional write changes both, and the state is derived from
stored deadlines (indexed) and the clock rather than swept by a thread."""

from __future__ import annotations

import hashlib
import uuid

from django.db import models
from django.db.models import Q

from leases.domain import ledger, machine
from leases.domain.client_headers import USER_AGENT_MAX


class Account(models.Model):
    name = models.CharField(max_length=24, unique=True)
    # Base64 SharedKey keys. They are shared secrets both sides must know in
    # the clear to compute HMACs, so they cannot be stored hashed.
    key1 = models.CharField(max_length=128)
    key2 = models.CharField(max_length=128, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def keys(self) -> list[str]:
        return [k for k in (self.key1, self.key2) if k]


class LeaseFields(models.Model):
    """The lease record of ``machine.LeaseRecord``, stored on its resource,
    plus who took it (from the last acquire) for operators."""

    lease_state = models.CharField(max_length=10, default=machine.AVAILABLE,
                                   choices=[(s, s) for s in machine.STATES])
    lease_id = models.UUIDField(null=True, blank=True)
    lease_duration = models.IntegerField(null=True, blank=True)  # seconds, -1 infinite
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_break_at = models.DateTimeField(null=True, blank=True)
    lease_generation = models.BigIntegerField(default=0)
    lease_acquired_at = models.DateTimeField(null=True, blank=True)
    lease_holder = models.CharField(max_length=200, blank=True)
    lease_holder_address = models.CharField(max_length=64, blank=True)
    lease_holder_request_id = models.CharField(max_length=1024, blank=True)

    class Meta:
        abstract = True

    @property
    def lease_record(self) -> machine.LeaseRecord:
        return machine.LeaseRecord(self.lease_state, self.lease_id, self.lease_duration,
                                   self.lease_expires_at, self.lease_break_at, self.lease_generation)

    def set_lease_record(self, record: machine.LeaseRecord) -> tuple[str, ...]:
        """Store ``record``; return the lease columns whose value changed.
        Saving only those matters on the hot path: SQLite rewrites an index
        whenever an UPDATE sets one of its columns, equal value or not, and
        every page it touches is another page written to the WAL (a renew
        changes only the deadline, so it leaves the state and lease id
        indexes alone)."""
        new = (record.state, record.lease_id, record.duration, record.expires_at, record.break_at,
               record.generation)
        changed = []
        for column, value in zip(self.LEASE_COLUMNS, new):
            if getattr(self, column) != value:
                setattr(self, column, value)
                changed.append(column)
        return tuple(changed)

    LEASE_COLUMNS = ("lease_state", "lease_id", "lease_duration", "lease_expires_at",
                     "lease_break_at", "lease_generation")
    HOLDER_COLUMNS = ("lease_acquired_at", "lease_holder", "lease_holder_address", "lease_holder_request_id")

    def effective_lease_state(self, now) -> str:
        return machine.effective_state(self.lease_record, now)


def effective_state_q(state: str, now, prefix: str = "") -> Q:
    """SQL for "the lease is in ``state`` at ``now``", mirroring
    ``machine.effective_state`` so lists filter in the database."""
    f = lambda name: prefix + name  # noqa: E731
    leased_running = Q(**{f("lease_duration"): machine.INFINITE}) | Q(**{f("lease_expires_at__gt"): now})
    if state == machine.LEASED:
        return Q(**{f("lease_state"): machine.LEASED}) & leased_running
    if state == machine.EXPIRED:
        return Q(**{f("lease_state"): machine.LEASED}) & ~leased_running
    if state == machine.BREAKING:
        return Q(**{f("lease_state"): machine.BREAKING, f("lease_break_at__gt"): now})
    if state == machine.BROKEN:
        return Q(**{f("lease_state"): machine.BROKEN}) | Q(
            **{f("lease_state"): machine.BREAKING, f("lease_break_at__lte"): now})
    return Q(**{f("lease_state"): machine.AVAILABLE})


class Container(LeaseFields):
    account = models.ForeignKey(Account, on_delete=models.CASCADE, related_name="containers")
    name = models.CharField(max_length=63)
    metadata = models.JSONField(default=dict, blank=True)
    public_access = models.CharField(max_length=10, blank=True)
    etag = models.CharField(max_length=40)
    last_modified = models.DateTimeField()
    created_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["account", "name"], name="container_unique_name")]
        indexes = [
            models.Index(fields=["lease_state", "lease_expires_at"], name="container_lease_idx"),
            models.Index(fields=["lease_state", "lease_break_at"], name="container_break_idx"),
            models.Index(fields=["lease_id"], name="container_lease_id_idx"),
        ]
        ordering = ["account__name", "name"]
        permissions = [("break_container_lease", "Can break container lease")]

    def __str__(self) -> str:
        return f"{self.account.name}/{self.name}"


class Blob(LeaseFields):
    container = models.ForeignKey(Container, on_delete=models.CASCADE, related_name="blobs")
    name = models.CharField(max_length=1024)
    # "" for the base blob; the snapshot's timestamp string otherwise.
    snapshot = models.CharField(max_length=32, blank=True, default="")
    # Content up to one chunk (leases.storage.blob_content.CHUNK_BYTES) is kept here,
    # in the row; larger content is a stored version of chunks
    # (BlobContent/BlobChunk), named by ``content_version``, and this is b"".
    content = models.BinaryField(default=b"")
    content_version = models.UUIDField(null=True, blank=True, editable=False)
    size = models.BigIntegerField(default=0)
    content_type = models.CharField(max_length=255, default="application/octet-stream")
    content_encoding = models.CharField(max_length=255, blank=True)
    content_language = models.CharField(max_length=255, blank=True)
    content_disposition = models.CharField(max_length=255, blank=True)
    cache_control = models.CharField(max_length=255, blank=True)
    content_md5 = models.CharField(max_length=32, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    etag = models.CharField(max_length=40)
    last_modified = models.DateTimeField()
    created_at = models.DateTimeField()
    # Defaults in the schema too: rows inserted by SQL (bench, tests' bulk loads) get them.
    blob_type = models.CharField(max_length=16, default="BlockBlob", db_default="BlockBlob")  # or AppendBlob
    # The last Copy Blob onto this blob (all complete synchronously), as Get Blob Properties shows it.
    copy_id = models.CharField(max_length=36, blank=True, default="", db_default="")
    copy_source = models.CharField(max_length=2048, blank=True, default="", db_default="")
    copy_progress = models.CharField(max_length=41, blank=True, default="", db_default="")
    copy_completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["container", "name", "snapshot"], name="blob_unique_name")]
        indexes = [
            models.Index(fields=["lease_state", "lease_expires_at"], name="blob_lease_idx"),
            models.Index(fields=["lease_state", "lease_break_at"], name="blob_break_idx"),
            models.Index(fields=["lease_id"], name="blob_lease_id_idx"),
            models.Index(fields=["name"], name="blob_name_idx"),
            models.Index(fields=["content_version"], name="blob_content_version_idx"),
        ]
        ordering = ["container__name", "name", "snapshot"]
        permissions = [("break_blob_lease", "Can break blob lease")]

    def __str__(self) -> str:
        suffix = f"?snapshot={self.snapshot}" if self.snapshot else ""
        return f"{self.container.account.name}/{self.container.name}/{self.name}{suffix}"


class AppendOnlyQuerySet(models.QuerySet):
    """Lease history's QuerySet: ``.delete()`` and ``.update()`` refuse, as
    the database's triggers do (migration 0005). Only leases.operations.retention
    deletes history, and only events older than the retention horizon."""

    def delete(self):
        raise PermissionError("lease history is append-only (only retention prunes it)")

    # Django's flags on a method, as on QuerySet's own (mypy allows no attributes on a function).
    delete.alters_data = True  # type: ignore[attr-defined]
    delete.queryset_only = True  # type: ignore[attr-defined]

    def update(self, **kwargs):
        raise PermissionError("lease history is append-only")

    update.alters_data = True  # type: ignore[attr-defined]  # as delete's

    def _raw_delete(self, using):
        raise PermissionError("lease history is append-only (only retention prunes it)")

    def bulk_create(self, objs, *args, **kwargs):
        for obj in objs:  # each with its hash, as save() gives it
            obj.row_hash = obj.row_hash or ledger.event_hash(getattr(obj, name) for name in ledger.HASHED)
        return super().bulk_create(objs, *args, **kwargs)


class LeaseEvent(models.Model):
    """One lease action, granted or refused, or a write that ended a lease.

    Append-only: written by the services inside the transaction that made the
    change; names are copied rather than foreign keys, so history outlives the
    resources it describes."""

    class Outcome(models.TextChoices):
        SUCCESS = "success"
        REFUSED = "refused"

    occurred_at = models.DateTimeField(db_index=True)
    action = models.CharField(max_length=16)  # acquire, renew, change, release, break; "ended-by-write", "ended-by-delete"
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    resource_type = models.CharField(max_length=9)  # container | blob
    account = models.CharField(max_length=24)
    container = models.CharField(max_length=63)
    blob = models.CharField(max_length=1024, blank=True)
    # Lease id fingerprints (leases/domain/fingerprints.py), never the ids: an id is a capability.
    lease_fingerprint = models.CharField(max_length=12, null=True, blank=True)
    proposed_lease_fingerprint = models.CharField(max_length=12, null=True, blank=True)
    duration = models.IntegerField(null=True, blank=True)
    break_period = models.IntegerField(null=True, blank=True)
    lease_time = models.IntegerField(null=True, blank=True)
    # After this event: expiry while leased (None: infinite), break time while breaking.
    expires_at = models.DateTimeField(null=True, blank=True)
    state_before = models.CharField(max_length=10, blank=True)
    state_after = models.CharField(max_length=10, blank=True)
    generation = models.BigIntegerField(null=True, blank=True)
    status_code = models.PositiveSmallIntegerField()
    error_code = models.CharField(max_length=64, blank=True)
    actor = models.CharField(max_length=200, blank=True)  # "account:devstoreaccount1", "user:alice"
    via = models.CharField(max_length=8, blank=True)  # azure | api | admin | cli
    reason = models.CharField(max_length=500, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    client_request_id = models.CharField(max_length=1024, blank=True)
    remote_addr = models.CharField(max_length=64, blank=True)
    user_agent = models.CharField(max_length=USER_AGENT_MAX, blank=True)
    # SHA-256 of the columns above (leases/domain/ledger.py), written with the row; NULL for events
    # written before the ledger (migration 0016) or by code that predates it.
    row_hash = models.CharField(max_length=64, null=True, blank=True)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-occurred_at", "-id"]
        indexes = [
            # One resource's events newest first, and a blob's by its name alone
            # (the blob first: one index for both, one page write less an event).
            models.Index(fields=["blob", "container", "account", "occurred_at"], name="event_resource_idx"),
            models.Index(fields=["account", "occurred_at"], name="event_account_idx"),
            models.Index(fields=["lease_fingerprint"], name="event_lease_fp_idx"),
            models.Index(fields=["proposed_lease_fingerprint"], name="event_proposed_fp_idx",  # acquire, change
                         condition=Q(proposed_lease_fingerprint__isnull=False)),
            models.Index(fields=["request_id"], name="event_request_id_idx"),
            models.Index(fields=["client_request_id"], name="event_client_request_id_idx"),
            models.Index(fields=["container", "occurred_at"], name="event_container_idx"),
            models.Index(fields=["action", "occurred_at"], name="event_action_idx"),
            # Refusals only: "success" is nearly every row, and walking the occurred_at index finds
            # those at once; indexing every event cost space and a page write per event
            # (bench/event_cost.py; bench/README.md). The outcome column keeps counts index-only.
            models.Index(fields=["outcome", "occurred_at"], condition=Q(outcome="refused"),
                         name="event_refused_idx"),
            # The action after the list's order (time, then id): an actor's events are read in that order,
            # and the admin's pair of filters (an actor, an action) is decided in the index (0040, 11-30).
            models.Index(fields=["actor", "occurred_at", "id", "action"], name="event_actor_idx"),
            # Every door's events but the Azure door's (the JSON API's, the admin's, the CLI's), so that the
            # Azure door's lease writes write no entry; a filter on via says the condition (api/filters.py).
            models.Index(fields=["via", "id"], condition=~Q(via="azure"), name="event_via_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.occurred_at:%Y-%m-%d %H:%M:%S} {self.action} {self.resource_path} {self.status_code}"

    @property
    def resource_path(self) -> str:
        return "/".join(p for p in (self.account, self.container, self.blob) if p)

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("lease history is append-only")
        if not self.row_hash:
            self.row_hash = ledger.event_hash(getattr(self, name) for name in ledger.HASHED)
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("lease history is append-only")


class HistoryHorizon(models.Model):
    """A retention horizon per kind of event: lease events that occurred before
    ``delete_before`` may be deleted (by leases.operations.retention), younger ones may not;
    row ``OTHERS`` for every event but a successful renewal, row ``RENEWALS`` for those
    (no row: none of that kind). The database's triggers read it, and refuse to move a row
    backwards (migrations 0005, 0018)."""

    OTHERS, RENEWALS = 1, 2

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    delete_before = models.DateTimeField()

    def __str__(self) -> str:
        return f"events before {self.delete_before:%Y-%m-%d %H:%M:%S} may be pruned"


class LeaseClock(models.Model):
    """One row, the database's own account of lease time (leases.domain.clock):
    ``high_water``, the latest time of the database's clock an instance has
    read (every instance advances it about once a second; decisions never use
    an earlier time), and the clock steps instances have seen (the last one's
    time and size), which /health/ready and /metrics report."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    high_water = models.DateTimeField(null=True, blank=True)
    steps = models.BigIntegerField(default=0)
    last_step_at = models.DateTimeField(null=True, blank=True)
    last_step_seconds = models.FloatField(null=True, blank=True)

    def __str__(self) -> str:
        return f"lease time at least {self.high_water}; {self.steps} clock steps seen"


class FencingGeneration(models.Model):
    """The last fencing token (lease generation) handed out for a resource
    name. It lives apart from the resource row, which a delete removes, and
    from the history, which retention prunes, so that a name's tokens keep
    growing across delete, re-create and pruning: a token is never handed out
    twice. Written in the lease transaction of every new lease
    (services.lease_rows.next_generation); read when a resource is created."""

    # sha256 of the names: a short fixed-size key, where the names themselves
    # (up to 1,024 characters of blob name) could outgrow an index entry.
    key = models.CharField(max_length=64, primary_key=True)
    account = models.CharField(max_length=24)
    container = models.CharField(max_length=63)
    blob = models.CharField(max_length=1024, blank=True)  # "" for the container itself
    generation = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{'/'.join(p for p in (self.account, self.container, self.blob) if p)}: {self.generation}"

    @staticmethod
    def key_for(account: str, container: str, blob: str | None = "") -> str:
        return hashlib.sha256(f"{account}\0{container}\0{blob or ''}".encode()).hexdigest()

    @classmethod
    def last(cls, account: str, container: str, blob: str | None = "") -> int:
        """The name's last generation handed out; 0 if none ever was."""
        found = cls.objects.filter(key=cls.key_for(account, container, blob)).values_list("generation", flat=True)
        return next(iter(found), 0)


class ApiRateCount(models.Model):
    """JSON API requests per principal and rate window, counted in the
    database so that every instance sharing a PostgreSQL database counts
    against one limit (leases/api/throttling.py; on SQLite the counters keep
    to a file of their own). Unlogged on PostgreSQL (migration 0009): no WAL,
    no fsync per API request; a crash empties it, which only forgets counts."""

    key = models.TextField()
    slot = models.BigIntegerField()  # the fixed window: Unix time // period
    count = models.IntegerField()
    expires = models.FloatField()  # Unix time after which no window can see it

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key", "slot"], name="api_rate_key_slot")]
        indexes = [models.Index(fields=["expires"], name="api_rate_expires_idx")]


class SharedSecret(models.Model):
    """The secret key (sessions, CSRF, password reset) of every instance of a
    PostgreSQL database (leases/operations/shared_secret.py): one row, written once by
    the first instance that starts. ``key`` is the key itself when the
    database keeps it (no LEASEHOLD_SECRET_KEY), else empty; ``fingerprint``
    identifies the key in use either way, so an instance with another key
    is refused at start."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    key = models.TextField(blank=True)
    fingerprint = models.CharField(max_length=64)
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"secret key {self.fingerprint[:12]}… since {self.created_at:%Y-%m-%d %H:%M:%S}"


def new_etag() -> str:
    return '"0x' + uuid.uuid4().hex[:15].upper() + '"'


from leases.models.access_policy import StoredAccessPolicy  # noqa: E402,F401
from leases.models.tokens import ApiToken  # noqa: E402,F401
from leases.models.ledger_blocks import LedgerBlock, LedgerCheck, LedgerPrune  # noqa: E402,F401


# Large content's storage (leases/storage/blob_content.py), in a module of its own.
from leases.models.content import BlobBlock, BlobChunk, BlobContent, BlobPart  # noqa: E402,F401
from leases.models.tenure import Tenure  # noqa: E402,F401
from leases.models.delegation import UserDelegationKey  # noqa: E402,F401
