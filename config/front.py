"""The HTTP front of the production server: uvicorn's httptools protocol
(llhttp, Node's HTTP parser, the one Azurite reads requests with), on
uvloop, with what Leasehold needs on top (see config/serve.py for why this
front and not granian):

* **Header names as the client sent them.** Azure keeps the case of
  metadata names (``x-ms-meta-BuildId`` comes back as ``BuildId``).
  uvicorn, like every ASGI server, lower-cases ``scope["headers"]``; this
  protocol also keeps the pairs as they came, in order, in
  ``scope["extensions"]["leasehold.raw_headers"]`` (config/asgi.py hands
  them on to Django as ``environ["leasehold.raw_headers"]``).
  On the way out uvicorn lower-cases response header names with
  ``bytes.lower()``; a name whose case matters is given to it as a
  ``CaseKept`` (config/asgi.py), whose ``lower()`` keeps it.
* **A header read timeout** (uvicorn has none: a client that connects and
  trickles its headers would hold a connection for ever): a request's
  headers must all be in within ``LEASEHOLD_HEADER_TIMEOUT`` seconds of
  the connection opening or of the request's first byte, else the
  connection is closed. The body's limits are config/asgi.py's; an idle
  keep-alive connection is closed after ``KEEP_ALIVE_SECONDS``.

Both additions are small overrides of documented extension points
(uvicorn's ``http=`` setting takes a protocol class); tests through the
real server process (tests/test_serving_header_case.py) keep them honest
across uvicorn versions.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from leases.env import env_float, or_exit

RAW_HEADERS = "leasehold.raw_headers"
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
    return or_exit(env_float, "LEASEHOLD_HEADER_TIMEOUT", 10, above=0)


class LeaseholdHttpProtocol(HttpToolsProtocol):
    header_seconds = None  # read once per process

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if LeaseholdHttpProtocol.header_seconds is None:
            LeaseholdHttpProtocol.header_seconds = header_timeout()
        self.header_timer = None
        self.raw_headers: list[tuple[bytes, bytes]] = []

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
            self.logger.info("Request headers not received within %ss; connection closed.", self.header_seconds)
            self.transport.close()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_header_timer()  # the first request's headers are due from now

    def connection_lost(self, exc) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    # -- parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()  # a keep-alive connection's next request
        self.raw_headers = []
        self.scope["extensions"] = {RAW_HEADERS: self.raw_headers}

    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw_headers.append((name, value))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        super().on_headers_complete()
