"""A lean load generator for Azure Blob lease operations.

Raw keep-alive sockets in threads (blocking I/O releases the GIL), one
connection per client, SharedKey-signed requests built from precomputed
pieces; only the date, the lease id and the signature change per request.
Responses are parsed just enough: status line, Content-Length (or chunked),
``Connection: close`` and ``x-ms-lease-id``. Used by bench/run.py against
Azurite and Leasehold alike.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
import threading
import time
import uuid
from email.utils import formatdate
from urllib.parse import quote

API_VERSION = "2021-12-02"
USER_AGENT = "leasehold-bench/1.0"
SOCKET_TIMEOUT = 10.0  # seconds; a request that takes longer is an error

# action codes used in the per-request records
ACQUIRE, RENEW, RELEASE, BREAK = 0, 1, 2, 3
ACTION_NAMES = ("acquire", "renew", "release", "break")


class Signer:
    """SharedKey signing (the string-to-sign of the Blob service)."""

    def __init__(self, account: str, key_b64: str):
        self.account = account
        self.key = base64.b64decode(key_b64)
        self._sec = -1
        self._date = ""

    def date(self) -> str:
        sec = int(time.time())
        if sec != self._sec:  # a race here only ever yields a valid date
            self._date = formatdate(sec, usegmt=True)
            self._sec = sec
        return self._date

    def signature(self, text: str) -> str:
        return base64.b64encode(hmac.digest(self.key, text.encode(), hashlib.sha256)).decode()

    def build(self, method: str, host: str, path: str, query: dict[str, str] | None = None,
              headers: dict[str, str] | None = None, body: bytes = b"") -> bytes:
        """A complete signed HTTP/1.1 request (general form, used for set-up)."""
        query = query or {}
        headers = {k.lower(): v for k, v in (headers or {}).items()}
        headers.setdefault("x-ms-date", self.date())
        headers.setdefault("x-ms-version", API_VERSION)
        length = str(len(body)) if body else ""
        standard = ["", "", length, "", headers.get("content-type", ""), "", "", "", "", "", ""]
        canon = "".join(f"{k}:{headers[k].strip()}\n" for k in sorted(h for h in headers if h.startswith("x-ms-")))
        resource = f"/{self.account}{path}" + "".join(f"\n{k.lower()}:{query[k]}" for k in sorted(query))
        text = f"{method}\n" + "\n".join(standard) + "\n" + canon + resource
        qs = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
        lines = [f"{method} {path}{'?' + qs if qs else ''} HTTP/1.1", f"Host: {host}",
                 f"User-Agent: {USER_AGENT}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        lines.append(f"Authorization: SharedKey {self.account}:{self.signature(text)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class LeaseRequests:
    """Precomputed lease requests for one blob: per call only the date, the
    lease id and the HMAC are computed."""

    EMPTY = "PUT\n" + "\n" * 11  # method + 11 empty standard headers

    def __init__(self, signer: Signer, host: str, path: str):
        self.signer = signer
        self.resource = f"/{signer.account}{path}\ncomp:lease"
        self.line = (f"PUT {path}?comp=lease HTTP/1.1\r\nHost: {host}\r\nUser-Agent: {USER_AGENT}\r\n"
                     f"Content-Length: 0\r\nx-ms-version: {API_VERSION}\r\n")
        self.auth = f"Authorization: SharedKey {signer.account}:"

    def _finish(self, canon: str, headers: str) -> bytes:
        sig = self.signer.signature(self.EMPTY + canon + f"x-ms-version:{API_VERSION}\n" + self.resource)
        return (self.line + headers + self.auth + sig + "\r\n\r\n").encode()

    def acquire(self, proposed: str, duration: int = 15) -> bytes:
        d = self.signer.date()
        return self._finish(
            f"x-ms-date:{d}\nx-ms-lease-action:acquire\nx-ms-lease-duration:{duration}\n"
            f"x-ms-proposed-lease-id:{proposed}\n",
            f"x-ms-date: {d}\r\nx-ms-lease-action: acquire\r\nx-ms-lease-duration: {duration}\r\n"
            f"x-ms-proposed-lease-id: {proposed}\r\n")

    def _with_id(self, action: str, lease_id: str) -> bytes:
        d = self.signer.date()
        return self._finish(
            f"x-ms-date:{d}\nx-ms-lease-action:{action}\nx-ms-lease-id:{lease_id}\n",
            f"x-ms-date: {d}\r\nx-ms-lease-action: {action}\r\nx-ms-lease-id: {lease_id}\r\n")

    def renew(self, lease_id: str) -> bytes:
        return self._with_id("renew", lease_id)

    def release(self, lease_id: str) -> bytes:
        return self._with_id("release", lease_id)

    def break_now(self) -> bytes:
        d = self.signer.date()
        return self._finish(
            f"x-ms-date:{d}\nx-ms-lease-action:break\nx-ms-lease-break-period:0\n",
            f"x-ms-date: {d}\r\nx-ms-lease-action: break\r\nx-ms-lease-break-period: 0\r\n")


class ApiLeaseRequests:
    """The same lease requests through the JSON API (POST /api/v1/leases/
    {action}/{account}/{container}/{blob}, a JSON body, a bearer token): the
    JSON API door of the same server. The methods and status codes are
    LeaseRequests'; the lease id is the proposed one (cycle_worker falls back
    to it when no x-ms-lease-id comes back)."""

    def __init__(self, token: str, host: str, path: str):
        self.path = path  # /{account}/{container}/{blob}
        self.head = (f"Host: {host}\r\nUser-Agent: {USER_AGENT}\r\nAuthorization: Bearer {token}\r\n"
                     "Content-Type: application/json\r\nAccept: application/json\r\n")

    def _post(self, action: str, body: str) -> bytes:
        data = body.encode()
        return (f"POST /api/v1/leases/{action}{self.path} HTTP/1.1\r\n{self.head}"
                f"Content-Length: {len(data)}\r\n\r\n").encode() + data

    def acquire(self, proposed: str, duration: int = 15) -> bytes:
        return self._post("acquire", f'{{"duration": {duration}, "proposed_lease_id": "{proposed}"}}')

    def renew(self, lease_id: str) -> bytes:
        return self._post("renew", f'{{"lease_id": "{lease_id}"}}')

    def release(self, lease_id: str) -> bytes:
        return self._post("release", f'{{"lease_id": "{lease_id}"}}')

    def break_now(self) -> bytes:
        return self._post("break", '{"break_period": 0}')


class Connection:
    """One keep-alive HTTP/1.1 connection; reconnects when the server closes."""

    def __init__(self, host: str, port: int):
        self.addr = (host, port)
        self.sock: socket.socket | None = None
        self.buf = b""
        self.connects = 0

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.addr, timeout=SOCKET_TIMEOUT)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.buf = sock, b""
        self.connects += 1
        return sock

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock, self.buf = None, b""

    def request(self, data: bytes) -> tuple[int, bytes, bytes]:
        """Send ``data``; return (status, lower-cased head, body). A reused
        connection that turns out closed before any byte of the answer is
        retried once on a fresh one (nothing reached the application)."""
        sock = self.sock
        reused = sock is not None
        if sock is None:
            sock = self._connect()
        try:
            sock.sendall(data)
            return self._read(sock)
        except (ConnectionError, _Closed):
            self.close()
            if not reused:
                raise
            sock = self._connect()
            sock.sendall(data)
            return self._read(sock)
        except BaseException:
            self.close()
            raise

    def _read(self, sock: socket.socket) -> tuple[int, bytes, bytes]:
        buf = self.buf
        got_any = bool(buf)
        while True:
            i = buf.find(b"\r\n\r\n")
            if i >= 0:
                break
            chunk = sock.recv(65536)
            if not chunk:
                if got_any:
                    raise ConnectionError("connection closed mid-response")
                raise _Closed()
            got_any = True
            buf += chunk
        head, rest = buf[:i], buf[i + 4:]
        status = int(head[9:12])
        hl = head.lower()
        j = hl.find(b"\r\ncontent-length:")
        if j >= 0:
            k = hl.find(b"\r\n", j + 2)
            n = int(hl[j + 17:k if k >= 0 else len(hl)])
            while len(rest) < n:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("connection closed mid-body")
                rest += chunk
            body, self.buf = rest[:n], rest[n:]
        elif b"\r\ntransfer-encoding: chunked" in hl:
            while b"0\r\n\r\n" not in rest:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("connection closed mid-body")
                rest += chunk
            end = rest.index(b"0\r\n\r\n") + 5
            body, self.buf = rest[:end], rest[end:]
        elif status in (204, 304) or b"\r\nconnection: close" not in hl:
            body, self.buf = b"", rest
        else:  # read to close
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                rest += chunk
            body, self.buf = rest, b""
        if b"\r\nconnection: close" in hl or not head.startswith(b"HTTP/1.1"):
            self.close()
        return status, hl, body


class _Closed(Exception):
    """The peer closed an idle keep-alive connection."""


def header(hl: bytes, name: bytes) -> str | None:
    j = hl.find(b"\r\n" + name + b":")
    if j < 0:
        return None
    k = hl.find(b"\r\n", j + 2)
    return hl[j + len(name) + 3:k if k >= 0 else len(hl)].strip().decode()


# ------------------------------------------------------------------ workloads

class Recorder:
    """Per-thread request records: (end time, action, status, latency)."""

    def __init__(self):
        self.records: list[tuple[float, int, int, float]] = []
        self.failures: list[str] = []  # transport errors (timeouts, resets)
        self.handovers: list[float] = []  # end times of successful contended acquires
        self.lost: int = 0  # renew/release refused while the client believed it held the lease


def _timed(conn: Connection, data: bytes, action: int, rec: Recorder):
    t0 = time.perf_counter()
    status, hl, _ = conn.request(data)
    t1 = time.perf_counter()
    rec.records.append((t1, action, status, t1 - t0))
    return status, hl


def _failed(rec: Recorder, conn: Connection, exc: Exception) -> None:
    """Count a request that got no answer; reconnect on the next one."""
    rec.failures.append(f"{type(exc).__name__}: {exc}")
    conn.close()
    time.sleep(0.01)  # a server that refuses connections is not hammered


def cycle_worker(host: str, port: int, reqs: list[LeaseRequests], stop_at: float, rec: Recorder,
                 max_cycles: int = 10_000_000) -> None:
    """acquire -> renew -> release, over and over, on this client's own blobs
    (round robin). A cycle once begun is completed, so every blob is left
    available; a failed release is repaired by a break."""
    conn = Connection(host, port)
    perf = time.perf_counter
    i = 0
    try:
        while perf() < stop_at and i < max_cycles:
            r = reqs[i % len(reqs)]
            i += 1
            try:
                lid = str(uuid.uuid4())
                st, hl = _timed(conn, r.acquire(lid), ACQUIRE, rec)
                if st != 201:
                    _timed(conn, r.break_now(), BREAK, rec)  # repair: leave the blob available
                    continue
                lid = header(hl, b"x-ms-lease-id") or lid
                _timed(conn, r.renew(lid), RENEW, rec)
                st, _ = _timed(conn, r.release(lid), RELEASE, rec)
                if st != 200:
                    _timed(conn, r.break_now(), BREAK, rec)
            except (OSError, ConnectionError, ValueError) as exc:
                _failed(rec, conn, exc)
    finally:
        conn.close()


def holder_worker(host: str, port: int, reqs: list[LeaseRequests], stop_at: float, rec: Recorder) -> None:
    """A holder, as most lease clients are: acquire a 60-s lease on its own blob once, then renew it
    back to back; released at the end, so the blob is left available."""
    conn = Connection(host, port)
    r = reqs[0]
    try:
        lid = str(uuid.uuid4())
        st, _ = _timed(conn, r.acquire(lid, duration=60), ACQUIRE, rec)
        if st != 201:
            _timed(conn, r.break_now(), BREAK, rec)
            _timed(conn, r.acquire(lid, duration=60), ACQUIRE, rec)
        while time.perf_counter() < stop_at:
            try:
                _timed(conn, r.renew(lid), RENEW, rec)
            except (OSError, ConnectionError, ValueError) as exc:
                _failed(rec, conn, exc)
        _timed(conn, r.release(lid), RELEASE, rec)
    finally:
        conn.close()


class Arena:
    """Shared belief of the contending clients: who thinks it holds the blob."""

    def __init__(self):
        self.lock = threading.Lock()
        self.holder: int | None = None
        self.double_holders = 0


def contention_worker(me: int, host: str, port: int, r: LeaseRequests, arena: Arena, stop_at: float,
                      rec: Recorder, backoff: float = 0.0) -> None:
    """Everyone tries to acquire the same blob; whoever wins renews once and
    releases. Between its 201 and sending its release a client believes it
    holds the lease; two such beliefs at once is a double holder."""
    conn = Connection(host, port)
    perf = time.perf_counter
    try:
        while perf() < stop_at:
            try:
                lid = str(uuid.uuid4())
                st, hl = _timed(conn, r.acquire(lid), ACQUIRE, rec)
                if st != 201:
                    if backoff:
                        time.sleep(backoff)
                    continue
                with arena.lock:
                    if arena.holder is not None:
                        arena.double_holders += 1
                    arena.holder = me
                rec.handovers.append(perf())
                lid = header(hl, b"x-ms-lease-id") or lid
                st, _ = _timed(conn, r.renew(lid), RENEW, rec)
                if st != 200:
                    rec.lost += 1
                with arena.lock:
                    if arena.holder == me:
                        arena.holder = None
                st, _ = _timed(conn, r.release(lid), RELEASE, rec)
                if st != 200:
                    rec.lost += 1
            except (OSError, ConnectionError, ValueError) as exc:
                _failed(rec, conn, exc)
    finally:
        conn.close()
