"""No client can stall the lease holders, on the production server
(python -m config.serve) with one worker process, so that anything that
held a worker's thread would stall the renewal outright.

Nothing here asserts a duration: each check is "answered while the other
client is still stalled", with a generous socket timeout only as the bound
that turns a hang into a failure."""

from __future__ import annotations

import base64
import csv
import fcntl
import io
import hashlib
import hmac
import json
import os
import socket
import sqlite3
import time
import uuid
from email.utils import formatdate

import pytest

from leases.domain import fingerprints
from tests import azure_raw
from tests.server_process import admin_token
from .test_processes import Server

pytestmark = pytest.mark.processes

BLOB = "/devstoreaccount1/serving/b"
HANG = 30  # seconds: a request not answered by then is stalled


def _started(tmp, **env) -> Server:
    """A one-worker server with these settings, its container and blob made."""
    s = Server(tmp, workers=1)
    s.env.update({k: str(v) for k, v in env.items()})
    s.migrate().start()
    assert azure_raw.signed("PUT", s.url, "/devstoreaccount1/serving?restype=container").status_code == 201
    assert azure_raw.signed("PUT", s.url, BLOB, body=b"x",
                            headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    return s


@pytest.fixture
def server(tmp_path):
    """server(**settings): a server of the test's own, for the tests that
    kill it, leave an upload staging, or need settings the shared one has not."""
    made = []

    def make(**env):
        made.append(_started(tmp_path, **env))
        return made[-1]

    yield make
    for s in made:
        s.kill()


# The module's tests that leave their server as they found it (every lease
# released, every connection closed, at most the history grown) share one, with
# the settings each of them checks: stalled bodies cut after 3 s, bodies over
# 1 KiB refused, writes waiting 1 s for the writer, one export slot per worker.
SHARED = {"LEASEHOLD_BODY_IDLE_TIMEOUT": 3, "LEASEHOLD_MAX_BLOB_BYTES": 1024, "LEASEHOLD_WRITE_WAIT": 1,
          "LEASEHOLD_LONG_READS": 1, "LEASEHOLD_LONG_READ_PROCESS": 1}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    s = _started(tmp_path_factory.mktemp("shared"), **SHARED)
    yield s
    s.kill()


def _open(server, head: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=HANG)
    sock.sendall(head.encode())
    return sock


def _response(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        if not piece:
            break
        data += piece
    return data


def _renew_cycle(server) -> None:
    me = str(uuid.uuid4())
    acquired = azure_raw.lease(server.url, BLOB, "acquire", duration=15, proposed_lease_id=me)
    assert acquired.status_code == 201, acquired.content
    renewed = azure_raw.lease(server.url, BLOB, "renew", lease_id=me)
    assert renewed.status_code == 200, renewed.content
    assert azure_raw.lease(server.url, BLOB, "release", lease_id=me).status_code == 200


def _signed_put_head(path: str, length: int) -> str:
    """The request line and headers of a signed Put Blob of ``length``
    bytes (signed as tests/azure_raw.py signs, without sending anything)."""
    date = formatdate(usegmt=True)
    headers = {"x-ms-blob-type": "BlockBlob", "x-ms-date": date, "x-ms-version": "2025-11-05"}
    canon = "".join(f"{k}:{headers[k]}\n" for k in sorted(headers))
    slots = [str(length) if n == "content-length" else "" for n in azure_raw.SLOTS]
    text = "PUT\n" + "\n".join(slots) + "\n" + canon + f"/{azure_raw.DEV_ACCOUNT}{path}"
    mac = hmac.new(base64.b64decode(azure_raw.DEV_KEY), text.encode(), hashlib.sha256).digest()
    headers["Authorization"] = f"SharedKey {azure_raw.DEV_ACCOUNT}:{base64.b64encode(mac).decode()}"
    return (f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n")


def test_slow_bodies_do_not_delay_a_renewal(shared):
    """Two signed Put Blobs send their headers and one byte of their body,
    then nothing (under a WSGI server each holds the thread that reads its
    body): a lease holder is served meanwhile, and the slow ones are refused
    with 408 once their body stops coming (3 s); neither blob was written."""
    s = shared
    slow = [_open(s, _signed_put_head(f"/devstoreaccount1/serving/slow{i}", 100) + "u") for i in range(2)]
    _renew_cycle(s)
    for sock in slow:  # still open, still not answered: the renewal did not wait for them
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            sock.recv(1)
        sock.setblocking(True)
    for sock in slow:
        assert _response(sock).startswith(b"HTTP/1.1 408"), "a stalled body is refused"
        sock.close()
    _renew_cycle(s)
    for i in range(2):
        assert azure_raw.signed("HEAD", s.url, f"/devstoreaccount1/serving/slow{i}").status_code == 404


def test_oversized_body_is_refused_before_it_is_read(shared):
    s = shared  # bodies over 1 KiB refused
    sock = _open(s, f"PUT {BLOB} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {10 * 2**20}\r\n\r\n")
    assert _response(sock).startswith(b"HTTP/1.1 413")
    sock.close()


def _grow_history(db_path, rows: int) -> int:
    """Copies of the history's rows (the table is append-only: inserts only)
    until it has at least ``rows``; returns the count."""
    db = sqlite3.connect(db_path, timeout=30)
    columns = [r[1] for r in db.execute("PRAGMA table_info(leases_leaseevent)") if r[1] != "id"]
    listed = ", ".join(f'"{c}"' for c in columns)
    while (count := db.execute("SELECT count(*) FROM leases_leaseevent").fetchone()[0]) < rows:
        with db:
            db.execute(f"INSERT INTO leases_leaseevent ({listed}) SELECT {listed} FROM leases_leaseevent "
                       f"LIMIT {rows - count}")
    db.close()
    return count


@pytest.mark.parametrize("helper", ["1", "0"], ids=["in-helper-process", "in-read-lane"])
def test_a_long_export_does_not_delay_a_renewal(request, helper):
    """An NDJSON export of the history, read by a client that stops reading
    after the first bytes: a renewal is answered while the export is
    unfinished, and the export, read to its end, is complete and in order;
    served by the long-read helper process (the shared server's) or in the
    worker's read lane."""
    if helper == "1":
        s = request.getfixturevalue("shared")
    else:
        s = request.getfixturevalue("server")(LEASEHOLD_LONG_READ_PROCESS=helper)
    _renew_cycle(s)
    total = _grow_history(s.db, 40_000)
    sock = _open(s, _export_request(s, "ndjson"))
    head = _response(sock)
    assert head.startswith(b"HTTP/1.1 200"), head[:300]
    _renew_cycle(s)  # the exporting client has read almost nothing yet
    rest = head.split(b"\r\n\r\n", 1)[1]
    while piece := sock.recv(1 << 20):
        rest += piece
    sock.close()
    body = _dechunk(rest)
    ids = [json.loads(line)["id"] for line in body.splitlines()]
    assert len(ids) == total  # as of the export's start: the renewals after it are not in it
    assert ids == sorted(ids) and len(set(ids)) == total


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    stat = fh.read()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2:].split()[1]) == pid:
                out.append(int(entry))
    return out


def _long_read_helpers(server) -> list[int]:
    """The server's long-read helper processes (serving/long_reads.py)."""
    found = []
    todo = [server.proc.pid]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"config.long_reads" in fh.read():
                    found.append(pid)
        except OSError:
            continue
        todo.extend(_children(pid))
    return found


def _wait_until(predicate, timeout=HANG) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # waiting for another process to act, not for lease time
    return True


def test_an_export_runs_in_a_low_priority_process_beside_the_lease_worker(server):
    """A CSV export is served by the worker's long-read helper, a process
    of its own at a lower CPU priority (so its Python never takes the GIL
    or a core from lease actions): while its client has read only the first
    bytes, the helper is there, niced, and a renewal is answered; read to
    its end, the CSV is every event, in order. When its worker dies, the
    helper goes too."""
    s = server()
    _renew_cycle(s)
    total = _grow_history(s.db, 20_000)
    sock = _open(s, _export_request(s, "csv"))
    head = _response(sock)
    assert head.startswith(b"HTTP/1.1 200"), head[:300]
    assert b"text/csv" in head.split(b"\r\n\r\n", 1)[0]
    helpers = _long_read_helpers(s)
    assert len(helpers) == 1
    worker_nice = os.getpriority(os.PRIO_PROCESS, s.proc.pid)  # 10 lower, or the lowest (19) under nice -n 10
    assert os.getpriority(os.PRIO_PROCESS, helpers[0]) >= min(worker_nice + 10, 19) > worker_nice
    _renew_cycle(s)  # the exporting client has read almost nothing yet
    rest = head.split(b"\r\n\r\n", 1)[1]
    while piece := sock.recv(1 << 20):
        rest += piece
    sock.close()
    rows = list(csv.reader(io.StringIO(_dechunk(rest).decode())))
    assert rows[0][:3] == ["id", "occurred_at", "action"]
    ids = [int(row[0]) for row in rows[1:]]
    assert len(ids) == total and ids == sorted(ids) and len(set(ids)) == total
    worker = int(open(f"/proc/{helpers[0]}/stat", "rb").read().rsplit(b")", 1)[1].split()[1])
    # only this server's worker (with one, the server itself): a pid read from /proc may be reused
    assert worker == s.proc.pid or worker in _children(s.proc.pid), (worker, helpers)
    os.kill(worker, 9)
    assert _wait_until(lambda: not os.path.exists(f"/proc/{helpers[0]}/cmdline")
                       or open(f"/proc/{helpers[0]}/stat", "rb").read().rsplit(b")", 1)[1].split()[0] == b"Z")


def test_an_export_that_finds_every_slot_taken_is_answered_503_not_queued(shared):
    """One export slot per worker (LEASEHOLD_LONG_READS=1), held by an export
    whose client reads nothing: a second export waits at most the write wait
    (1 s here) and is answered 503 with Retry-After, and a renewal meanwhile
    is answered at once; once the first is done, an export is served again."""
    s = shared
    _renew_cycle(s)
    _grow_history(s.db, 40_000)  # more CSV than the sockets' buffers hold
    export = _export_request(s, "csv")
    first = _open(s, export)
    assert _response(first).startswith(b"HTTP/1.1 200")
    second = _open(s, export)
    head = _response(second)
    assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head.lower(), head[:300]
    second.close()
    _renew_cycle(s)
    first.close()  # its client goes away: the slot is given back

    def served() -> bool:
        with _open(s, export) as again:
            head = _response(again)
            while again.recv(1 << 20):  # to its end: the server gives its slot back before it closes
                pass
            return head.startswith(b"HTTP/1.1 200")

    assert _wait_until(served)


def test_a_slow_upload_holds_back_neither_a_create_container_nor_a_renewal(server):
    """A large Put Blob stages its chunks in a lane of its own: with a long
    pause after each chunk (the upload holding its thread, not the writer),
    a Create Container (the lane uploads shared before) and a renewal are
    answered while the upload is still unanswered."""
    s = server(LEASEHOLD_STAGE_PAUSE=3000)  # after each 1 MiB chunk, 3000 times as long as it took
    size = 2 * 2**20 + 5
    sock = _open(s, _signed_put_head("/devstoreaccount1/serving/big", size))
    sock.sendall(b"u" * size)
    db = sqlite3.connect(s.db, timeout=HANG)
    try:
        assert _wait_until(lambda: db.execute(
            "SELECT count(*) FROM leases_blobcontent WHERE state='staged'").fetchone()[0] == 1)
    finally:
        db.close()
    created = azure_raw.signed("PUT", s.url, "/devstoreaccount1/meanwhile?restype=container")
    assert created.status_code == 201, created.content
    _renew_cycle(s)
    sock.setblocking(False)
    with pytest.raises(BlockingIOError):  # still staging: nobody above waited for it
        sock.recv(1)
    sock.setblocking(True)
    sock.close()


def _dechunk(data: bytes) -> bytes:
    out: list[bytes] = []
    pos = 0
    while True:
        end = data.index(b"\r\n", pos)
        size = int(data[pos:end], 16)
        if size == 0:
            return b"".join(out)
        out.append(data[end + 2:end + 2 + size])
        pos = end + 2 + size + 2


def _export_request(s, fmt: str) -> str:
    """The head of a full history export, as a client sends it."""
    return (f"GET /api/v1/events/export/?format={fmt} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {_token(s)}\r\nConnection: close\r\n\r\n")


def _token(s) -> str:
    """The admin's API token in the server's database (the template's: no Django start-up)."""
    return admin_token(s.db, s.env)


@pytest.mark.parametrize("holder", ["writer-lock", "sqlite-lock"])
def test_a_waiting_writer_gets_503_and_reads_go_on(shared, holder):
    """Another process holds the writer lock (Leasehold's flock, or SQLite's
    own lock as any program would): lease actions on both doors are refused
    with 503 ServerBusy and Retry-After instead of waiting without bound,
    reads are answered, and service is whole again once the lock is let go
    (the write wait: 1 s)."""
    s = shared
    me = str(uuid.uuid4())
    if holder == "writer-lock":
        fd = os.open(f"{s.db}.writer-lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
    else:
        other = sqlite3.connect(s.db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        refused = azure_raw.lease(s.url, BLOB, "acquire", duration=15, proposed_lease_id=me)
        assert refused.status_code == 503, refused.content
        assert azure_raw.error_code(refused) == "ServerBusy"
        assert refused.headers["Retry-After"] == "1"
        api = azure_raw.signed("POST", s.url, "/api/v1/leases/acquire/devstoreaccount1/serving/b",
                               body=b'{"duration": 15}', headers={"Content-Type": "application/json"})
        assert api.status_code == 503, api.content
        assert api.json()["code"] == "ServerBusy" and api.headers["Retry-After"] == "1"
        assert time.monotonic() - started < HANG  # bounded, not a figure
        read = azure_raw.signed("HEAD", s.url, BLOB)
        assert read.status_code == 200 and read.headers["x-ms-lease-state"] == "available"
        listed = azure_raw.signed("GET", s.url, "/devstoreaccount1/serving?restype=container&comp=list")
        assert listed.status_code == 200 and b"<Name>b</Name>" in listed.content
    finally:
        if holder == "writer-lock":
            os.close(fd)
        else:
            other.execute("ROLLBACK")
            other.close()
    _renew_cycle(s)
    db = sqlite3.connect(s.db)
    assert db.execute("SELECT count(*) FROM leases_leaseevent WHERE ? IN (lease_fingerprint, proposed_lease_fingerprint)",
                      (fingerprints.of(me),)).fetchone()[0] == 0  # the refused acquire wrote nothing
