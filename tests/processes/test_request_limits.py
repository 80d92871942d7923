"""Limits where the bytes arrive, against the
production server: the request line and headers, the header lines and the
URL are bounded before any parsing or authentication, a lease action's body
before it is read; each refusal is its door's error (Azure XML, or JSON
under /api/), and the connection is closed having cost the server no more
than the bytes it allowed. Caches keyed by what clients send stay small."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from leases.domain.block_limits import MAX_LIST_BYTES
from tests.serving.test_metrics import scrape, value

from tests.server_process import admin_token

from .test_processes import Server

pytestmark = pytest.mark.processes


class ScrapedServer(Server):
    scrape_headers: dict[str, str]  # the Authorization of a token that may read /metrics


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ScrapedServer(tmp_path_factory.mktemp("limits"), workers=1)
    s.migrate()
    s.scrape_headers = {"Authorization": f"Bearer {admin_token(s.db, s.env)}"}
    s.start()
    yield s
    s.kill()


def _exchange(port: int, head: bytes, *, body_stream: bytes = b"") -> tuple[bytes, float]:
    """Send ``head`` (and ``body_stream``) from a thread, read the answer; the
    answer and how long it took."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)

    def send():
        try:
            sock.sendall(head + body_stream)
        except OSError:  # the server closed the connection under the client: expected
            pass

    started = time.monotonic()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    raw = b""
    try:
        while chunk := sock.recv(65536):
            raw += chunk
    except ConnectionResetError:
        pass
    took = time.monotonic() - started
    sock.close()
    return raw, took


def _rss_kib(server) -> int:
    from .test_workers import _workers

    pids = _workers(server) or [server.proc.pid]
    with open(f"/proc/{pids[0]}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS"))


