"""Metadata names keep their case through the production server (python -m
serving.server: uvicorn + serving/front.py), as on Azure: set with the official
SDK, read back through properties and listings exactly; two names that
differ only in case are one name. Plus the front's own duties: a header read
timeout, keep-alive, a graceful stop on SIGTERM.

The in-process test server (tests/conftest.py, wsgiref) loses header case as
any WSGI server does, so these checks need the real server process."""

from __future__ import annotations

import base64
import hashlib
import hmac
import signal
import socket
import sqlite3
import uuid
from email.utils import formatdate

import pytest
from azure.storage.blob import BlobServiceClient

from tests import azure_raw
from tests.processes.test_processes import Server

pytestmark = pytest.mark.processes

CONNECTION = ("DefaultEndpointsProtocol=http;AccountName={a};AccountKey={k};"
              "BlobEndpoint={url}/{a};")
HANG = 30  # seconds: a socket read not answered by then fails the test


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("case"), workers=2)
    s.env["LEASEHOLD_HEADER_TIMEOUT"] = "1"
    s.migrate().start()
    yield s
    s.kill()


@pytest.fixture
def sdk(server):
    return BlobServiceClient.from_connection_string(
        CONNECTION.format(a=azure_raw.DEV_ACCOUNT, k=azure_raw.DEV_KEY, url=server.url), retry_total=0)


@pytest.fixture
def box(sdk):
    return sdk.create_container(f"case-{uuid.uuid4().hex}")


def test_blob_metadata_keeps_its_case_on_upload_set_and_every_read(sdk, box):
    blob = box.upload_blob("b", b"x", metadata={"BuildId": "42", "lower": "l", "UPPER_ONE": "U", "mIxEd_2": "m"})
    assert blob.get_blob_properties().metadata == {"BuildId": "42", "lower": "l", "UPPER_ONE": "U", "mIxEd_2": "m"}
    blob.set_blob_metadata({"RunId": "7", "Owner": "ops"})
    assert blob.get_blob_properties().metadata == {"RunId": "7", "Owner": "ops"}
    assert blob.download_blob().properties.metadata == {"RunId": "7", "Owner": "ops"}
    assert [(b.name, b.metadata) for b in box.list_blobs(include=["metadata"])] == [
        ("b", {"RunId": "7", "Owner": "ops"})]


def test_container_metadata_keeps_its_case_on_create_set_and_list(sdk):
    box = sdk.create_container("case-container", metadata={"TeamName": "ops"})
    assert box.get_container_properties().metadata == {"TeamName": "ops"}
    box.set_container_metadata({"CostCenter": "42", "env": "prod"})
    assert box.get_container_properties().metadata == {"CostCenter": "42", "env": "prod"}
    listed = {c.name: c.metadata for c in sdk.list_containers(name_starts_with="case-container", include_metadata=True)}
    assert listed == {"case-container": {"CostCenter": "42", "env": "prod"}}


def test_the_response_header_names_are_the_stored_names_byte_for_byte(server, box):
    box.upload_blob("raw", b"x", metadata={"BuildId": "42"})
    response = _raw_request(server, "HEAD", f"/{azure_raw.DEV_ACCOUNT}/{box.container_name}/raw", {})
    assert b"\r\nx-ms-meta-BuildId: 42\r\n" in response


def test_the_sdk_sends_names_differing_only_in_case_as_one_name_the_last(box):
    # The SDK's headers are a case-insensitive dict: the later name wins, in its case.
    blob = box.upload_blob("b", b"x", metadata={"RunId": "7", "runid": "8"})
    assert blob.get_blob_properties().metadata == {"runid": "8"}


