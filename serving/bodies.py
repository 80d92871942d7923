"""A request's body, received whole on the event loop before the request
takes a thread (serving/asgi.py): bounded in size and in time, kept in
memory up to SPOOL_BYTES, then in a temporary file."""

from __future__ import annotations

import asyncio
import tempfile

SPOOL_BYTES = 1 << 20  # bodies above this go to a temporary file


class BodyRefused(Exception):
    def __init__(self, status: int, reason: bytes):
        self.status, self.reason = status, reason


async def receive_whole(scope, receive, *, cap: int, idle_timeout: float, min_rate: float):
    """The whole body (bytes, or a temporary file at 0) and its length, or
    BodyRefused: at most ``cap`` bytes, no silence longer than
    ``idle_timeout`` seconds, and after that many seconds at least
    ``min_rate`` bytes/s on average."""
    length = None
    chunked = False
    for name, value in scope["headers"]:
        if name.lower() == b"content-length":
            if not value.strip().isdigit():
                raise BodyRefused(400, b"Invalid Content-Length")
            length = int(value)
        elif name.lower() == b"transfer-encoding":
            chunked = True
    if not chunked and not length:
        return b"", 0
    if length is not None and length > cap:
        raise BodyRefused(413, b"Request body too large")
    loop = asyncio.get_running_loop()
    start = loop.time()
    grace_end = start + idle_timeout
    pieces: list[bytes] = []
    spool = None
    got = 0
    more = True
    while more:
        now = loop.time()
        # the next piece is due before the silence is too long and
        # before the average rate (after the grace period) falls below
        # the minimum
        deadline = min(now + idle_timeout, grace_end + got / min_rate)
        try:
            async with asyncio.timeout_at(max(deadline, now)):
                message = await receive()
        except TimeoutError:
            raise BodyRefused(408, b"Request body too slow") from None
        if message["type"] == "http.disconnect":
            raise ConnectionError
        data = message.get("body", b"")
        got += len(data)
        if got > cap:
            raise BodyRefused(413, b"Request body too large")
        if spool is None and got > SPOOL_BYTES:
            spool = tempfile.TemporaryFile()
            spool.writelines(pieces)
            pieces = []
        if spool is not None:
            spool.write(data)
        elif data:
            pieces.append(data)
        more = message.get("more_body", False)
    if spool is not None:
        spool.seek(0)
        return spool, got
    return b"".join(pieces), got


def content_length(scope) -> int:
    """Content-Length as sent, 0 if missing or not a number."""
    for name, value in scope["headers"]:
        if name.lower() == b"content-length":
            return int(value) if value.strip().isdigit() else 0
    return 0
