"""Watching lease time (leases.domain.clock), in every server process: about once a second, read the
database's clock (on PostgreSQL, raising the high-water mark in the same statement; on SQLite the
machine's clock) and compare it with this process's monotonic clock. A step of more than a second
either way is logged, recorded in leases_leaseclock (once, whichever instance sees it first) for
/metrics and /health/ready, and the process's reading of lease time follows the database's clock
from there. A step back holds lease time at the high-water mark until the clock catches up: leases
then last longer, never less. A step forwards ends every lease that much sooner, which nothing can
undo: the log says so."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from django.db import DatabaseError, close_old_connections, connection, transaction
from django.db.models import F, Q

from engines import postgres
from leases.domain import clock
from leases.models import LeaseClock
from leases.operations import faults, metrics
from leases.storage import dbclock

log = logging.getLogger("leasehold.clock")

PERIOD = 1.0  # seconds between readings
SAME_STEP = timedelta(seconds=10)  # steps of about one size seen this close together are one step
WARN_FOR = timedelta(minutes=10)  # /health/ready warns of a step this long after it


def tick() -> float | None:
    """Read the clock once (module docstring); the step seen, if any."""
    reading, before, after, high_water = dbclock.advance_high_water()
    step = clock.observe(reading, before, after, high_water)
    if step is not None:
        _report(step, reading)
    return step


def _report(step: float, at: datetime) -> None:
    which = "the database's clock" if dbclock.reads_time(connection) else "the machine's clock"
    if step < 0:
        effect = ("lease time holds at its high-water mark until the clock catches up (leases last longer, "
                  "never less)" if dbclock.reads_time(connection) else "leases last that much longer")
    else:
        effect = "leases granted before it end that much sooner"
    log.warning("clock step: %s went %s by %.1f s against this server's monotonic clock; %s -- check the "
                "time synchronisation of the database's host", which, "back" if step < 0 else "forwards",
                abs(step), effect)
    try:
        with transaction.atomic():
            LeaseClock.objects.get_or_create(id=1)
            (LeaseClock.objects.filter(id=1)
             .filter(Q(last_step_at__isnull=True) | Q(last_step_at__lt=at - SAME_STEP)
                     | Q(last_step_at__gt=at + SAME_STEP) | Q(last_step_seconds__lt=step - 1)
                     | Q(last_step_seconds__gt=step + 1))
             .update(steps=F("steps") + 1, last_step_at=at, last_step_seconds=step))
    except DatabaseError as exc:  # reported again by the next instance or step; the log line stays
        log.info("clock step not recorded in the database: %s", exc)


def warnings(conn=connection) -> list[str]:
    """What /health/ready warns of: a clock step in the last WARN_FOR, and
    lease time held at the high-water mark."""
    row = LeaseClock.objects.using(conn.alias).filter(id=1).first()
    if row is None:
        return []
    found = []
    now = dbclock.clock_now(conn)  # the frame the steps are recorded in
    if row.last_step_at is not None and now - WARN_FOR <= row.last_step_at <= now + WARN_FOR:
        found.append(f"clock step: the database's clock went {'back' if row.last_step_seconds < 0 else 'forwards'} "
                     f"by {abs(row.last_step_seconds):.1f} s at {row.last_step_at.isoformat()}")
    if row.high_water is not None and dbclock.reads_time(conn):
        held = (row.high_water - now).total_seconds()
        if held > clock.STEP_SECONDS:
            found.append(f"lease time is held at its high-water mark {row.high_water.isoformat()} for "
                         f"{held:.0f} s more, until the database's clock catches up")
    return found


class Watcher(threading.Thread):
    """The reading, once a second; also this process's watch on the
    database: a reading that fails, or takes longer than ``answer_within``,
    means no primary answers (PostgreSQL), and every connection of the
    process is dropped at once (engines/postgres/), so that no request
    waits on a hung server and new connections find the new primary."""

    def __init__(self, answer_within: float):
        super().__init__(name="leasehold-clock", daemon=True)
        self.first = threading.Event()  # set after the first reading (or its failure)
        self.stopping = threading.Event()
        self.answer_within = answer_within
        self.down: str | None = None  # why the database is not answering, while it is not
        self.down_since = 0.0  # monotonic time of the first failed reading, while it is not

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                with postgres.bounded(self.answer_within):
                    tick()
                self._answered()
            except DatabaseError as exc:
                self._failed(exc)
            except Exception:  # noqa: BLE001 - the watcher must outlive any surprise
                log.exception("clock: reading failed")
            finally:
                self.first.set()
                close_old_connections()
            self.stopping.wait(PERIOD)
        connection.close()

    def _failed(self, exc: DatabaseError) -> None:
        fault = faults.classify(exc)
        connection.close()
        if fault is not None and fault.kind == faults.BUSY:  # slow, not gone
            return
        if self.down is None:
            self.down = fault.detail if fault else str(exc)
            self.down_since = time.monotonic()
            if postgres.in_use(connection):
                postgres.drop_all(f"the database's clock could not be read ({self.down})")
        log.debug("clock: no reading: %s", exc)

    def _answered(self) -> None:
        if self.down is None:
            return
        where = ""
        if postgres.in_use(connection) and connection.connection is not None:
            where = f" (primary {connection.connection.info.host}:{connection.connection.info.port})"
        took = time.monotonic() - self.down_since
        metrics.DB_OUTAGES.observe(took)
        log.warning("database failover or outage over: the database answers again%s after %.1f s, after: %s",
                    where, took, self.down)
        self.down = None


_watcher: Watcher | None = None
_watcher_lock = threading.Lock()


def start(wait: float = 2.0) -> Watcher:
    """Start this process's watcher (idempotent); wait up to ``wait``
    seconds for its first reading, so that this process knows lease time
    before it serves."""
    global _watcher
    write_wait = float(connection.settings_dict.get("OPTIONS", {}).get("write_wait") or 5)
    with _watcher_lock:
        if _watcher is None or not _watcher.is_alive():
            _watcher = Watcher(answer_within=max(1.5, min(5.0, write_wait / 2)))
            _watcher.start()
    _watcher.first.wait(wait)
    return _watcher


def stop() -> None:
    if _watcher is not None:
        _watcher.stopping.set()