@pytest.mark.parametrize("names", [("RunId", "runid"), ("RunId", "RunId"), ("a", "A")])
@pytest.mark.parametrize("operation", ["set-blob-metadata", "put-blob", "set-container-metadata"])
def test_a_name_sent_twice_in_any_case_is_refused_and_changes_nothing(server, box, names, operation):
    blob = box.upload_blob("b", b"old", metadata={"Keep": "me"})
    box.set_container_metadata({"Keep": "me"})
    path = f"/{azure_raw.DEV_ACCOUNT}/{box.container_name}"
    target, query, extra, body = {
        "set-blob-metadata": (path + "/b", "?comp=metadata", {}, b""),
        "put-blob": (path + "/b", "", {"x-ms-blob-type": "BlockBlob"}, b"new"),
        "set-container-metadata": (path, "?restype=container&comp=metadata", {}, b""),
    }[operation]
    headers = [*extra.items(), (f"x-ms-meta-{names[0]}", "1"), (f"x-ms-meta-{names[1]}", "2")]
    response = _raw_request(server, "PUT", target + query, headers, body)
    assert response.startswith(b"HTTP/1.1 400 ") and b"x-ms-error-code: InvalidMetadata\r\n" in response
    assert blob.get_blob_properties().metadata == {"Keep": "me"}
    assert blob.download_blob().readall() == b"old"
    assert box.get_container_properties().metadata == {"Keep": "me"}


def test_a_non_ascii_metadata_value_is_refused_not_stored_empty(server, box):
    blob = box.upload_blob("b", b"x", metadata={"Keep": "me"})
    path = f"/{azure_raw.DEV_ACCOUNT}/{box.container_name}/b?comp=metadata"
    response = _raw_request(server, "PUT", path, [("x-ms-meta-Note", "caf\u00e9")])
    assert response.startswith(b"HTTP/1.1 400 ") and b"x-ms-error-code: InvalidHeaderValue\r\n" in response
    assert blob.get_blob_properties().metadata == {"Keep": "me"}


def test_a_client_slow_with_its_headers_is_cut_off_and_others_are_served(server):
    silent = socket.create_connection(("127.0.0.1", server.port), timeout=HANG)
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=HANG)
    slow.sendall(b"GET /devstoreaccount1?comp=list HTTP/1.1\r\nHost: x\r\n")
    try:
        # LEASEHOLD_HEADER_TIMEOUT is 1 s here: both are closed (recv gives
        # b"" or a reset) long before HANG, while a prompt client is answered.
        assert azure_raw.signed("GET", server.url, "/devstoreaccount1?comp=list").status_code == 200
        for sock in (silent, slow):
            try:
                assert sock.recv(65536) == b""
            except ConnectionResetError:
                pass
    finally:
        silent.close()
        slow.close()


def test_one_connection_carries_many_requests(server):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=HANG)
    try:
        for _ in range(3):
            sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            head = _read_response(sock)
            assert head.startswith(b"HTTP/1.1 200 ") and b"connection: close" not in head.lower()
    finally:
        sock.close()


def test_sigterm_answers_the_request_in_flight_then_stops(tmp_path):
    """docs/guide/install.md: on SIGTERM, requests in flight are answered
    (10 s at most), then the workers stop. The request is in flight for sure
    when the signal comes: it asked for 100-continue and got it, which the
    server sends once the application reads the body. Its body is sent
    after the signal; it is answered 201 and stored, and the server exits 0
    (a stop that hangs, or ends with another status, fails here)."""
    s = Server(tmp_path, workers=2).migrate().start()  # as served: a supervisor and its workers
    try:
        assert azure_raw.signed("PUT", s.url, "/devstoreaccount1/term?restype=container").status_code == 201
        body = b"in flight" * 100
        path = "/devstoreaccount1/term/b"
        headers = azure_raw.signed_headers("PUT", path, {"x-ms-blob-type": "BlockBlob"}, body=body)
        head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Host": "127.0.0.1",
                                                     "Content-Length": str(len(body)),
                                                     "Expect": "100-continue"}.items())
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=HANG)
        try:
            sock.sendall(f"PUT {path} HTTP/1.1\r\n{head}\r\n".encode())
            assert sock.recv(64).startswith(b"HTTP/1.1 100 ")  # the request is the application's now
            s.proc.send_signal(signal.SIGTERM)
            sock.sendall(body)
            answer = b""
            while b"\r\n\r\n" not in answer:
                piece = sock.recv(4096)
                assert piece, answer
                answer += piece
        finally:
            sock.close()
        assert answer.startswith(b"HTTP/1.1 201 "), answer[:300]
        assert s.proc.wait(timeout=HANG) == 0, s.output()
    finally:
        s.kill()
    with sqlite3.connect(f"file:{s.db}?mode=ro", uri=True) as db:
        assert db.execute("SELECT count(*) FROM leases_blob WHERE name = 'b'").fetchone() == (1,)


