"""The HTTP front of the server: uvicorn's httptools protocol (llhttp, the parser Azurite reads
requests with) on uvloop, with what Leasehold needs on top: header names kept as the client sent
them (Azure keeps the case of metadata names), a header read timeout (uvicorn has none), and limits
on the request line, the headers and the URL where the bytes arrive, before any parsing by Django or
any authentication. docs/development/architecture.md ("The front") tells how; docs/decisions/0002
and 0011 say why."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections.abc import Mapping
from email.utils import formatdate
from http import HTTPStatus

import httptools

from leases import conf
from leases.domain.refusals import Refusal
from leases.operations.logformat import LeaseIdsOut
from leases.operations.metrics import count_front_refusal
from leases.domain.paths import door_of
from serving.doors import Door
from serving.uvicorn_internals import HttpToolsProtocol

RAW_HEADERS = "leasehold.raw_headers"
# Every process that serves imports this module (uvicorn's config names the
# protocol class): its access log shows lease id fingerprints, never ids.
logging.getLogger("uvicorn.access").addFilter(LeaseIdsOut())
# Idle keep-alive connections cost a few KiB each and no thread; clients
# (the SDK's connection pool) reuse them for minutes.
KEEP_ALIVE_SECONDS = 120


class CaseKept(bytes):
    """A response header name uvicorn must send as it is (it lower-cases
    names with ``name.lower()`` before writing them)."""

    __slots__ = ()

    def lower(self) -> bytes:
        return self


def header_timeout() -> float:
    return conf.or_exit().header_timeout


def head_limits() -> tuple[int, int, int]:
    """(request line and header bytes, header lines, URL bytes)."""
    settings = conf.or_exit()
    return settings.max_header_bytes, settings.max_headers, settings.max_url_bytes


class _TooBig(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(code)
        self.status, self.code, self.message = status, code, message


URL_TOO_LONG = (414, "RequestUriTooLong", "The request URI is longer than the server accepts.")
HEADERS_TOO_BIG = (431, "RequestHeaderFieldsTooLarge", "The request's headers are larger than the server accepts.")
REASONS = {status: HTTPStatus(status).phrase.encode() for status in (413, 414, 431)}
# The doors of the application this process serves (LeaseholdASGI hands them over: ``refusing_for``).
_doors: Mapping[str, Door] = {}


def refusing_for(doors: Mapping[str, Door]) -> None:
    """The doors whose shape the front's refusals take, by ``door_of`` the URL."""
    global _doors
    _doors = doors


