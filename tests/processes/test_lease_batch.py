"""Lease requests a worker receives together are committed together
(serving/lease_batch.py): the production server with one worker, many
clients renewing at once. Fewer WAL fsyncs than lease writes, every answer
still the client's own, every request in the history; with
LEASEHOLD_LEASE_BATCH=off, one fsync each (so the count can tell)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import uuid

import pytest

from tests import azure_raw
from tests.processes.test_processes import ROOT, Server
from tests.serving.test_metrics import scrape, value

pytestmark = pytest.mark.processes

CLIENTS, ROUNDS = 24, 4


def _renew_together(base: str) -> int:
    """CLIENTS clients, each on its own blob: acquire, then ROUNDS renewals
    sent at the same moment by all; returns the lease writes answered."""
    ids = [str(uuid.uuid4()) for _ in range(CLIENTS)]
    for i, lease_id in enumerate(ids):
        assert azure_raw.signed("PUT", base, f"/devstoreaccount1/batch/b{i}", body=b"x",
                                headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
        acquired = azure_raw.lease(base, f"/devstoreaccount1/batch/b{i}", "acquire", duration=60,
                                   proposed_lease_id=lease_id)
        assert acquired.status_code == 201 and acquired.headers["x-ms-lease-id"] == lease_id
    start = threading.Barrier(CLIENTS)
    answers: list = []

    def client(i: int):
        for _ in range(ROUNDS):
            start.wait(timeout=30)
            response = azure_raw.lease(base, f"/devstoreaccount1/batch/b{i}", "renew", lease_id=ids[i])
            answers.append((i, response.status_code, response.headers.get("x-ms-lease-id")))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(answers) == sorted((i, 200, ids[i]) for i in range(CLIENTS) for _ in range(ROUNDS))
    return CLIENTS * (1 + ROUNDS)


@pytest.mark.parametrize("batching", [True, False])
def test_lease_requests_received_together_share_one_fsync(tmp_path, batching):
    server = Server(tmp_path, workers=1).migrate()
    server.env["LEASEHOLD_LEASE_BATCH"] = "on" if batching else "off"
    made = subprocess.run([sys.executable, "manage.py", "leasehold_token", "create", "--user", "admin", "--name",
                           "scrape"], cwd=ROOT, env=server.env, check=True, capture_output=True, text=True)
    headers = {"Authorization": f"Bearer {max(made.stdout.split(), key=len)}"}
    server.start()
    try:
        base = server.url
        assert azure_raw.signed("PUT", base, "/devstoreaccount1/batch?restype=container").status_code == 201
        before = value(scrape(base, headers), "leasehold_sqlite_fsync_seconds_count") or 0
        writes = _renew_together(base)
        after = value(scrape(base, headers), "leasehold_sqlite_fsync_seconds_count")
        fsyncs = after - before - CLIENTS  # the uploads of the blobs had one each
        print(f"batching={batching}: {fsyncs:.0f} fsyncs for {writes} lease writes")
        if batching:
            assert fsyncs < writes * 0.9, (fsyncs, writes)
        else:
            assert fsyncs >= writes, (fsyncs, writes)
    finally:
        server.kill()
    with sqlite3.connect(server.db) as db:
        [(renewals,)] = db.execute("SELECT count(*) FROM leases_leaseevent WHERE container = 'batch' "
                                   "AND action = 'renew' AND outcome = 'success'").fetchall()
    assert renewals == CLIENTS * ROUNDS  # every answered request is in the history
