"""Lease requests a worker receives together are committed together
(serving/lease_batch.py): the production server with one worker, many
clients renewing at once. Fewer WAL fsyncs than lease writes, every answer
still the client's own, every request in the history; with
LEASEHOLD_LEASE_BATCH=off, one fsync each (so the count can tell). The
JSON API's lease actions take the same batches (leases/api/lean.py):
half the clients renewing through it, half through the Azure door."""

from __future__ import annotations

import sqlite3
import threading
import uuid

import pytest
import requests

from tests import azure_raw
from tests.processes.test_processes import Server
from tests.server_process import admin_token
from tests.serving.test_metrics import scrape, value

pytestmark = pytest.mark.processes

CLIENTS, ROUNDS = 24, 4


def _renew_together(base: str, container: str, token: str | None = None) -> int:
    """CLIENTS clients, each on its own blob: acquire, then ROUNDS renewals
    sent at the same moment by all; returns the lease writes answered.
    With ``token``, the odd clients go through the JSON API."""
    ids = [str(uuid.uuid4()) for _ in range(CLIENTS)]
    session = requests.Session()

    def lease(i: int, action: str, **params):
        path = f"/devstoreaccount1/{container}/b{i}"
        if token is None or i % 2 == 0:
            response = azure_raw.lease(base, path, action, **params)
            return response.status_code, response.headers.get("x-ms-lease-id")
        response = session.post(f"{base}/api/v1/leases/{action}{path}", json=params,
                                headers={"Authorization": f"Bearer {token}"}, timeout=30)
        return response.status_code, response.json().get("lease_id")

    for i, lease_id in enumerate(ids):
        assert azure_raw.signed("PUT", base, f"/devstoreaccount1/{container}/b{i}", body=b"x",
                                headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
        assert lease(i, "acquire", duration=60, proposed_lease_id=lease_id) == (201, lease_id)
    start = threading.Barrier(CLIENTS)
    answers: list = []

    def client(i: int):
        for _ in range(ROUNDS):
            start.wait(timeout=30)
            answers.append((i, *lease(i, "renew", lease_id=ids[i])))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(answers) == sorted((i, 200, ids[i]) for i in range(CLIENTS) for _ in range(ROUNDS))
    return CLIENTS * (1 + ROUNDS)


def _server(tmp_path, batching: bool) -> tuple[Server, str]:
    server = Server(tmp_path, workers=1).migrate()
    server.env["LEASEHOLD_LEASE_BATCH"] = "on" if batching else "off"
    token = admin_token(server.db, server.env)
    return server.start(), token


@pytest.fixture(scope="module")
def batching_server(tmp_path_factory):
    """The server with batching on, for both its tests (each on a container
    of its own, its fsyncs counted from its own start)."""
    server, token = _server(tmp_path_factory.mktemp("batch"), True)
    yield server, token
    server.kill()


@pytest.mark.parametrize("batching, doors", [(True, "azure"), (False, "azure"), (True, "both")])
def test_lease_requests_received_together_share_one_fsync(request, tmp_path, batching, doors):
    server, token = request.getfixturevalue("batching_server") if batching else _server(tmp_path, False)
    headers = {"Authorization": f"Bearer {token}"}
    container = f"batch{doors}"
    try:
        base = server.url
        assert azure_raw.signed("PUT", base, f"/devstoreaccount1/{container}?restype=container").status_code == 201
        before = value(scrape(base, headers), "leasehold_sqlite_fsync_seconds_count") or 0
        writes = _renew_together(base, container, token if doors == "both" else None)
        after = value(scrape(base, headers), "leasehold_sqlite_fsync_seconds_count")
        fsyncs = after - before - CLIENTS  # the uploads of the blobs had one each
        print(f"batching={batching}, doors={doors}: {fsyncs:.0f} fsyncs for {writes} lease writes")
        if batching:
            assert fsyncs < writes * 0.9, (fsyncs, writes)
            if doors == "both":  # the acquires one by one; the JSON API's renewals alone, one each, would take half
                assert fsyncs - CLIENTS < CLIENTS * ROUNDS // 2, (fsyncs, writes)
        else:
            assert fsyncs >= writes, (fsyncs, writes)
    finally:
        if not batching:
            server.kill()
    with sqlite3.connect(server.db) as db:
        [(renewals,)] = db.execute("SELECT count(*) FROM leases_leaseevent WHERE container = ? "
                                   "AND action = 'renew' AND outcome = 'success'", (container,)).fetchall()
    assert renewals == CLIENTS * ROUNDS  # every answered request is in the history
