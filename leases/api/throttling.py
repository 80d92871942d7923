"""Request-rate limits that hold across the server's worker processes
(uvicorn's, serving/server.py).

Why not DRF's cache-based throttles: with LocMemCache every worker counts on
its own (N workers allow N times the rate), and every cache backend is used
read-modify-write (get the history, append, set), so concurrent workers
overwrite each other's hits. Why not a table in a SQLite lease database: every API
request would then queue for SQLite's single writer lock behind lease
writes, which are what this server is for.

So the counters live in a small SQLite file of their own
(``LEASEHOLD_THROTTLE_DATABASE``). Each hit is one ``BEGIN IMMEDIATE``
transaction, which SQLite serialises across processes, so a limit is exact
however many workers share the file. It is written with ``synchronous=OFF``:
losing the last counts in a power cut is harmless. The limit is a sliding
window, estimated from the counts of the current and the previous fixed
window (the previous one weighted by how much of it still overlaps), which
avoids the double burst a fixed window allows at its boundary.

On PostgreSQL, where several instances (hosts) share the database, the
counters are in the database instead (``DatabaseCounter``, the table
leases_apiratecount): PostgreSQL has no single writer lock to queue
behind, and a per-host file would let each instance admit the whole rate.
One statement per hit counts it and reads the previous window; the upsert
locks the key's row until commit, so hits on one key are serialised across
instances, and a refused hit rolls back its count. The table is unlogged:
no WAL and no fsync per API request.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

from django.conf import settings
from django.db import connection, transaction
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from .. import clock
from .authentication import principal_name

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

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        # A connection must not cross a fork (a server that forks workers after loading the app).
        if conn is None or self._local.pid != os.getpid():
            conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            _into_wal(conn)
            conn.execute("PRAGMA synchronous=OFF")
            conn.executescript(SCHEMA)
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def hit(self, key: str, *, limit: int, period: int, now: float) -> float | None:
        """Count one request for ``key`` if it is within ``limit`` per
        ``period`` seconds. Returns None if it was admitted, else the seconds
        until a request would be admitted (refused requests do not count)."""
        window, into = divmod(now, period)
        window = int(window)
        overlap = 1 - into / period  # share of the previous window still inside the sliding one
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            counts = dict(conn.execute("SELECT window, count FROM hits WHERE key = ? AND window >= ?",
                                       (key, window - 1)))
            previous, current = counts.get(window - 1, 0), counts.get(window, 0)
            if previous * overlap + current >= limit:
                conn.execute("COMMIT")
                return _wait(previous, current, limit=limit, period=period, window=window, now=now)
            conn.execute("INSERT INTO hits (key, window, count, expires) VALUES (?, ?, 1, ?) "
                         "ON CONFLICT (key, window) DO UPDATE SET count = count + 1",
                         (key, window, (window + 2) * period))
            if current == 0:  # a key's first hit in a window: sweep what no window can see any more
                conn.execute("DELETE FROM hits WHERE expires < ?", (now,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return None


class DatabaseCounter:
    """The same sliding window, counted in the lease database (PostgreSQL)."""

    def hit(self, key: str, *, limit: int, period: int, now: float) -> float | None:
        window, into = divmod(now, period)
        window = int(window)
        overlap = 1 - into / period
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO leases_apiratecount (key, slot, count, expires) VALUES (%s, %s, 1, %s) "
                "ON CONFLICT (key, slot) DO UPDATE SET count = leases_apiratecount.count + 1 RETURNING count, "
                "(SELECT p.count FROM leases_apiratecount p WHERE p.key = %s AND p.slot = %s)",
                [key, window, (window + 2) * period, key, window - 1])
            current, previous = cursor.fetchone()
            current, previous = current - 1, previous or 0  # the counts before this request
            if previous * overlap + current >= limit:
                transaction.set_rollback(True)  # refused requests do not count
                return _wait(previous, current, limit=limit, period=period, window=window, now=now)
            if current == 0:  # a key's first hit in a window: sweep what no window can see any more
                cursor.execute("DELETE FROM leases_apiratecount WHERE expires < %s", [now])
        return None


def _wait(previous: int, current: int, *, limit: int, period: int, window: int, now: float) -> float:
    """Seconds until ``previous * overlap + current`` drops below ``limit``."""
    if current >= limit:
        # Only in the next window, once this window's weight has decayed enough.
        return (window + 1) * period - now + period * (1 - limit / current)
    return (window + 1 - (limit - current) / previous) * period - now


_counters: dict[str, SlidingWindowCounter] = {}
_counters_lock = threading.Lock()


def counter() -> SlidingWindowCounter | DatabaseCounter:
    if connection.vendor == "postgresql":  # instances on other hosts count in the same place
        return DatabaseCounter()
    path = settings.LEASEHOLD_THROTTLE_DATABASE
    with _counters_lock:
        if path not in _counters:
            _counters[path] = SlidingWindowCounter(path)
        return _counters[path]


class PrincipalRateThrottle(SimpleRateThrottle):
    """The ``api`` rate per principal (token, user or account). Only
    authenticated requests get this far; anonymous ones are refused first."""

    scope = "api"

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
        self.retry_after = counter().hit(self.get_cache_key(request, view), limit=self.num_requests,
                                         period=self.duration, now=clock.now().timestamp())
        return self.retry_after is None

    def wait(self):
        return self.retry_after
