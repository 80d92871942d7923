"""How the served application's answers are handed to the front
(serving/asgi.py): a whole answer as status, header pairs and body; a
streamed one piece by piece; a door's answer to a request serving refused; the front's own
plain-text refusals."""

from __future__ import annotations

import time
from email.utils import formatdate

from serving.doors import Door
from serving.front import CaseKept
from leases.domain.refusals import Refusal
from leases.operations.metrics import count_unavailable

PIECE_BYTES = 64 << 10  # a streamed response is sent in pieces of about this size


def dated(send):
    """``send``, adding a Date header (now, to the second) to a response
    start that carries none: the one Date of every answer (uvicorn adds
    none: serving/server.py), the Azure door's own kept where it set one."""
    async def send_dated(message):
        if message["type"] == "http.response.start":
            headers = message.get("headers") or []
            if not any(name.lower() == b"date" for name, _ in headers):
                message = {**message, "headers": [*headers, (b"Date", http_date_now())]}
        await send(message)
    return send_dated


_last_date: tuple[int, bytes] = (0, b"")


def http_date_now() -> bytes:
    """The current time as an HTTP date, formatted once a second."""
    global _last_date
    second = int(time.time())
    if _last_date[0] != second:
        _last_date = (second, formatdate(second, usegmt=True).encode())
    return _last_date[1]


def batched(environ, response) -> tuple[int, list, bytes]:
    """A lease answer from a batch, rendered as the front sends it (and a 503
    counted for /metrics, as config.wsgi counts the others)."""
    if response.status_code == 503:
        count_unavailable(environ["PATH_INFO"])
    # Not closed: an HttpResponse holds nothing to let go of, and closing
    # sends Django's request_finished, whose receivers check every database
    # connection for age and errors -- done once per batch instead, before
    # its checks (the Azure door's lean.checked sends request_started).
    return rendered(environ, response.status_code, list(response.items()), response, close=False)


def rendered(environ, status: int, headers, result, *, close: bool = True) -> tuple[int, list, bytes]:
    """A whole (not streamed) WSGI answer as the front sends it: status,
    header pairs as bytes, the body; ``result`` is closed (Django's
    request_finished) unless told otherwise."""
    try:
        content = b"".join(result)
    finally:
        if close:
            result.close()
    headers = [(header_name(k), v.encode("latin-1")) for k, v in headers]
    if (environ["REQUEST_METHOD"] != "HEAD" and status >= 200
            and status not in (204, 304) and not any(k.lower() == b"content-length" for k, _ in headers)):
        # The whole body is here: say its length. Without it uvicorn
        # answers chunked, and the chunk that ends it is a second small
        # write that the client's delayed ACK can hold up (a renewal
        # took twice as long).
        headers.append((b"Content-Length", str(len(content)).encode()))
    return status, headers, content


def header_name(name: str) -> bytes:
    """A response header name for the front. Metadata names keep their case
    (Azure returns them as they were set): CaseKept tells the front so."""
    if name[:10].lower() == "x-ms-meta-":
        return CaseKept(name.encode("latin-1"))
    return name.encode("latin-1")


def next_piece(result) -> bytes:
    """The next ~PIECE_BYTES of a streamed response (b"" at its end)."""
    iterator = result._leasehold_iter = getattr(result, "_leasehold_iter", None) or iter(result)
    pieces, size = [], 0
    for piece in iterator:
        if piece:
            pieces.append(piece)
            size += len(piece)
            if size >= PIECE_BYTES:
                break
    return b"".join(pieces)


def close(result) -> None:
    close = getattr(result, "close", None)
    if close is not None:
        close()


async def plain(send, status: int, text: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(text)).encode()), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": text})


def refused(door: Door, refused: Refusal, environ: dict | None, *, close: bool = False) -> tuple[int, list, bytes]:
    """``door``'s answer to a request serving refused (``refused``: what with), as the front sends it:
    status, header pairs as bytes (its length said; ``close``: the connection closed after it), body."""
    status, headers, body = door.refusal(refused, environ)
    pairs = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    if not any(name.lower() == b"content-length" for name, _ in pairs):
        pairs.append((b"Content-Length", str(len(body)).encode()))
    if close:
        pairs.append((b"Connection", b"close"))
    return status, pairs, body
