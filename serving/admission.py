"""A lease request's credentials, checked before it queues (serving/asgi.py: on the event loop from
memory, a database read in the admission thread, its wait bounded by LEASEHOLD_WRITE_WAIT), so
that no client can take the lease lane or the writer from others with requests that fail: one that
fails, or carries none, is answered here in its door's shape, and refusals are bounded per client
address (an IPv6 client by its /64) by a token bucket (``LEASEHOLD_UNAUTHENTICATED_RATE``) and across
addresses by one more (``LEASEHOLD_UNAUTHENTICATED_RATE_TOTAL``), past which they are answered 503/429
without Django, after a pause, and logged at most once per ``LOG_INTERVAL``. Only a database error (or
a read past its wait) lets requests through to their door unchecked, for a second, each charged to its
address's bucket and at most ``UNCHECKED_MAX`` of them;
docs/development/architecture.md ("Credentials before the lease lane") tells how,
docs/decisions/0031 why."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import math
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from django import db

from serving import answers
from leases.domain.paths import door_of
from serving.doors import Door
from leases.auth import principals
from leases.operations import metrics
from leases.domain.refusals import Refusal

log = logging.getLogger("leasehold.admission")

BUSY_MESSAGE = "Too many requests without valid credentials from this address, or from all; retry."
PAUSE_SECONDS = 1.0  # most an answer past an address's bound is held back
UNREAD_SECONDS = 1.0  # after a failed read, the checks read nothing for this long
LOG_INTERVAL = 60.0  # seconds: one line per address at most this often
MAX_ADDRESSES = 65536  # buckets and log marks kept; past it the full ones are forgotten
UNCHECKED_MAX = 100  # requests let through unchecked in one UNREAD_SECONDS after a failed read, per worker
# What lets requests through unchecked: the database failed, or a read outlasted its wait. Anything
# else a check raises is a bug: logged, its request charged as a refusal, and nobody else let through.
DATABASE_ERRORS = (db.OperationalError, db.InterfaceError, TimeoutError)


@functools.lru_cache(maxsize=4096)
def bucket_of(address: str) -> str:
    """The bucket a client address is counted in: an IPv4 address its own
    (an IPv4-mapped IPv6 address too), an IPv6 address its /64 (one
    subscriber's usual allocation), anything else as it is."""
    try:
        found = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(found, ipaddress.IPv6Address):
        if found.ipv4_mapped is not None:
            return str(found.ipv4_mapped)
        return str(ipaddress.IPv6Network((found, 64), strict=False))
    return address


class FailedRequests:
    """Per client address (``bucket_of``): a token bucket for refused
    requests, and when a refusal was last logged; and one bucket for all
    addresses together (``total_rate``, ``total_burst``; 0: no bound)."""

    def __init__(self, rate: float, burst: float, total_rate: float = 0.0, total_burst: float = 0.0):
        self.rate, self.burst = rate, burst
        self.total_rate, self.total_burst = total_rate, total_burst
        self.total = [total_burst, time.monotonic()]  # [tokens, at]
        self.buckets: dict[str, list[float]] = {}  # address -> [tokens, at]
        self.logged: dict[str, list] = {}  # address -> [logged at, refusals since, last code, last path]

    def _tokens(self, address: str, now: float) -> list[float]:
        bucket = self.buckets.get(address)
        if bucket is None:
            if len(self.buckets) >= MAX_ADDRESSES:
                self._forget(now)
            bucket = self.buckets[address] = [self.burst, now]
        else:
            bucket[0] = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate)
            bucket[1] = now
        return bucket

    def _forget(self, now: float) -> None:
        self.buckets = {a: b for a, b in self.buckets.items()
                        if b[0] + (now - b[1]) * self.rate < self.burst}
        if len(self.buckets) >= MAX_ADDRESSES:  # every one of them flooding: start afresh
            self.buckets.clear()

    def _total(self, now: float) -> list[float]:
        total = self.total
        total[0] = min(self.total_burst, total[0] + (now - total[1]) * self.total_rate)
        total[1] = now
        return total

    def has(self, address: str) -> bool:
        now = time.monotonic()
        return (self.rate <= 0 or self._tokens(bucket_of(address), now)[0] >= 1) and \
            (self.total_rate <= 0 or self._total(now)[0] >= 1)

    def take(self, address: str) -> bool:
        """Charge a refusal to the address's bucket and to the total; False
        (nothing charged) if either is empty."""
        now = time.monotonic()
        bucket = self._tokens(bucket_of(address), now) if self.rate > 0 else None
        total = self._total(now) if self.total_rate > 0 else None
        if (bucket is not None and bucket[0] < 1) or (total is not None and total[0] < 1):
            return False
        if bucket is not None:
            bucket[0] -= 1
        if total is not None:
            total[0] -= 1
        return True

    def retry_after(self) -> int:
        return max(1, *(math.ceil(1 / rate) for rate in (self.rate, self.total_rate) if rate > 0))

    def note(self, address: str, code: str, path: str) -> None:
        """Log refusals from ``address`` (its bucket: an IPv6 /64) at most
        once per LOG_INTERVAL."""
        now = time.monotonic()
        address = bucket_of(address)
        mark = self.logged.get(address)
        if mark is None:
            if len(self.logged) >= MAX_ADDRESSES:
                self.logged = {a: m for a, m in self.logged.items() if now - m[0] < LOG_INTERVAL}
            self.logged[address] = [now, 0, code, path]
            log.warning("refused a lease request without valid credentials from %s: %s on %s "
                        "(such refusals from this address are counted, logged at most once a minute)",
                        address or "?", code, path[:200])
            return
        mark[1] += 1
        mark[2], mark[3] = code, path
        if now - mark[0] >= LOG_INTERVAL:
            log.warning("refused %d lease requests without valid credentials from %s in the last %.0f s "
                        "(the last: %s on %s)", mark[1], address or "?", now - mark[0], code, path[:200])
            mark[0], mark[1] = now, 0