# ------------------------------------------------------------------ raw HTTP


def _raw_request(server, method: str, target: str, headers, body: bytes = b"") -> bytes:
    """A signed request whose header names go out exactly as given (repeated
    names included: clients other than requests can send them); the response
    as bytes."""
    headers = list(headers.items()) if isinstance(headers, dict) else list(headers)
    headers += [("x-ms-date", formatdate(usegmt=True)), ("x-ms-version", "2025-11-05")]
    # SharedKey: names lower-cased, values of one name joined with ',' (as a
    # server that folds repeated headers sees them).
    folded: dict[str, list[str]] = {}
    for name, value in headers:
        folded.setdefault(name.lower(), []).append(value)
    canon = "".join(f"{k}:{','.join(v)}\n" for k, v in sorted(folded.items()) if k.startswith("x-ms-"))
    path, _, query = target.partition("?")
    resource = f"/{azure_raw.DEV_ACCOUNT}{path}" + "".join(
        f"\n{k.lower()}:{v}" for k, v in sorted(kv.split("=", 1) for kv in query.split("&") if kv))
    length = str(len(body)) if body else ""
    text = f"{method}\n\n\n{length}\n\n\n\n\n\n\n\n\n" + canon + resource
    mac = hmac.new(base64.b64decode(azure_raw.DEV_KEY), text.encode(), hashlib.sha256).digest()
    headers.append(("Authorization", f"SharedKey {azure_raw.DEV_ACCOUNT}:{base64.b64encode(mac).decode()}"))
    head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers) + "Connection: close\r\n\r\n"
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=HANG)
    try:
        sock.sendall(head.encode("latin-1") + body)
        data = b""
        while piece := sock.recv(65536):
            data += piece
        return data
    finally:
        sock.close()


def _read_response(sock: socket.socket) -> bytes:
    """One response's head, its body read off by Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        assert piece, "connection closed"
        data += piece
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(rest) < length:
        rest += sock.recv(65536)
    return head




def _dates(response: bytes) -> list[str]:
    head = response.partition(b"\r\n\r\n")[0].decode("latin-1")
    return [line.split(":", 1)[1].strip() for line in head.split("\r\n")[1:] if line.lower().startswith("date:")]


def _plain(server, method: str, target: str, extra: str = "") -> bytes:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=HANG)
    try:
        sock.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n".encode())
        data = b""
        while piece := sock.recv(65536):
            data += piece
        return data
    finally:
        sock.close()


def test_every_door_answers_one_date_header_current_to_the_second(server, box):
    """RFC 9110 allows one Date; uvicorn's own (refreshed once a second) came
    next to the Azure door's. Each door, answers and refusals alike, streamed
    and whole, lease requests batched or not."""
    import time
    from email.utils import parsedate_to_datetime

    box.upload_blob("d", b"x" * (3 << 20))  # a chunked blob: its download is streamed
    account, name = azure_raw.DEV_ACCOUNT, box.container_name
    calls = {
        "azure list": lambda: _raw_request(server, "GET", f"/{account}?comp=list", {}),
        "azure streamed download": lambda: _raw_request(server, "GET", f"/{account}/{name}/d", {}),
        "azure lease": lambda: _raw_request(server, "PUT", f"/{account}/{name}/d?comp=lease",
                                            {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15"}),
        "azure 404": lambda: _raw_request(server, "HEAD", f"/{account}/{name}/none", {}),
        "azure unsigned 403": lambda: _plain(server, "GET", f"/{account}?comp=list"),
        "json api": lambda: _plain(server, "GET", "/api/v1/leases/"),
        "admin": lambda: _plain(server, "GET", "/admin/login/"),
        "health": lambda: _plain(server, "GET", "/health/live"),
        "front refusal 414": lambda: _plain(server, "GET", "/" + "a" * 40_000),
    }
    for door, send in calls.items():
        sent = int(time.time())  # Date is whole seconds: the second the request went in
        response = send()
        answered = time.time()
        dates = _dates(response)
        assert len(dates) == 1, (door, response[:300])
        # the moment of the answer: not before the request's second, not after its answer came
        assert sent <= parsedate_to_datetime(dates[0]).timestamp() <= answered, (door, dates, sent, answered)
