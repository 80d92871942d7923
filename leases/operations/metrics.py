"""Prometheus metrics, with the standard prometheus_client library, served at /metrics
(leases/api/health.py) to a superuser or a user (session or API token) with
``leases.view_leaseevent``, like the history itself: counters and histograms of what this process
did, gauges of the database read at scrape time, counters of what happened to leases, and which
instance answered, so that an operator can alert on the server and on the leases it holds
(docs/deploy/ has the rules). docs/development/architecture.md ("Metrics") tells each kind; the hot
path pays one counter increment and one histogram observation per lease request (its cost:
bench/README.md)."""

from __future__ import annotations

import math
import os
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily

from engines import postgres
from leases.domain import paths

# Label values come from fixed sets, never from the request: a bogus action
# name must not create a new time series.
ACTIONS = frozenset({"acquire", "renew", "change", "release", "break"})
DOORS = frozenset({"azure", "api", "admin", "cli"})

LEASE_REQUESTS = Counter("leasehold_lease_requests", "Lease requests, by action, door and outcome "
                         "(success, refused: a 4xx answer recorded in the history, error: anything else).",
                         ["action", "door", "outcome"])
LEASE_LATENCY = Histogram("leasehold_lease_request_seconds", "Time a lease request spent in the service "
                          "(transaction included), by action and door.", ["action", "door"],
                          buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
WRITER_LOCK_WAIT = Histogram("leasehold_sqlite_writer_lock_wait_seconds",
                             "Time a write transaction waited for the SQLite writer lock.",
                             buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1, 5, 30))
FSYNC = Histogram("leasehold_sqlite_fsync_seconds", "Time one fsync of the SQLite write-ahead log took.",
                  buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1))
UNAVAILABLE = Counter("leasehold_http_unavailable_responses", "503 answers, by door.", ["door"])
FRONT_REFUSALS = Counter("leasehold_http_front_refusals", "Requests the HTTP front refused before any door saw "
                         "them, by status: 431 and 414 (head too big), 413 (body too big), 408 (headers or body "
                         "too slow; for headers the connection is closed without an answer), 400 (not HTTP, or "
                         "a bad Content-Length).", ["status"])
FRONT_STATUSES = frozenset({400, 408, 413, 414, 431})
BEARER_REFUSALS = Counter("leasehold_bearer_refusals", "Bearer tokens (OpenID Connect) refused, by door and reason "
                          "(expired, audience, issuer, signature, unknown_key, ...).", ["door", "reason"])
BEARER_REASONS = frozenset({"expired", "not_yet_valid", "audience", "issuer", "signature", "unknown_key",
                            "keys_unavailable", "malformed", "not_configured", "old_version", "role"})
# What happened to leases, counted once the lease transaction committed (services.lease_actions),
# whichever door asked. No label per lease: LEASEHOLD_WATCHED_LEASES names the ones to watch.
HOLDER_CHANGES = Counter("leasehold_lease_holder_changes", "Leases acquired by a holder (lease id) other than "
                         "the one before, or first acquired, by resource.", ["resource"])
RAN_OUT = Counter("leasehold_leases_ran_out", "Leases that ran out without a release (their holder stopped "
                  "renewing), counted by the next lease action, write or delete on them, by resource.",
                  ["resource"])
BREAKS = Counter("leasehold_lease_breaks", "Leases broken, by resource.", ["resource"])
RENEWALS_REFUSED = Counter("leasehold_lease_renewals_refused", "Renewals refused, by resource and reason "
                           "(the Azure error code).", ["resource", "reason"])
# The refusals a renew can meet (machine.renew, its parameters and conditions, a missing resource).
RENEWAL_REASONS = frozenset({"LeaseIdMismatchWithLeaseOperation", "LeaseIsBrokenAndCannotBeRenewed",
                             "LeaseNotPresentWithLeaseOperation", "MissingRequiredHeader", "InvalidHeaderValue",
                             "ConditionNotMet", "BlobNotFound", "ContainerNotFound"})
PRUNED = Counter("leasehold_history_pruned_events", "Lease events deleted by retention.")
# Each worker process watches the database (leases/operations/clockwatch.py) and times each outage it saw.
DB_OUTAGES = Histogram("leasehold_database_outage_seconds", "Outages of the database as each worker process saw "
                       "them, ended: no primary answered (a failover, or an outage) from the first failed reading "
                       "of the database's clock to the next good one.",
                       buckets=(1, 2, 5, 10, 15, 20, 30, 45, 60, 120, 300))
# Summed over this instance's live workers (a dead worker's waiters went with it).
WAITING = Gauge("leasehold_waiting_acquires", "Acquires waiting for a held lease (x-leasehold-wait) in this "
                "instance.", multiprocess_mode="livesum")