class Refused(NamedTuple):
    """The answer to a request refused here, as the front sends it."""

    status: int
    headers: list
    body: bytes
    pause: float = 0.0  # seconds it is held back (past the address's bound)


class Admission:
    """The check in front of the lease lane of one worker process. A read
    waits at most ``read_wait`` seconds; past it the request goes to its
    door unchecked, as when the database fails. ``doors``: each door's lean
    path (serving/doors.py), by name, which renders a refusal in its shape."""

    def __init__(self, *, rate: float, burst: float, read_wait: float, doors: Mapping[str, Door],
                 total_rate: float = 0.0, total_burst: float = 0.0):
        self.doors = doors
        self.reader = ThreadPoolExecutor(1, thread_name_prefix="admission")  # reads credentials
        self.read_wait = read_wait
        self.failed = FailedRequests(rate, burst, total_rate, total_burst)
        self.unread_until = 0.0  # monotonic time until which the checks read nothing
        self.window_at, self.unchecked = 0.0, 0  # requests let through unchecked in the window from window_at
        # An answer past the bound is sent after this pause: the connection's
        # next request waits for it (uvicorn reads a connection's next request
        # only once the answer is sent), so each flooding connection costs the
        # worker one request a pause, not as many as it can send.
        self.pause = min(PAUSE_SECONDS, float(self.failed.retry_after()))

    async def admit(self, scope, environ) -> str | Refused:
        """The request's principal, or the answer to send instead."""
        door = door_of(scope["path"])
        address = environ.get("REMOTE_ADDR", "")
        try:
            try:  # from memory, on the loop
                return principals.identify(environ, door=door, may_look_up=lambda: self.failed.has(address),
                                           may_read=False)
            except principals.Unreadable:  # a credential to read
                if time.monotonic() < self.unread_until:  # the database failed a moment ago: the door checks it
                    return self._unchecked(environ, door, address)
            # Allowed by the address's bucket (else Throttled above); the buckets are the loop's alone.
            read = asyncio.get_running_loop().run_in_executor(
                self.reader, lambda: principals.identify(environ, door=door, may_look_up=lambda: True))
            return await asyncio.wait_for(read, self.read_wait)
        except principals.Refused as refused:
            self.failed.note(address, refused.code, scope["path"])
            if refused.bearer:
                metrics.count_bearer_refusal(door, refused.bearer)
            if refused.throttled or not self.failed.take(address):
                return self._busy(environ, door)
            return self._refusal(environ, door, refused)
        except DATABASE_ERRORS as exc:  # the database unreachable or slow: the door will answer
            # No read for a while (a database that is down could hold each
            # read for a connect timeout); credentials known from memory are
            # still checked.
            if time.monotonic() >= self.unread_until:
                log.warning("lease requests let through to their door unchecked for %.0f s: the credentials "
                            "could not be read (%s: %s)", UNREAD_SECONDS, type(exc).__name__, exc)
            self.unread_until = time.monotonic() + UNREAD_SECONDS
            self.reader.submit(db.close_old_connections)  # the reader's connection, in its thread
            return self._unchecked(environ, door, address)
        except Exception:  # a bug in a check: this request alone goes to its door, charged as a refusal
            log.exception("the check of a lease request's credentials failed on %s", scope["path"][:200])
            return self._unchecked(environ, door, address)

    def _unchecked(self, environ, door: str, address: str) -> str | Refused:
        """A request let through to its door unchecked (the database failed
        a moment ago, or a check failed on it): charged to its address's
        bucket, at most UNCHECKED_MAX a window; past either, the answer past
        the bound."""
        now = time.monotonic()
        if now - self.window_at >= UNREAD_SECONDS:
            self.window_at, self.unchecked = now, 0
        if self.unchecked >= UNCHECKED_MAX or not self.failed.take(address):
            return self._busy(environ, door)
        self.unchecked += 1
        return f"address:{bucket_of(address)}"  # its turns in the lease lane, by the bucket's key

    def close(self) -> None:
        """At the worker's end: the reader's connection closed in its thread."""
        self.reader.submit(db.connections.close_all)
        self.reader.shutdown(wait=False)

    def _busy(self, environ, door: str) -> Refused:
        """The answer past the address's bound (a flood is answered with
        these): too many requests, retry after the bucket refills; its door
        renders it, without Django's handler."""
        refused = Refusal(429, "TooManyRequests", BUSY_MESSAGE, retry_after=self.failed.retry_after())
        return Refused(*answers.refused(self.doors[door], refused, environ), pause=self.pause)

    def _refusal(self, environ, door: str, refused: principals.Refused) -> Refused:
        """The answer to credentials that failed (or none), by their door."""
        return Refused(*answers.refused(self.doors[door], Refusal(refused.status, refused.code, reason=refused.reason,
                                                                  error=refused.error), environ))
