"""What the engines report, to whoever listens: the engines import nothing of Leasehold, so the
server's metrics and the benchmarks' request timings register their functions here when Django's
apps are ready (leases/apps.py); unset, nothing is reported."""

from __future__ import annotations

from collections.abc import Callable


def _nothing(*args) -> None:
    pass


# Seconds a write transaction waited for the writer lock (SQLite).
observe_writer_lock_wait: Callable[[float], None] = _nothing
# Seconds the WAL fsync after a commit took (SQLite).
observe_fsync: Callable[[float], None] = _nothing
# A named point in the current request's time (bench only: LEASEHOLD_TIMING_LOG).
mark: Callable[[str], None] = _nothing
# A timing record of the engine's own, e.g. a checkpoint's hold (bench only); None: timing is off.
record: Callable[[dict], None] | None = None