def refusal(url: bytes, refused: Refusal) -> bytes:
    """The whole HTTP answer to a request refused before routing (its head's
    size), rendered by the door of its URL (``door_of``), the connection closed."""
    door = _doors.get(door_of(url.decode("latin-1")))
    if door is None:  # uvicorn's protocol without our application: the code, in plain text
        status, headers, body = refused.status, [("Content-Type", "text/plain; charset=utf-8")], refused.code.encode()
    else:
        status, headers, body = door.refusal(refused, None)
    return b"".join([b"HTTP/1.1 %d %s\r\n" % (status, REASONS.get(status) or HTTPStatus(status).phrase.encode()),
                     *(b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1")) for name, value in headers),
                     b"date: ", formatdate(usegmt=True).encode(),
                     b"\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body), body])


# ------------------------------------------------------------------ refusals, counted and logged

log = logging.getLogger("leasehold.front")
LOG_INTERVAL = 60.0  # seconds: at most one WARNING line per status in this long, per process
_logged: dict[int, tuple[float, int]] = {}  # status -> (when last logged, refusals since, not logged)


def refused_at_front(status: int, what: str, *, now: float | None = None) -> None:
    """Count a request the front refused (/metrics, by status) and log it at
    WARNING, at most once per LOG_INTERVAL per status: a client (or an
    attacker) sending thousands of bad requests gets a line a minute, which
    says how many were not logged."""
    count_front_refusal(status)
    now = time.monotonic() if now is None else now
    last, unlogged = _logged.get(status, (None, 0))
    if last is not None and now - last < LOG_INTERVAL:
        _logged[status] = (last, unlogged + 1)
        return
    _logged[status] = (now, 0)
    more = f" ({unlogged} more since the last such line)" if unlogged else ""
    log.warning("Request refused by the front: %d, %s%s.", status, what, more)


@functools.cache
def _settings() -> tuple[float, tuple[int, int, int]]:
    """The header timeout and the head's limits, read once per process."""
    return header_timeout(), head_limits()


# Set when this process's server begins to stop (its connections are told to shut down).
STOPPING = threading.Event()


class Abandoned:
    """A request's "no one will read the answer" signal for the thread serving it (environ
    ``leasehold.abandoned``): set when its client has gone, and true as well once the server is
    stopping. A long read checks it (leases/admin/queries.py) and stops."""

    __slots__ = ("_gone",)

    def __init__(self):
        self._gone = threading.Event()

    def set(self) -> None:
        self._gone.set()

    def is_set(self) -> bool:
        return self._gone.is_set() or STOPPING.is_set()


class LeaseholdHttpProtocol(HttpToolsProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.header_seconds, self.limits = _settings()
        self.header_timer: asyncio.TimerHandle | None = None
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.head_bytes: int | None = 0  # bytes of the request line and headers so far; None once complete
        self.header_lines = 0

    # -- size limits

    def data_received(self, data: bytes) -> None:
        """uvicorn's, with the size limits: a callback below raises _TooBig
        (httptools hands it on as the context of a parser error)."""
        self._unset_keepalive_if_required()
        if self.head_bytes is not None:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, _TooBig):
                self._refuse(exc.__context__)
                return
            msg = "Invalid HTTP request received."
            refused_at_front(400, "not a valid HTTP request; connection closed")
            self.send_400_response(msg)
            return
        if self.head_bytes is not None and self.head_bytes > self.limits[0] and not self.transport.is_closing():
            self._refuse(_TooBig(*HEADERS_TOO_BIG))  # headers still coming, already past the limit

    def _refuse(self, too_big: _TooBig) -> None:
        refused_at_front(too_big.status, f"{too_big.code}; connection closed")
        self._disarm_header_timer()
        self.head_bytes = None
        if not self.transport.is_closing():
            refused = Refusal(too_big.status, too_big.code, too_big.message)
            self.transport.write(refusal(getattr(self, "url", b""), refused))
            self.transport.close()

    # -- header read timeout

    def _arm_header_timer(self) -> None:
        if self.header_timer is None:
            self.header_timer = self.loop.call_later(self.header_seconds, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _headers_too_slow(self) -> None:
        # The loop runs due timers before it reads the sockets: after the
        # process was stalled (a machine loaded past its cores), this can
        # run while headers that came in time wait unread. So the verdict
        # is given after the next read: headers complete by then disarm it.
        self.header_timer = self.loop.call_later(0.001, self._headers_still_missing)

    def _headers_still_missing(self) -> None:
        self.header_timer = None
        if not self.transport.is_closing():
            refused_at_front(408, f"headers not received within {self.header_seconds:g} s; connection closed")
            self.transport.close()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_header_timer()  # the first request's headers are due from now

    def _start_asgi_task(self, cycle, app) -> None:
        self.running = cycle  # the request being answered (uvicorn's self.cycle is the last one read)
        super()._start_asgi_task(cycle, app)

    def shutdown(self) -> None:
        """uvicorn's, except that an idle TLS connection is cut at once: its
        close sends close_notify and waits for the client's, which an idle
        pooled client never sends, so a stopping server sat out its whole
        graceful timeout. Between requests nothing is lost by the cut. A
        request still being served is told the server is stopping (Abandoned)."""
        STOPPING.set()
        if (self.cycle is None or self.cycle.response_complete) and self.transport.get_extra_info("ssl_object"):
            self.transport.abort()
            return
        super().shutdown()

    def connection_lost(self, exc) -> None:
        self._disarm_header_timer()
        # uvicorn marks only the last request read as disconnected; with
        # requests pipelined behind it, the one being answered went on
        # writing to the closed transport (a RuntimeError and uvicorn's
        # traceback). Each is told the client is gone.
        running = getattr(self, "running", None)
        for cycle in (running, *(cycle for cycle, _ in self.pipeline)):
            if cycle is not None and cycle is not self.cycle:
                if not cycle.response_complete:
                    cycle.disconnected = True
                cycle.message_event.set()
        super().connection_lost(exc)

    # -- parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()  # a keep-alive connection's next request
        self.raw_headers = []
        self.header_lines = 0
        self.scope["extensions"] = {RAW_HEADERS: self.raw_headers}  # type: ignore[dict-item]  # ASGI allows any value

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.limits[2]:
            raise _TooBig(*URL_TOO_LONG)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_lines += 1
        if self.header_lines > self.limits[1]:
            raise _TooBig(*HEADERS_TOO_BIG)
        self.raw_headers.append((name, value))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        if sum(len(n) + len(v) + 4 for n, v in self.raw_headers) + len(self.url) > self.limits[0]:
            raise _TooBig(*HEADERS_TOO_BIG)
        self.head_bytes = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.head_bytes = 0  # the next request's head on this connection
