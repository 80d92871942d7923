"""A lease request's credentials, checked before it queues (serving/asgi.py: on the event loop from
memory, a database read in the admission thread, its wait bounded by LEASEHOLD_WRITE_WAIT), so
that no client can take the lease lane or the writer from others with requests that fail: one that
fails, or carries none, is answered here in its door's shape, and refusals are bounded per client
address by a token bucket (``LEASEHOLD_UNAUTHENTICATED_RATE``), past which they are answered 503/429
without Django, after a pause, and logged at most once per ``LOG_INTERVAL``;
docs/development/architecture.md ("Credentials before the lease lane") tells how,
docs/decisions/0031 why."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from email.utils import formatdate

from django import db

from serving import answers
from serving.doors import LeanPath, door_of
from leases.auth import principals
from leases.domain.errors import MESSAGES, LeaseholdError

log = logging.getLogger("leasehold.admission")

BUSY_MESSAGE = "Too many requests without valid credentials from this address; retry."
BUSY_XML_HEAD = ('\ufeff<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
                 f"<Message>{BUSY_MESSAGE}\n")
PAUSE_SECONDS = 1.0  # most an answer past an address's bound is held back
UNREAD_SECONDS = 1.0  # after a failed read, the checks read nothing for this long
LOG_INTERVAL = 60.0  # seconds: one line per address at most this often
MAX_ADDRESSES = 65536  # buckets and log marks kept; past it the full ones are forgotten


class FailedRequests:
    """Per client address: a token bucket for refused requests, and when a
    refusal was last logged."""

    def __init__(self, rate: float, burst: float):
        self.rate, self.burst = rate, burst
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

    def has(self, address: str) -> bool:
        return self.rate <= 0 or self._tokens(address, time.monotonic())[0] >= 1

    def take(self, address: str) -> bool:
        if self.rate <= 0:
            return True
        bucket = self._tokens(address, time.monotonic())
        if bucket[0] < 1:
            return False
        bucket[0] -= 1
        return True

    def retry_after(self) -> int:
        return max(1, math.ceil(1 / self.rate)) if self.rate > 0 else 1

    def note(self, address: str, code: str, path: str) -> None:
        """Log refusals from ``address`` at most once per LOG_INTERVAL."""
        now = time.monotonic()
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


class Admission:
    """The check in front of the lease lane of one worker process. A read
    waits at most ``read_wait`` seconds; past it the request goes to its
    door unchecked, as when the database fails. ``doors``: each door's lean
    path (serving/doors.py), by name: the Azure door's answer to a refusal
    and its x-ms-version."""

    def __init__(self, *, rate: float, burst: float, read_wait: float, doors: Mapping[str, LeanPath]):
        self.azure = doors["azure"]
        self.busy_version = self.azure.version.encode()
        self.reader = ThreadPoolExecutor(1, thread_name_prefix="admission")  # reads credentials
        self.read_wait = read_wait
        self.failed = FailedRequests(rate, burst)
        self.unread_until = 0.0  # monotonic time until which the checks read nothing
        # An answer past the bound is sent after this pause: the connection's
        # next request waits for it (uvicorn reads a connection's next request
        # only once the answer is sent), so each flooding connection costs the
        # worker one request a pause, not as many as it can send.
        self.pause = min(PAUSE_SECONDS, float(self.failed.retry_after()))

    async def admit(self, scope, environ) -> str | tuple[int, list, bytes]:
        """The request's principal, or the answer to send instead."""
        door = door_of(scope["path"])
        address = environ.get("REMOTE_ADDR", "")
        try:
            try:  # from memory, on the loop
                return principals.identify(environ, door=door, may_look_up=lambda: self.failed.has(address),
                                           may_read=False)
            except principals.Unreadable:  # a credential to read
                if time.monotonic() < self.unread_until:  # the database failed a moment ago: the door checks it
                    return f"address:{address}"
            # Allowed by the address's bucket (else Throttled above); the buckets are the loop's alone.
            read = asyncio.get_running_loop().run_in_executor(
                self.reader, lambda: principals.identify(environ, door=door, may_look_up=lambda: True))
            return await asyncio.wait_for(read, self.read_wait)
        except principals.Refused as refused:
            self.failed.note(address, refused.code, scope["path"])
            if refused.throttled or not self.failed.take(address):
                return self._busy(environ, door)
            return self._refusal(environ, door, refused)
        except Exception as exc:  # noqa: BLE001  the database unreachable or slow: the door will answer
            # No read for a while (a database that is down could hold each
            # read for a connect timeout); credentials known from memory are
            # still checked.
            if time.monotonic() >= self.unread_until:
                log.warning("lease requests let through to their door unchecked for %.0f s: the credentials "
                            "could not be read (%s: %s)", UNREAD_SECONDS, type(exc).__name__, exc)
            self.unread_until = time.monotonic() + UNREAD_SECONDS
            self.reader.submit(db.close_old_connections)  # the reader's connection, in its thread
            return f"address:{address}"

    def close(self) -> None:
        """At the worker's end: the reader's connection closed in its thread."""
        self.reader.submit(db.connections.close_all)
        self.reader.shutdown(wait=False)

    def _busy(self, environ, door: str) -> tuple[int, list, bytes]:
        """The answer past the address's bound: built here, as cheaply as it
        can be (a flood is answered with these), in the door's shape."""
        retry = str(self.failed.retry_after()).encode()
        request_id = str(uuid.uuid4())
        if door == "api":
            return _json(429, "TooManyRequests", {"Retry-After": retry.decode()}, request_id=request_id)
        now = time.time()
        stamp = datetime.fromtimestamp(now, timezone.utc)
        body = (BUSY_XML_HEAD + f"RequestId:{request_id}\nTime:{stamp.strftime('%Y-%m-%dT%H:%M:%S.%f')}0Z"
                "</Message></Error>").encode()
        return 503, [(b"Content-Type", b"application/xml"), (b"x-ms-error-code", b"ServerBusy"),
                     (b"x-ms-request-id", request_id.encode()), (b"x-ms-version", self.busy_version),
                     (b"Date", formatdate(now, usegmt=True).encode()), (b"Retry-After", retry),
                     (b"Content-Length", str(len(body)).encode())], body

    def _refusal(self, environ, door: str, refused: principals.Refused) -> tuple[int, list, bytes]:
        if door == "azure" and self.azure.refused is not None:
            response = self.azure.refused(environ, refused.error or LeaseholdError(refused.code))
            return answers.rendered(environ, response.status_code, list(response.items()), response, close=False)
        return _json(refused.status, refused.code, {"WWW-Authenticate": 'Bearer realm="leasehold"'},
                     reason=refused.reason)


def _json(status: int, code: str, headers: dict, *, reason: str = "", request_id: str = "") -> tuple[int, list, bytes]:
    """The JSON API's error answer (leases/api/exceptions.py's shape)."""
    request_id = request_id or str(uuid.uuid4())
    body = {"code": code, "message": MESSAGES.get(code, code), "request_id": request_id}
    if reason:
        body["reason"] = reason
    content = json.dumps(body, separators=(",", ":")).encode()
    pairs = [(b"Content-Type", b"application/json"), (b"X-Request-Id", request_id.encode()),
             (b"Content-Length", str(len(content)).encode()),
             *((k.encode(), v.encode("latin-1")) for k, v in headers.items())]
    return status, pairs, content