_children: dict = {}  # (action, door, outcome) -> (counter, histogram): .labels() costs more than .inc()


def lease_request(action, door: str, outcome: str, seconds: float) -> None:
    key = (action if action in ACTIONS else "other", door if door in DOORS else "other", outcome)
    children = _children.get(key)
    if children is None:  # at most 6 x 5 x 3 keys: labels never come from the request as they are
        children = _children[key] = (LEASE_REQUESTS.labels(*key), LEASE_LATENCY.labels(*key[:2]))
    children[0].inc()
    children[1].observe(seconds)


def lease_committed(action, resource: str, outcome, refusal, previous_id=None) -> None:
    """A lease action's committed result (``outcome``: the machine's, or None
    if refused with ``refusal``): holder changes, leases that ran out, breaks,
    refused renewals. ``previous_id``: the lease id the row had before, kept
    after an expiry or a break (as Azure keeps it), not after a release; an
    acquire under that same id is the same holder back, not a change."""
    if refusal is not None:
        if action == "renew":
            code = getattr(refusal, "code", "")
            RENEWALS_REFUSED.labels(resource, code if code in RENEWAL_REASONS else "other").inc()
        return
    if outcome is None:
        return
    if outcome.state_before == "expired":
        RAN_OUT.labels(resource).inc()
    if action == "acquire" and outcome.state_before != "leased" and outcome.lease_id != previous_id:
        HOLDER_CHANGES.labels(resource).inc()
    elif action == "break":
        BREAKS.labels(resource).inc()


def lease_ended(resource: str, state_before: str) -> None:
    """A committed write or delete ended a lease (services.access): one that
    had run out counts, since no lease action will find it expired now."""
    if state_before == "expired":
        RAN_OUT.labels(resource).inc()


def timed_lease_action(fn):
    """Wrap services.lease_actions._lease_action: count and time every lease request."""
    from leases.domain.errors import LeaseholdError

    def wrapper(action, *, actor, **kwargs):
        started = time.perf_counter()
        outcome = "error"
        try:
            result = fn(action, actor=actor, **kwargs)
            outcome = "success"
            return result
        except LeaseholdError:
            outcome = "refused"
            raise
        finally:
            lease_request(action, actor.via, outcome, time.perf_counter() - started)

    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


def observe_writer_lock_wait(seconds: float) -> None:
    WRITER_LOCK_WAIT.observe(seconds)


def observe_fsync(seconds: float) -> None:
    FSYNC.observe(seconds)


def count_unavailable(path: str) -> None:
    """One 503 answered on ``path``, by door."""
    UNAVAILABLE.labels(paths.site_of(path)).inc()


def count_bearer_refusal(door: str, reason: str) -> None:
    BEARER_REFUSALS.labels(door, reason if reason in BEARER_REASONS else "other").inc()


def count_front_refusal(status: int) -> None:
    """One request refused by the HTTP front (serving/front.py), by status."""
    if status in FRONT_STATUSES:
        FRONT_REFUSALS.labels(str(status)).inc()


def counting_unavailable(app):
    """WSGI middleware: count 503 answers, by door (first path segment)."""

    def counted(environ, start_response):
        def start(status, headers, exc_info=None):
            if status.startswith("503"):
                count_unavailable(environ.get("PATH_INFO", ""))
            return start_response(status, headers, exc_info)

        return app(environ, start)

    return counted


# ------------------------------------------------------------------ the database's gauges

class DatabaseCollector:
    """Gauges read from the database when scraped."""

    def collect(self):
        from django.db import connection

        from leases.domain import clock, machine
        from leases.models import Blob, Container, LeaseEvent, effective_state_q

        now = clock.now()
        leases = GaugeMetricFamily("leasehold_leases", "Containers and blobs by effective lease state.",
                                   labels=["resource", "state"])
        for resource, model in (("container", Container), ("blob", Blob)):
            for state in machine.STATES:
                leases.add_metric([resource, state], model.objects.filter(effective_state_q(state, now)).count())
        yield leases
        events = GaugeMetricFamily("leasehold_history_events", "Lease events in the history.")
        events.add_metric([], LeaseEvent.objects.count())
        yield events
        oldest = LeaseEvent.objects.order_by("occurred_at").values_list("occurred_at", flat=True).first()
        oldest_g = GaugeMetricFamily("leasehold_history_oldest_event_timestamp_seconds",
                                     "When the oldest lease event in the history occurred (Unix time); "
                                     "0 if there is none.")
        oldest_g.add_metric([], oldest.timestamp() if oldest else 0)
        yield oldest_g
        yield from _clock_steps()
        if not postgres.in_use(connection):
            with connection.cursor() as cur:
                cur.execute("PRAGMA page_count")
                pages = cur.fetchone()[0]
                cur.execute("PRAGMA page_size")
                size = pages * cur.fetchone()[0]
            db = GaugeMetricFamily("leasehold_database_bytes", "Size of the SQLite database file (its WAL "
                                   "not included).")
            db.add_metric([], size)
            yield db


