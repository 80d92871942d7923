"""History retention, the one path that deletes lease history: ``LEASEHOLD_RETENTION_RENEWALS``
(successful renewals, the bulk of history) and ``LEASEHOLD_RETENTION_EVENTS`` (everything else) say
how long events are kept (a number with an optional unit s, m, h or d, a bare number being days;
empty or "forever", the default, keeps them for ever), and one process among all that share the
database (leases/operations/duties.py) deletes older events in short write transactions sized by
time, so that lease writes keep most of the writer's time while a backlog is worked off.
docs/development/architecture.md ("History retention") tells how; the database's triggers allow only
deletes before a horizon the pruner moves forwards."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from engines import postgres
from leases import conf
from leases.domain import clock
from leases.models import HistoryHorizon, LeaseEvent
from leases.operations import duties, ledger, ledger_prune, metrics
from leases.storage import blob_content

log = logging.getLogger("leasehold.retention")

# Seconds a batch's deletes should take, and the most rows a batch deletes
# unless LEASEHOLD_RETENTION_BATCH says otherwise, by database: on SQLite the deletes hold the writer
# lock every lease write waits for (a few lease transactions' worth); on PostgreSQL they lock only the
# rows deleted, and a statement's fixed cost alone can pass SQLite's target (docs/development/architecture.md).
HOLD_TARGET = 0.002
PG_HOLD_TARGET = 0.020
MOST_ROWS = {"sqlite": 100, "postgresql": 2000}

@dataclass(frozen=True)
class Policy:
    renewals: timedelta | None = None  # successful renewals
    events: timedelta | None = None  # everything else
    batch: int | None = None  # most rows per transaction (None: MOST_ROWS); fewer when slow to delete
    pause: float = 0.01

    @classmethod
    def from_settings(cls, settings: conf.Settings) -> "Policy":
        return cls(renewals=settings.retention_renewals, events=settings.retention_events,
                   batch=settings.retention_batch, pause=settings.retention_pause)

    def most_rows(self, vendor: str) -> int:
        return self.batch or MOST_ROWS.get(vendor, MOST_ROWS["sqlite"])

    @property
    def prunes(self) -> bool:
        return self.renewals is not None or self.events is not None

    def horizon(self, now: datetime) -> datetime | None:
        """Events of some kind before this may go: now minus the shortest retention."""
        kept = [d for d in (self.renewals, self.events) if d is not None]
        return now - min(kept) if kept else None

    def horizons(self, now: datetime) -> dict[int, datetime]:
        """Each kind's horizon (HistoryHorizon's rows), for the kinds that are pruned."""
        kept = {HistoryHorizon.RENEWALS: self.renewals, HistoryHorizon.OTHERS: self.events}
        return {row: now - d for row, d in kept.items() if d is not None}


def policy() -> Policy:
    return getattr(settings, "LEASEHOLD_RETENTION", None) or Policy.from_settings(conf.current())


# ------------------------------------------------------------------ the deletes

def advance_horizon(to: datetime, kind: int = HistoryHorizon.OTHERS) -> datetime:
    """Move the horizon of ``kind`` (a HistoryHorizon row) forwards to ``to`` (never backwards: a
    retention made longer keeps the horizon where it was). In the caller's transaction. Returns the
    horizon now in force."""
    current = HistoryHorizon.objects.filter(pk=kind).values_list("delete_before", flat=True).first()
    if current is None:
        HistoryHorizon.objects.create(pk=kind, delete_before=to)
        return to
    if to > current:
        HistoryHorizon.objects.filter(pk=kind).update(delete_before=to)
        return to
    return current


def prune_batch(policy: Policy, now: datetime | None = None, limit: int | None = None) -> int:
    """One short transaction: advance the horizon, delete up to ``limit``
    (default ``policy.most_rows``) events past it. Returns how many were deleted."""
    return _prune_batch(policy, now or clock.now(), limit or policy.most_rows(connection.vendor))[0]


def _prune_batch(policy: Policy, now: datetime, limit: int, floors: dict | None = None) -> tuple[int, float]:
    """(events deleted, seconds the deletes took under the write lock): sealed events only, whole
    parts of blocks from their start, each batch recorded for the ledger (ledger_prune.py); each part
    goes on from its last record, so ``floors`` (where PostgreSQL's scans started) is not needed."""
    horizon = policy.horizon(now)
    if horizon is None:
        return 0, 0.0
    shares = ledger_prune.plan(policy.renewals, policy.events, now, limit)  # reads: outside the write lock
    with transaction.atomic():
        for kind, to in policy.horizons(now).items():
            advance_horizon(to, kind)
        started = time.perf_counter()
        deleted = ledger_prune.apply(shares)
        held = time.perf_counter() - started
    metrics.PRUNED.inc(deleted)
    return deleted, held


def next_batch_size(size: int, held: float, most: int, target: float = HOLD_TARGET) -> int:
    """The next batch's size: scaled towards ``target`` seconds, by at most a
    factor of two either way (one slow batch, a page fault or a preempted
    thread, must not collapse it), between 1 and ``most``."""
    if held <= 0:
        return min(most, size * 2)
    scaled = int(size * target / held)
    return max(1, min(most, size * 2, max(size // 2, scaled)))


def prune(policy: Policy, *, now: datetime | None = None, pace: bool = True,
          stop: threading.Event | None = None) -> int:
    """Batches until nothing is left past the horizon (or ``stop`` is set);
    returns the number of events deleted. Unpaced (a one-off run on a
    server that is not running) every batch is ``policy.most_rows`` rows."""
    total = 0
    if policy.prunes:
        ledger.seal()  # what has settled, so that it may be pruned: only sealed events are
    most = policy.most_rows(connection.vendor)
    target = PG_HOLD_TARGET if postgres.in_use(connection) else HOLD_TARGET
    size = min(most, 25) if pace else most
    floors: dict = {}
    while not (stop and stop.is_set()):
        deleted, held = _prune_batch(policy, now or clock.now(), size, floors)
        total += deleted
        if deleted < size:
            break
        if pace:
            size = next_batch_size(size, held, most, target)
            rest = max(policy.pause, 2 * held)
            if stop is not None:
                stop.wait(rest)
            else:
                time.sleep(rest)
    if total:
        log.info("retention: pruned %d lease events", total)
    return total


# ------------------------------------------------------------------ continuously, in one process

class Pruner(duties.DutyThread):
    """Prunes every ``idle`` seconds, a round at a time, in whichever
    process holds the database's duty lock for that round (leases/operations/duties.py:
    one among every process and instance sharing the database; the others
    find it taken and try next round, so another takes over if one dies)."""

    label = "retention: pruning"
    logger = log

    def __init__(self, policy: Policy, idle: float = 10.0, lock: duties.DutyLock | None = None):
        super().__init__(name="leasehold-retention", idle=idle, lock=lock or duties.DutyLock())
        self.policy = policy

    def round(self) -> None:
        prune(self.policy, stop=self.stopping)
        if not self.stopping.is_set():
            # Large blobs' released and abandoned chunks, in the same bounded batches
            # (they are also collected after every Put Blob).
            blob_content.prune()


_pruner: Pruner | None = None
_pruner_lock = threading.Lock()


def start_pruner() -> Pruner | None:
    """Start this process's pruner if the policy prunes anything (idempotent)."""
    global _pruner
    active = policy()
    if not active.prunes:
        return None
    with _pruner_lock:
        if _pruner is None or not _pruner.is_alive():
            _pruner = Pruner(active, idle=conf.current().retention_idle)
            _pruner.start()
    return _pruner


def stop_pruner() -> None:
    """Stop this process's pruner, if it runs (a server's shutdown: its thread must not outlive it)."""
    global _pruner
    with _pruner_lock:
        if _pruner is not None:
            _pruner.stop()
            _pruner = None


def oldest_event_at():
    return LeaseEvent.objects.order_by("occurred_at").values_list("occurred_at", flat=True).first()
