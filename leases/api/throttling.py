"""Request-rate limits of the JSON API that hold across the server's worker processes and instances:
on SQLite the counters live in a small SQLite file of their own (``LEASEHOLD_THROTTLE_DATABASE``,
one ``BEGIN IMMEDIATE`` per hit, exact however many workers share it, never queued behind lease
writes), on PostgreSQL in an unlogged table of the database (``DatabaseCounter``), because DRF's
cache-based throttles count per worker and lose concurrent hits; the limit is a sliding window
estimated from two fixed ones. Neither is written for every request: each process admits up to
``SLACK`` of a limit on its own and hands those hits over within ``SYNC_SECONDS``
(``LocalShares``); limits under 100 a period are counted exactly. docs/development/architecture.md ("Rate limits of the JSON API")
tells how."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Protocol

from django.conf import settings
from django.db import connection, transaction
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from engines import postgres
from leases.domain import clock
from leases.api.authentication import principal_name

BUSY_TIMEOUT_MS = 10_000  # a count's wait for the counter file's lock, where it may wait


class CounterBusy(Exception):
    """A count that may not wait (``waits=False``: the JSON API's lean path, which the
    event loop may run) found the counter file's lock taken: nothing counted; the
    request is the DRF view's, whose count waits in a lane thread."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS hits (
    key TEXT NOT NULL, window INTEGER NOT NULL, count INTEGER NOT NULL, expires REAL NOT NULL,
    PRIMARY KEY (key, window)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS hits_expires ON hits (expires);
