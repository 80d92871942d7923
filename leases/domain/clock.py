"""The one clock seam, lease time, so that every decision about a lease is made by one clock that
never runs backwards: the database's on PostgreSQL (read in the statement that locks the row,
leases.storage.dbclock, so that several instances decide by one clock whatever their own say), the
machine's on SQLite (read once per transaction, after the writer lock); ``decide()`` turns such a
reading into the time of a decision, ``now()`` is this process's reading without a round trip, for
what is shown rather than decided, and tests move time with ``advance()`` or ``freeze()`` instead of
sleeping. docs/development/architecture.md ("Lease time") tells how."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

STEP_SECONDS = 1.0  # a larger difference between the database's clock and the monotonic one is a step

_lock = threading.Lock()
_offset = timedelta(0)
_frozen: datetime | None = None
# The database's clock as last read: (its time, the monotonic time then, the
# reading's uncertainty in seconds); None until a reading.
_anchor: tuple[datetime, float, float] | None = None
_high_water: datetime | None = None  # the database's high-water mark as last read


def now() -> datetime:
    """Aware UTC datetime: lease time as this process knows it (module docstring)."""
    if _frozen is not None:
        return _frozen
    anchor = _anchor
    if anchor is None:
        reading = datetime.now(timezone.utc)
    else:
        reading = anchor[0] + timedelta(seconds=time.monotonic() - anchor[1])
    floor = _high_water
    if floor is not None and floor > reading:
        reading = floor
    return reading + _offset


def decide(raw: datetime | None = None, high_water: datetime | None = None, *,
           floor: datetime | None = None) -> datetime:
    """The time of a decision from ``raw``, the database's clock read after
    the row lock (None: the machine's clock, read now), floored by the
    database's ``high_water`` mark and by ``floor``, the latest time a
    decision on the same row is known to have used (None: none)."""
    if _frozen is not None:
        return _frozen
    if raw is None:
        raw = datetime.now(timezone.utc)
    elif raw.tzinfo is not timezone.utc:
        raw = raw.astimezone(timezone.utc)
    if high_water is not None and high_water > raw:
        raw = high_water.astimezone(timezone.utc)
    raw += _offset
    if floor is not None and floor > raw:
        return floor.astimezone(timezone.utc)
    return raw


def observe(raw: datetime, before: float, after: float, high_water: datetime | None = None) -> float | None:
    """Take ``raw``, the database's clock read by a statement sent at
    monotonic time ``before`` and answered at ``after``, as this process's
    reading of it; return the step in seconds (positive: forwards) if it
    differs from what the previous reading and the monotonic clock give by
    more than STEP_SECONDS, else None."""
    global _anchor, _high_water
    raw = raw.astimezone(timezone.utc)
    middle, spread = (before + after) / 2, (after - before) / 2
    with _lock:
        previous = _anchor
        _anchor = (raw, middle, spread)
        if high_water is not None:
            _high_water = high_water.astimezone(timezone.utc)
    if previous is None:
        return None
    expected = previous[0] + timedelta(seconds=middle - previous[1])
    step = (raw - expected).total_seconds()
    if abs(step) <= STEP_SECONDS + spread + previous[2]:
        return None
    return step


def advance(seconds: float) -> None:
    global _offset, _frozen
    with _lock:
        _offset += timedelta(seconds=seconds)
        if _frozen is not None:
            _frozen += timedelta(seconds=seconds)


def freeze(at: datetime | None = None) -> datetime:
    """Stop the clock (at ``at`` or the current reading) until ``reset()``."""
    global _frozen
    with _lock:
        _frozen = at or now()
        return _frozen


def reset() -> None:
    """Back to the real clock (tests): no offset, nothing pinned, no reading."""
    global _offset, _frozen, _anchor, _high_water
    with _lock:
        _offset = timedelta(0)
        _frozen = None
        _anchor = None
        _high_water = None
