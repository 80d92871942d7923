"""A commit whose wait for the synchronous standby is cut short: PostgreSQL
then commits locally and only warns ("canceling wait for synchronous
replication ... The transaction has already committed locally, but might
not have been replicated to the standby"). Such a write may or may not
survive a failover to the standby, so it must be answered neither as done
nor as a failure that nothing was written: both doors answer 500
``OperationTimedOut`` (Azure's "the outcome is not known" answer, no
Retry-After), and log it (docs/decisions/0045-unknown-commit-outcome.md).

A real primary with a synchronous standby (tests/pg_cluster.py ``pair``);
the standby is frozen (SIGSTOP), so it acknowledges nothing and each
commit waits until something ends the wait: a cancel, or the server's own
bounds, which drop the connection (the commit's answer is then lost, its
outcome as unknown)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import psycopg
import pytest
import requests

from tests import azure_raw, pg_cluster
from tests.server_process import ROOT, Instance, prepare

pytestmark = [pytest.mark.processes, pytest.mark.postgres]

CONTAINER = "/devstoreaccount1/syncwait"
OTHER = "7d2f9e3a-3b4c-4a5d-8e6f-1a2b3c4d5e6f"
AZURE_LEASE, API_LEASE = "5b0d7c1e-1f2a-4e3b-8c4d-9e0f1a2b3c4d", "6c1e8d2f-2a3b-4f4c-9d5e-0f1a2b3c4d5e"
TOKEN_SETUP = """
import django
django.setup()
from django.contrib.auth import get_user_model
from leases.models.tokens import ApiToken
print(ApiToken.issue(user=get_user_model().objects.get(username="admin"), name="syncwait")[1])
"""


def _unless_busy(send) -> requests.Response:
    """``send()``, again while answered 503 (nothing was made: when the
    server drops its connections, one may not have reached its commit yet)."""
    for _ in range(20):
        answer = send()
        if answer.status_code != 503:
            return answer
    return answer


def _api_acquire(base: str, token: str, blob: str, lease_id: str) -> requests.Response:
    return _unless_busy(lambda: requests.post(f"{base}/api/v1/leases/acquire/devstoreaccount1/syncwait/{blob}",
                                              json={"duration": 15, "proposed_lease_id": lease_id},
                                              headers={"Authorization": f"Bearer {token}"}, timeout=60))


def _azure_acquire(base: str, blob: str, lease_id: str) -> requests.Response:
    return _unless_busy(lambda: azure_raw.lease(base, f"{CONTAINER}/{blob}", "acquire", duration=15,
                                                proposed_lease_id=lease_id))


def _lease_state(base: str, blob: str) -> str:
    read = _unless_busy(lambda: azure_raw.signed("HEAD", base, f"{CONTAINER}/{blob}"))
    assert read.status_code == 200, read.status_code
    return read.headers["x-ms-lease-state"]


def _cancelling(primary: pg_cluster.Cluster, stop: threading.Event) -> None:
    """As an operator's pg_cancel_backend would: cancel each COMMIT that
    waits for the synchronous standby."""
    with psycopg.connect(primary.url(), autocommit=True) as conn:
        while not stop.is_set():
            conn.execute("SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
                         "WHERE wait_event = 'SyncRep' AND query = 'COMMIT'")
            stop.wait(0.05)


def _frozen(server: Instance, primary: pg_cluster.Cluster, standby: pg_cluster.Cluster, token: str,
            name: str) -> None:
    """Acquires through both doors while the standby acknowledges nothing
    (``name`` "cancelled": each commit's wait cancelled at once): answered
    500 OperationTimedOut, yet made (seen once the standby is back); the
    same acquires again settle it (their own lease again)."""
    lease = {"azure": f"{name}-azure", "api": f"{name}-api"}
    for blob in lease.values():
        assert azure_raw.signed("PUT", server.url, f"{CONTAINER}/{blob}",
                                headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    stop = threading.Event()
    canceller = threading.Thread(target=_cancelling, args=(primary, stop))
    standby.signal_all(signal.SIGSTOP)  # acknowledges nothing from now on
    try:
        if name == "cancelled":
            canceller.start()
        azure = _azure_acquire(server.url, lease["azure"], AZURE_LEASE)
        api = _api_acquire(server.url, token, lease["api"], API_LEASE)
    finally:
        stop.set()
        if canceller.is_alive():
            canceller.join(30)
        standby.signal_all(signal.SIGCONT)
    assert (azure.status_code, azure.headers.get("x-ms-error-code"), azure.headers.get("Retry-After")) \
        == (500, "OperationTimedOut", None), azure.content
    assert "may or may not have been made" in azure.text
    assert (api.status_code, api.json()["code"], api.headers.get("Retry-After")) \
        == (500, "OperationTimedOut", None), api.content
    # Made all the same (visible once the standby acknowledged): a failure would have been as wrong.
    assert [_lease_state(server.url, blob) for blob in lease.values()] == ["leased", "leased"]
    # The standby back: the same acquire again settles it (its own lease again, not a second holder).
    again = _azure_acquire(server.url, lease["azure"], AZURE_LEASE)
    assert again.status_code == 201 and again.headers["x-ms-lease-id"] == AZURE_LEASE, again.content
    api_again = _api_acquire(server.url, token, lease["api"], API_LEASE)
    assert api_again.status_code in (200, 201) and api_again.json()["lease_id"] == API_LEASE, api_again.content
    # Another client's acquire is refused: the lease the unknown answers were about is held.
    assert _azure_acquire(server.url, lease["azure"], OTHER).status_code == 409


def test_a_commit_the_standby_did_not_acknowledge_is_answered_as_unknown(tmp_path):
    """Twice: each commit's wait cancelled (pg_cancel_backend; the server's
    bounds are long, LEASEHOLD_WRITE_WAIT 10 s), PostgreSQL commits locally
    and warns; with LEASEHOLD_WRITE_WAIT 1 s, the server's bound on a clock
    reading (1.5 s; the clock's write waits for the standby too) ends first
    and drops every connection of the process, the commits' too, whose
    answers are lost. (statement_timeout does not end a COMMIT's wait.)"""
    with pg_cluster.pair() as (primary, standby):
        database = primary.url()
        env = prepare(database, tmp_path)
        made = subprocess.run([sys.executable, "-c", TOKEN_SETUP], cwd=ROOT, env=env, check=True,
                              capture_output=True, text=True, timeout=120)
        token = max(made.stdout.split(), key=len)
        for name, wait, cause in (("cancelled", "10", "committed locally but warned: canceling wait for "
                                                          "synchronous replication"),
                                  ("lost", "1", "the commit's answer was lost")):
            (tmp_path / name).mkdir()
            server = Instance(database, tmp_path / name, name, workers=1)
            server.env["LEASEHOLD_WRITE_WAIT"] = wait
            server.start()
            try:
                if name == "cancelled":
                    assert azure_raw.signed("PUT", server.url, f"{CONTAINER}?restype=container").status_code == 201
                _frozen(server, primary, standby, token, name)
                log = server.output()
                assert log.count("commit outcome unknown") >= 2 and cause in log, log[-3000:]
                assert "Traceback" not in log and "unhandled error" not in log, log[-3000:]
            finally:
                server.stop()
