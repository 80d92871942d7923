"""No way around the credential gate in front of the lease lane, on the
production server (issue 48, points 4 and 6): a far-offset SAS time is a
403 and opens nothing (bad tokens after it are still throttled); a lease
request is one by its decoded query (``?comp=%6Cease`` meets the gate,
``?x=comp=lease`` does not); several SASes of one account are one
principal (its waiters bounded together, as the history shows); and 200
source addresses together are throttled."""

from __future__ import annotations

import http.client
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from email.utils import formatdate

import pytest
from azure.storage.blob import BlobSasPermissions, generate_blob_sas

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests import azure_raw

from .test_processes import Server

pytestmark = pytest.mark.processes

C = f"/{DEV_ACCOUNT}/gate"
HOLDER = "aaaaaaaa-0000-0000-0000-000000000001"
BAD_KEY = f"SharedKey {DEV_ACCOUNT}:" + "A" * 43 + "="


def _server(tmp_path, **settings: str) -> Server:
    server = Server(tmp_path, workers=1).migrate()  # one worker: its buckets and waiter counts are the server's
    server.env.update(settings)
    server.start()
    assert azure_raw.signed("PUT", server.url, f"{C}?restype=container").status_code == 201
    assert azure_raw.signed("PUT", server.url, f"{C}/b", body=b"x", headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    return server


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One server for the three tests whose requests never reach the services
    or hold a blob of their own, each from addresses of its own (a bucket
    each): 3 refusals an address, no bound on all addresses together, 2
    waiters a principal."""
    server = _server(tmp_path_factory.mktemp("gate"), LEASEHOLD_UNAUTHENTICATED_RATE="3/hour",
                     LEASEHOLD_UNAUTHENTICATED_RATE_TOTAL="", LEASEHOLD_WAITERS_PER_PRINCIPAL="2")
    yield server
    server.kill()


def _send(server: Server, method: str, target: str, headers: dict, *, source: str = "127.0.0.1",
          body: bytes = b"") -> tuple[int, str, str, str]:
    """(status, x-ms-error-code, Retry-After, body) of one request from ``source``."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30, source_address=(source, 0))
    try:
        connection.request(method, target, body=body, headers={"Content-Length": str(len(body)), **headers})
        response = connection.getresponse()
        text = response.read().decode(errors="replace")
        return response.status, response.getheader("x-ms-error-code") or "", response.getheader("Retry-After") or "", text
    finally:
        connection.close()


def _lease_headers(**more: str) -> dict:
    return {"x-ms-version": "2025-11-05", "x-ms-lease-action": "acquire", "x-ms-lease-duration": "15",
            "x-ms-date": formatdate(usegmt=True), **more}


def test_a_far_offset_sas_is_refused_and_opens_no_gate(shared):
    server = shared
    far = generate_blob_sas(DEV_ACCOUNT, "gate", "b", account_key=DEV_KEY, permission=BlobSasPermissions(write=True),
                            expiry="9999-12-31T23:59:59-23:59")
    status, code, _, text = _send(server, "PUT", f"{C}/b?comp=lease&{far}", _lease_headers(), source="127.0.0.4")
    tokens = [_send(server, "POST", f"/api/v1/leases/acquire/{C[1:]}/b",
                    {"Authorization": "Bearer lh_" + f"{n:043d}", "Content-Type": "application/json"},
                    body=b'{"duration": 15}', source="127.0.0.4")[0] for n in range(8)]
    # 3 refusals a bucket: the SAS's and two tokens'; then throttled, none let through.
    assert (status, code, tokens) == (403, "AuthenticationFailed", [401] * 2 + [429] * 6), text
    assert "let through to their door unchecked" not in server.output() and "Traceback" not in server.output()


def test_the_lane_decides_by_the_decoded_query(shared):
    server = shared
    encoded = [_send(server, "PUT", f"{C}/b?comp=%6Cease", _lease_headers(), source="127.0.0.2")[:2]
               for _ in range(5)]
    # The gate answers it: 3 refusals, then past the address's bound.
    assert encoded == [(401, "NoAuthenticationInformation")] * 3 + [(503, "ServerBusy")] * 2
    other = [_send(server, "PUT", f"{C}/b?x=comp=lease", {"x-ms-version": "2025-11-05", "x-ms-blob-type": "BlockBlob"},
                   source="127.0.0.3", body=b"y")[:2] for _ in range(5)]
    # Not a lease request: the door's own answer every time, never the gate's.
    assert other == [(401, "NoAuthenticationInformation")] * 5


def test_several_sases_of_one_account_are_one_principal(shared):
    server = shared
    blob = f"{C}/held"  # a blob of its own: the other tests' requests never reach the services
    assert azure_raw.signed("PUT", server.url, blob, body=b"x", headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    assert azure_raw.lease(server.url, blob, "acquire", duration=-1, proposed_lease_id=HOLDER).status_code == 201
    now = datetime.now(timezone.utc)
    sases = [generate_blob_sas(DEV_ACCOUNT, "gate", "held", account_key=DEV_KEY, permission=BlobSasPermissions(write=True),
                               expiry=now + timedelta(hours=1, seconds=n)) for n in range(6)]
    assert len(set(sases)) == 6
    answers: list = []
    lock = threading.Lock()

    def wait_with(sas: str) -> None:
        found = _send(server, "PUT", f"{blob}?comp=lease&{sas}", _lease_headers(**{"x-leasehold-wait": "8"}))
        with lock:
            answers.append(found[:2])

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(wait_with, sases))
    # Two waiters for the account; the other four refused at once.
    assert sorted(answers) == [(409, "LeaseAlreadyPresent")] * 2 + [(503, "ServerBusy")] * 4, answers
    with sqlite3.connect(f"file:{server.db}?mode=ro", uri=True) as db:
        recorded = db.execute("SELECT actor, status_code FROM leases_leaseevent WHERE actor LIKE 'sas:%'").fetchall()
    assert sorted(status for _, status in recorded) == [409, 409] and len({actor for actor, _ in recorded}) == 2


def test_two_hundred_addresses_together_are_throttled(tmp_path):
    server = _server(tmp_path, LEASEHOLD_UNAUTHENTICATED_RATE="5/hour", LEASEHOLD_UNAUTHENTICATED_RATE_TOTAL="100/hour")
    sources = [f"127.0.{1 + n // 250}.{1 + n % 250}" for n in range(200)]
    try:
        def flood(source: str) -> list:
            return [_send(server, "PUT", f"{C}/b?comp=lease", {**_lease_headers(), "Authorization": BAD_KEY},
                          source=source)[:3] for _ in range(2)]

        with ThreadPoolExecutor(50) as pool:
            answers = [answer for each in pool.map(flood, sources) for answer in each]
        seen = server.output()
    finally:
        server.kill()
    refused = [a for a in answers if a[:2] == (403, "AuthenticationFailed")]
    busy = [a for a in answers if a[:2] == (503, "ServerBusy")]
    assert len(refused) + len(busy) == 400 and 100 <= len(refused) <= 101, (len(refused), len(busy))
    assert all(int(retry) >= 1 for _, _, retry in busy)
    assert seen.count("from 127.0.") >= 100  # each address still logged as itself