"""


def _into_wal(conn: sqlite3.Connection, *, within: float = 5.0) -> None:
    """PRAGMA journal_mode=WAL. Processes opening a new file together race
    to convert it, and SQLite answers the loser "database is locked" at
    once, without its busy handler: try again, briefly, until converted."""
    give_up = time.monotonic() + within
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > give_up:
                raise
            time.sleep(0.01)


class SlidingWindowCounter:
    def __init__(self, path: str):
        self.path = path
        self._local = threading.local()  # sqlite3 connections are per thread

    def _connection(self, *, waits: bool = True) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        # A connection must not cross a fork (a server that forks workers after loading the app).
        if conn is None or self._local.pid != os.getpid():
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000 if waits else 0, isolation_level=None)
            try:
                _into_wal(conn, within=5.0 if waits else 0)
                conn.execute("PRAGMA synchronous=OFF")
                conn.executescript(SCHEMA)
            except BaseException:
                conn.close()
                raise
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def _begun(self, *, waits: bool) -> sqlite3.Connection:
        """This thread's connection in a write transaction; if it may not wait
        (``waits`` false), the file's lock not free this moment is CounterBusy."""
        if waits:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            return conn
        try:
            conn = self._connection(waits=False)
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            finally:
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise CounterBusy("the rate limit's counter file is being written") from None
            raise
        return conn

    def hit(self, key: str, *, limit: int, period: int, now: float, waits: bool = True) -> float | None:
        """Count one request for ``key`` if it is within ``limit`` per
        ``period`` seconds. Returns None if it was admitted, else the seconds
        until a request would be admitted (refused requests do not count).
        ``waits`` false: CounterBusy rather than a wait for the file's lock."""
        return self.counted(key, limit=limit, period=period, now=now, waits=waits)[0]

    def counted(self, key: str, *, limit: int, period: int, now: float,
                carried: int = 0, waits: bool = True) -> tuple[float | None, int, int]:
        """``hit``, after counting ``carried`` hits this process admitted on
        its own (LocalShares); also the previous and current window's counts
        after it."""
        window, into = divmod(now, period)
        window = int(window)
        overlap = 1 - into / period  # share of the previous window still inside the sliding one
        conn = self._begun(waits=waits)
        try:
            counts = dict(conn.execute("SELECT window, count FROM hits WHERE key = ? AND window >= ?",
                                       (key, window - 1)))
            previous, current = counts.get(window - 1, 0), counts.get(window, 0) + carried
            admitted = previous * overlap + current < limit
            if admitted or carried:
                conn.execute("INSERT INTO hits (key, window, count, expires) VALUES (?, ?, ?, ?) "
                             "ON CONFLICT (key, window) DO UPDATE SET count = count + excluded.count",
                             (key, window, carried + admitted, (window + 2) * period))
            if admitted and current == carried == 0:  # a key's first hit in a window: sweep what no window can see
                conn.execute("DELETE FROM hits WHERE expires < ?", (now,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if not admitted:
            return _wait(previous, current, limit=limit, period=period, window=window, now=now), previous, current
        return None, previous, current + 1


class DatabaseCounter:
    """The same sliding window, counted in the lease database (PostgreSQL),
    where no event loop writes (``waits`` changes nothing: a lane or queue
    thread may wait for a key's row)."""

    def hit(self, key: str, *, limit: int, period: int, now: float, waits: bool = True) -> float | None:
        return self.counted(key, limit=limit, period=period, now=now)[0]

    def counted(self, key: str, *, limit: int, period: int, now: float,
                carried: int = 0, waits: bool = True) -> tuple[float | None, int, int]:
        window, into = divmod(now, period)
        window = int(window)
        overlap = 1 - into / period
        with transaction.atomic(), connection.cursor() as cursor:
            if carried:  # hits this process admitted on its own (LocalShares): counted whatever follows
                cursor.execute(
                    "INSERT INTO leases_apiratecount (key, slot, count, expires) VALUES (%s, %s, %s, %s) "
                    "ON CONFLICT (key, slot) DO UPDATE SET count = leases_apiratecount.count + %s",
                    [key, window, carried, (window + 2) * period, carried])
            cursor.execute(
                "INSERT INTO leases_apiratecount (key, slot, count, expires) VALUES (%s, %s, 1, %s) "
                "ON CONFLICT (key, slot) DO UPDATE SET count = leases_apiratecount.count + 1 RETURNING count, "
                "(SELECT p.count FROM leases_apiratecount p WHERE p.key = %s AND p.slot = %s)",
                [key, window, (window + 2) * period, key, window - 1])
            current, previous = cursor.fetchone()
            current, previous = current - 1, previous or 0  # the counts before this request
            if previous * overlap + current >= limit:
                if carried:  # refused requests do not count; the carried ones do
                    cursor.execute("UPDATE leases_apiratecount SET count = count - 1 WHERE key = %s AND slot = %s",
                                   [key, window])
                else:
                    transaction.set_rollback(True)  # refused requests do not count
                return _wait(previous, current, limit=limit, period=period, window=window, now=now), previous, current
            if current == carried == 0:  # a key's first hit in a window: sweep what no window can see any more
                cursor.execute("DELETE FROM leases_apiratecount WHERE expires < %s", [now])
        return None, previous, current + 1


def _wait(previous: int, current: int, *, limit: int, period: int, window: int, now: float) -> float:
    """Seconds until ``previous * overlap + current`` drops below ``limit``."""
    if current >= limit:
        # Only in the next window, once this window's weight has decayed enough.
        return (window + 1) * period - now + period * (1 - limit / current)
    return (window + 1 - (limit - current) / previous) * period - now


SLACK = 0.01  # the share of a limit a process admits without the shared counter
SYNC_SECONDS = 1.0  # ... and for at most this long
SHARES_MAX = 10_000  # bound on the keys a process keeps its share of (past it, all are handed over afresh)


class _Share:
    __slots__ = ("window", "previous", "current", "pending", "synced")

    def __init__(self, window: int, previous: int, current: int, synced: float):
        self.window, self.previous, self.current, self.pending, self.synced = window, previous, current, 0, synced


class SharedCounter(Protocol):
    """What LocalShares hands hits to: a SlidingWindowCounter or a DatabaseCounter."""

    def hit(self, key: str, *, limit: int, period: int, now: float, waits: bool = True) -> float | None: ...

    def counted(self, key: str, *, limit: int, period: int, now: float,
                carried: int = 0, waits: bool = True) -> tuple[float | None, int, int]: ...


class LocalShares:
    """Each key's hits admitted in this process since it last counted in
    the shared counter, and the counts it read then (module docstring)."""

    def __init__(self):
        self.shares: dict[str, _Share] = {}
        self.lock = threading.Lock()

    def hit(self, shared: SharedCounter, key: str, *, limit: int, period: int,
            now: float, waits: bool = True) -> float | None:
        slack = int(limit * SLACK)
        if slack < 1:
            return shared.hit(key, limit=limit, period=period, now=now, waits=waits)
        window, into = divmod(now, period)
        window = int(window)
        name, key = key, f"{getattr(shared, 'path', '')}\0{key}"  # a share per counter file (tests have one each)
        with self.lock:
            share = self.shares.get(key)
            if (share is not None and share.window == window and share.pending < slack
                    and 0 <= now - share.synced < SYNC_SECONDS
                    and share.previous * (1 - into / period) + share.current + share.pending < limit):
                share.pending += 1
                return None
            carried = share.pending if share is not None else 0
            if share is not None:
                share.pending = 0
        try:
            wait, previous, current = shared.counted(name, limit=limit, period=period, now=now, carried=carried,
                                                     waits=waits)
        except BaseException:  # nothing counted (CounterBusy, a count that may not wait): the hits kept for later
            with self.lock:
                share = self.shares.get(key)
                if share is not None:
                    share.pending += carried
            raise
        with self.lock:
            share = self.shares.get(key)
            if share is None:
                if len(self.shares) >= SHARES_MAX:
                    self.shares.clear()
                share = self.shares[key] = _Share(window, previous, current, now)
            else:
                share.window, share.previous, share.current, share.synced = window, previous, current, now
        return wait


_shares = LocalShares()
_counters: dict[str, SlidingWindowCounter] = {}
_counters_lock = threading.Lock()


def counter() -> SlidingWindowCounter | DatabaseCounter:
    if postgres.in_use():  # instances on other hosts count in the same place
        return DatabaseCounter()
    path = settings.LEASEHOLD_THROTTLE_DATABASE
    with _counters_lock:
        if path not in _counters:
            _counters[path] = SlidingWindowCounter(path)
        return _counters[path]


# environ: this request was counted already, by the lean path (leases/api/lean.py), which checks it
# again where the event loop could not write it at once.
COUNTED = "leasehold.api_counted"


class PrincipalRateThrottle(SimpleRateThrottle):
    """The ``api`` rate per principal (token, user or account). Only
    authenticated requests get this far; anonymous ones are refused first."""

    scope = "api"

    def __init__(self, *, waits: bool = True):
        super().__init__()
        self.waits = waits  # False: the counter file busy is CounterBusy, not a wait (the lean path's)

    def get_rate(self):
        # Read at request time: DRF's class attribute is frozen at import.
        # No rate (LEASEHOLD_API_RATE set empty) means no limit.
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope) or None

    def get_cache_key(self, request, view):
        return f"{self.scope}:{principal_name(request)}"

    def allow_request(self, request, view):
        if self.rate is None:
            return True
        wait = request.META.get("leasehold.wait")
        if wait is not None and wait.principal is not None:  # a waiting acquire's next attempt: one request
            return True
        if request.META.get(COUNTED):
            return True
        self.retry_after = _shares.hit(counter(), self.get_cache_key(request, view), limit=self.num_requests,
                                       period=self.duration, now=clock.now().timestamp(), waits=self.waits)
        return self.retry_after is None

    def wait(self):
        return self.retry_after