class ReadinessCollector:
    """leasehold_ready: 1 if ``problems()`` (what /health/ready checks: the
    database migrated, writable, its history append-only) finds none, else 0."""

    def __init__(self, problems):
        self.problems = problems

    def collect(self):
        ready = GaugeMetricFamily("leasehold_ready", "1 if this instance can serve (what /health/ready checks), "
                                  "else 0.")
        ready.add_metric([], 0 if self.problems() else 1)
        yield ready


class WatchedCollector:
    """Each lease LEASEHOLD_WATCHED_LEASES names, read at scrape time
    (selectors.lease_unheld_since): leasehold_watched_lease_held, whether it
    has a holder now (leased or breaking; 0 for one that does not exist),
    and leasehold_watched_lease_unheld_seconds, for how long it has had none
    (0 while held, +Inf if nothing says: no such resource, no history). An
    alert on the seconds fires N s after the lease lost its holder, however
    long Prometheus itself has been watching."""

    def collect(self):
        from django.conf import settings

        from leases.domain import clock
        from leases.services.selectors import lease_unheld_since

        names = getattr(settings, "LEASEHOLD_WATCHED_LEASES", [])
        if not names:
            return
        now = clock.now()
        held = GaugeMetricFamily("leasehold_watched_lease_held", "1 if the watched lease (LEASEHOLD_WATCHED_LEASES) "
                                 "has a holder (leased or breaking), else 0.", labels=["lease"])
        unheld = GaugeMetricFamily("leasehold_watched_lease_unheld_seconds", "How long the watched lease "
                                   "(LEASEHOLD_WATCHED_LEASES) has had no holder: 0 while held, +Inf if unknown "
                                   "(no such resource, no history).", labels=["lease"])
        for name in names:
            account, container, *blob = name.split("/", 2)
            holder, since = lease_unheld_since(account=account, container=container, blob=blob[0] if blob else "",
                                               now=now)
            held.add_metric([name], 1 if holder else 0)
            unheld.add_metric([name], 0.0 if holder else math.inf if since is None
                              else max(0.0, (now - since).total_seconds()))
        yield held
        yield unheld


class InstanceCollector:
    """leasehold_instance_info: this instance's name, host and process."""

    def collect(self):
        import socket

        from leases import conf

        settings = conf.current()
        host = socket.gethostname()
        info = InfoMetricFamily("leasehold_instance", "The instance that answered this scrape (LEASEHOLD_INSTANCE, "
                                "else host:port), its host name and the process id of the worker that answered.")
        info.add_metric([], {"instance": settings.instance or f"{host}:{settings.bind[1]}", "hostname": host,
                             "pid": str(os.getpid())})
        yield info


def _clock_steps():
    """Clock steps seen by any instance (leases/operations/clockwatch.py), from the database."""
    from prometheus_client.core import CounterMetricFamily

    from leases.models import LeaseClock

    row = LeaseClock.objects.filter(id=1).first()
    steps = CounterMetricFamily("leasehold_clock_steps", "Steps of the database's clock of more than a second "
                                "either way (against a server's monotonic clock), as recorded in the database.")
    steps.add_metric([], row.steps if row else 0)
    yield steps
    last = GaugeMetricFamily("leasehold_clock_last_step_seconds", "Size of the last clock step (negative: back); "
                             "0 if none was seen.")
    last.add_metric([], (row.last_step_seconds or 0) if row else 0)
    yield last


def exposition(readiness_problems=None) -> bytes:
    """The text a scrape gets: every process's counters, the database's
    gauges; readiness as ``readiness_problems()`` finds it (leases/api/health.py)."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        from prometheus_client import REGISTRY

        for collector in (LEASE_REQUESTS, LEASE_LATENCY, WRITER_LOCK_WAIT, FSYNC, UNAVAILABLE, FRONT_REFUSALS, PRUNED,
                          HOLDER_CHANGES, RAN_OUT, BREAKS, RENEWALS_REFUSED, DB_OUTAGES, BEARER_REFUSALS):
            registry.register(collector)
        del REGISTRY  # the process-wide registry also holds the library's process/GC metrics
    if readiness_problems is not None:
        registry.register(ReadinessCollector(readiness_problems))
    registry.register(DatabaseCollector())
    registry.register(WatchedCollector())
    registry.register(InstanceCollector())
    return generate_latest(registry)
