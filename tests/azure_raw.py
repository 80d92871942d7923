"""A minimal SharedKey-signing HTTP client for requests the official SDK
will not send (missing headers, bad values, unknown actions). The signing is
written here independently of the server's code, from the documented
algorithm, so a server-side signing bug cannot hide behind shared code."""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
from email.utils import formatdate
from urllib.parse import quote, unquote, urlsplit

import requests

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY

SLOTS = ["content-encoding", "content-language", "content-length", "content-md5", "content-type", "date",
         "if-modified-since", "if-match", "if-none-match", "if-unmodified-since", "range"]


def signed(method: str, base: str, path: str, *, headers: dict | None = None, body: bytes = b"",
           account: str = DEV_ACCOUNT, key: str = DEV_KEY, version: str | None = "2025-11-05",
           date: str | None = None, sign: bool = True, safe: str = "/~") -> requests.Response:
    """``safe``: the characters the client leaves unencoded in the path, as
    SDKs differ (JavaScript's encodeURIComponent also keeps !'()*)."""
    url = base + quote(path, safe=safe + "?=&")
    headers = signed_headers(method, url[len(base):], headers, body=body, account=account, key=key,
                             version=version, date=date, sign=sign)
    return requests.request(method, url, headers=headers, data=body or None, timeout=30)


def signed_headers(method: str, path: str, headers: dict | None = None, *, body: bytes = b"",
                   account: str = DEV_ACCOUNT, key: str = DEV_KEY, version: str | None = "2025-11-05",
                   date: str | None = None, sign: bool = True) -> dict:
    """The headers of a request to ``path`` (encoded, with its query), signed."""
    headers = {k.lower(): v for k, v in (headers or {}).items() if v is not None}
    headers.setdefault("x-ms-date", date or formatdate(usegmt=True))
    if version:
        headers.setdefault("x-ms-version", version)
    if sign:
        parts = urlsplit(path)
        length = str(len(body)) if body else ""
        slot = lambda name: length if name == "content-length" else headers.get(name, "")  # noqa: E731
        canon_headers = "".join(f"{k}:{headers[k]}\n" for k in sorted(h for h in headers if h.startswith("x-ms-")))
        query = sorted((kv.split("=", 1) + [""])[:2] for kv in parts.query.split("&") if kv)
        canon_resource = f"/{account}{parts.path}" + "".join(f"\n{k.lower()}:{unquote(v)}" for k, v in query)
        text = method + "\n" + "\n".join(slot(n) for n in SLOTS) + "\n" + canon_headers + canon_resource
        mac = hmac.new(base64.b64decode(key), text.encode(), hashlib.sha256).digest()
        headers["authorization"] = f"SharedKey {account}:{base64.b64encode(mac).decode()}"
    return headers


def lease(base: str, path: str, action: str | None, **headers) -> requests.Response:
    """PUT ?comp=lease with x-ms-lease-* headers given as keyword arguments
    (lease_id=..., duration=..., break_period=..., proposed_lease_id=...)."""
    names = {"lease_id": "x-ms-lease-id", "duration": "x-ms-lease-duration",
             "break_period": "x-ms-lease-break-period", "proposed_lease_id": "x-ms-proposed-lease-id"}
    hdrs = {names.get(k, k): (None if v is None else str(v)) for k, v in headers.items()}
    if action is not None:
        hdrs["x-ms-lease-action"] = action
    query = "?comp=lease" + ("&restype=container" if path.count("/") == 2 else "")
    return signed("PUT", base, path + query, headers=hdrs)


def error_code(response: requests.Response) -> str | None:
    return response.headers.get("x-ms-error-code")


def upload_refused_midway(base: str, path: str, size: int, headers: dict | None = None) -> tuple[str, int, str]:
    """PUT ``size`` bytes to ``path`` (encoded, with its query) on a socket of
    its own, writing the whole body as a client does even if the server has
    answered already, then reading the answer: (its status line, or the read's
    error; the bytes written; the write's error, or ""). A server that answers
    a refused upload early must still read the rest, or close so that the
    client reads its answer, not a reset."""
    host, port = urlsplit(base).hostname, urlsplit(base).port
    sent_headers = signed_headers("PUT", path, {**(headers or {}), "content-length": str(size)}, body=b"x" * size)
    head = f"PUT {path} HTTP/1.1\r\nHost: {host}:{port}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in sent_headers.items())
    chunk, written, write_error = b"x" * 65536, 0, ""
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(head.encode() + b"\r\n")
        try:
            while written < size:
                written += sock.send(chunk[: size - written])
        except OSError as exc:
            write_error = repr(exc)
        try:
            answer = sock.recv(65536).split(b"\r\n", 1)[0].decode()
        except OSError as exc:
            answer = repr(exc)
    return answer, written, write_error