def test_a_huge_header_is_431_in_azure_xml_before_it_is_all_read(server):
    head = (b"PUT /devstoreaccount1/c/b?comp=lease HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"x-ms-date: " + b"A" * (8 << 20) + b"\r\n\r\n")
    before = _rss_kib(server)
    for _ in range(5):
        raw, _ = _exchange(server.port, head)
        assert raw.startswith(b"HTTP/1.1 431"), raw[:200]
        assert b"x-ms-error-code: RequestHeaderFieldsTooLarge" in raw
        assert b"<Code>RequestHeaderFieldsTooLarge</Code>" in raw
    assert _rss_kib(server) - before < 20 * 1024  # 40 MiB of headers sent; far less kept
    # and the server still serves
    raw, _ = _exchange(server.port, b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 200")


def test_too_many_header_lines_is_431_and_an_api_path_gets_json(server):
    lines = b"".join(b"x-h%d: v\r\n" % i for i in range(1500))
    raw, _ = _exchange(server.port, b"GET /api/v1/events/ HTTP/1.1\r\nHost: 127.0.0.1\r\n" + lines + b"\r\n")
    assert raw.startswith(b"HTTP/1.1 431"), raw[:200]
    assert b"content-type: application/json" in raw.lower() and b'"code":"RequestHeaderFieldsTooLarge"' in raw


def test_a_url_too_long_is_414(server):
    long_url = b"GET /devstoreaccount1/c/" + b"n" * 40000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    raw, _ = _exchange(server.port, long_url)
    assert raw.startswith(b"HTTP/1.1 414"), raw[:200]
    assert b"<Code>RequestUriTooLong</Code>" in raw


def test_headers_within_the_limits_are_served(server):
    meta = b"".join(b"x-ms-meta-k%d: %s\r\n" % (i, b"v" * 60) for i in range(100))  # 8 KiB of metadata
    head = b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    raw, _ = _exchange(server.port, head + meta + b"\r\n")
    assert raw.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("path, shape", [
    ("/api/v1/leases/acquire/devstoreaccount1/c/b", b'"code":"RequestBodyTooLarge"'),
    ("/devstoreaccount1/c/b?comp=lease", b"<Code>RequestBodyTooLarge</Code>"),
])
def test_a_big_body_to_a_lease_action_is_413_before_it_is_read(server, path, shape):
    head = (b"PUT " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 64000000\r\n\r\n")
    if path.startswith("/api/"):
        head = head.replace(b"PUT ", b"POST ", 1)
    # No body sent at all: the answer comes anyway. A server that read the body
    # first would have waited LEASEHOLD_BODY_IDLE_TIMEOUT and answered 408.
    raw, _ = _exchange(server.port, head)
    assert raw.startswith(b"HTTP/1.1 413"), raw[:200]
    assert shape in raw


@pytest.mark.parametrize("comp, length", [("blocklist", MAX_LIST_BYTES + 1), ("acl", 65536 + 1),
                                          ("%62locklist", MAX_LIST_BYTES + 1)])
def test_an_xml_body_over_the_largest_valid_one_is_413_before_it_is_read(server, comp, length):
    """Put Block List's body is at most the largest valid list (50,000 of the
    longest entries), a Set Container ACL's a small body: a larger one is
    refused from its Content-Length, none of it read or parsed. The query is
    read as the door reads it (``%62locklist`` is ``blocklist``)."""
    head = (f"PUT /devstoreaccount1/c/b?comp={comp}&restype=container HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Connection: close\r\nContent-Length: {length}\r\n\r\n").encode()
    # No body sent at all: the answer comes anyway (a server reading the
    # body first would have answered 408 after LEASEHOLD_BODY_IDLE_TIMEOUT).
    raw, _ = _exchange(server.port, head)
    assert raw.startswith(b"HTTP/1.1 413"), raw[:200]
    assert b"<Code>RequestBodyTooLarge</Code>" in raw
    # The largest valid list is read (and refused for its missing signature, not for its size).
    raw, _ = _exchange(server.port, head.replace(str(length).encode(), str(MAX_LIST_BYTES).encode()),
                       body_stream=b" " * MAX_LIST_BYTES if comp != "acl" else b"")
    assert raw.startswith(b"HTTP/1.1 401" if comp != "acl" else b"HTTP/1.1 413"), raw[:200]


def test_front_refusals_are_counted_in_metrics_by_status_and_logged_as_warnings(server):
    heads = {
        431: b"GET /devstoreaccount1/c/b HTTP/1.1\r\nHost: 127.0.0.1\r\nx-ms-date: " + b"A" * 100_000 + b"\r\n\r\n",
        414: b"GET /devstoreaccount1/c/" + b"n" * 40000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        413: (b"PUT /devstoreaccount1/c/b?comp=lease HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Length: 64000000\r\n\r\n"),
        400: b"NOT HTTP AT ALL\r\n\r\n",
    }
    family = "leasehold_http_front_refusals_total"
    before = scrape(server.url, server.scrape_headers)
    for status, head in [*heads.items(), (431, heads[431]), (431, heads[431])]:
        raw, _ = _exchange(server.port, head)
        assert raw.startswith(b"HTTP/1.1 %d" % status), raw[:200]
    after = scrape(server.url, server.scrape_headers)
    counted = {status: value(after, family, status=str(status)) - value(before, family, status=str(status))
               for status in heads}
    assert counted == {431: 3, 414: 1, 413: 1, 400: 1}
    # At WARNING (shown at the default level), at most once a minute per status: fewer
    # 431 lines than 431s, whatever this module's other tests refused before.
    lines = [line for line in server.output().splitlines() if "Request refused by the front:" in line]
    for status in heads:
        assert any("WARNING" in line and f"front: {status}," in line for line in lines), lines
    assert 1 <= sum("front: 431," in line for line in lines) < value(after, family, status="431"), lines


def test_caches_keyed_by_client_input_keep_only_short_keys():
    from leases.auth import sharedkey

    sharedkey._parse_date_cached.cache_clear()
    sharedkey._canonical_query_cached.cache_clear()
    for i in range(300):
        sharedkey._parse_date(f"{i:05d}" + "A" * 5000)
        sharedkey._canonical_query(f"comp=lease&x={i}" + "B" * 5000)
    assert sharedkey._parse_date_cached.cache_info().currsize == 0
    assert sharedkey._canonical_query_cached.cache_info().currsize == 0
    sharedkey._parse_date("Tue, 24 Nov 2026 22:00:00 GMT")
    assert sharedkey._parse_date_cached.cache_info().currsize == 1
