"""A waiting acquire whose client goes away (docs/decisions/0028): dropped
unrecorded, end to end on the production server. It stops counting against
its principal's waiters, it is never granted the lease afterwards, and no
history event names it.

Whether the server holds the waiter is read from the server itself, not
slept for: with LEASEHOLD_WAITERS_PER_PRINCIPAL=1, a second waiting acquire
of the same principal is refused 503 ServerBusy at once while the first one
waits, and waits (then gets the usual 409) once the first is gone."""

from __future__ import annotations

import socket
import sqlite3
import time

import pytest

from leases.domain import fingerprints
from tests import azure_raw

from .test_processes import Server

pytestmark = pytest.mark.processes

C = "/devstoreaccount1/waits"
HOLDER, WAITER, LATER = ("aaaaaaaa-0000-0000-0000-00000000000" + c for c in "123")


def _probe(base: str) -> int:
    """A waiting acquire (1 s) of another held blob: 503 at once while the
    principal's one waiter slot is taken, else 409 once its second is up."""
    return azure_raw.lease(base, f"{C}/probe", "acquire", duration=15, **{"x-leasehold-wait": "1"}).status_code


def _until(done, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"


def test_a_waiter_whose_client_disconnects_is_dropped_unrecorded_and_never_granted(tmp_path):
    server = Server(tmp_path, workers=1).migrate()
    server.env["LEASEHOLD_WAITERS_PER_PRINCIPAL"] = "1"
    server.start()
    try:
        base = server.url
        assert azure_raw.signed("PUT", base, f"{C}?restype=container").status_code == 201
        for blob in ("b", "probe"):
            assert azure_raw.signed("PUT", base, f"{C}/{blob}", body=b"x",
                                    headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
            assert azure_raw.lease(base, f"{C}/{blob}", "acquire", duration=-1,
                                   proposed_lease_id=HOLDER).status_code == 201
        path = f"{C}/b?comp=lease"
        headers = azure_raw.signed_headers("PUT", path, {
            "x-ms-lease-action": "acquire", "x-ms-lease-duration": "15", "x-ms-proposed-lease-id": WAITER,
            "x-ms-client-request-id": "the-waiter", "x-leasehold-wait": "60"})
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        head = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Host": "127.0.0.1", "Content-Length": "0"}.items())
        sock.sendall(f"PUT {path} HTTP/1.1\r\n{head}\r\n".encode())
        _until(lambda: _probe(base) == 503, "the server holding the waiter")
        sock.close()  # the client goes away without an answer
        _until(lambda: _probe(base) == 409, "the waiter dropped, its slot free again")
        assert azure_raw.lease(base, f"{C}/b", "release", lease_id=HOLDER).status_code == 200
        later = azure_raw.lease(base, f"{C}/b", "acquire", duration=15, proposed_lease_id=LATER)
        assert (later.status_code, later.headers.get("x-ms-lease-id")) == (201, LATER), later.text
    finally:
        server.kill()
    with sqlite3.connect(f"file:{server.db}?mode=ro", uri=True) as db:
        def named(lease_id: str, request_id: str) -> int:  # the history keeps lease ids' fingerprints
            return db.execute("SELECT count(*) FROM leases_leaseevent WHERE client_request_id = ?"
                              " OR lease_fingerprint = ? OR proposed_lease_fingerprint = ?",
                              [request_id, *[fingerprints.of(lease_id)] * 2]).fetchone()[0]

        assert named(WAITER, "the-waiter") == 0
        assert named(LATER, "no such request") >= 1  # the query finds an acquire that was made
