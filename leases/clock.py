"""The one clock seam.

Every service asks ``clock.now()`` for the time; nothing else reads the wall
clock for lease decisions. Tests move time with ``clock.advance()`` (or pin it
with ``clock.freeze()``) instead of sleeping. The offset lives in this
process, which is where the test live server runs too.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

_lock = threading.Lock()
_offset = timedelta(0)
_frozen: datetime | None = None


def now() -> datetime:
    """Aware UTC datetime: wall clock plus any offset a test applied."""
    if _frozen is not None:
        return _frozen
    return datetime.now(timezone.utc) + _offset


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
    global _offset, _frozen
    with _lock:
        _offset = timedelta(0)
        _frozen = None
