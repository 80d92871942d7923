"""No tenant stalls another, on the production server: floods of
anonymous and bad-credential lease requests at both doors over 1,000
connections, then one principal's burst of waiting acquires, while another
account's AutoRenewLease (leasehold_client) holds a 15-s lease, renewing
every second. It never loses the lease and no renewal is refused; every
flood request is refused (401/403, and 503/429 with Retry-After once its
address is past its bound); none reaches the services: the flood's target
(a blob whose lease is held) is unchanged, and the lease requests the
services answered meanwhile (/metrics) are exactly the other tenant's
renewals in the history; and the log has no ERROR line. How fast the renewals are meanwhile is a benchmark's figure
(bench/run.py's flood scenario), not a test's."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid

import pytest
from azure.storage.blob import BlobClient

from tests import azure_raw
from tests.conftest import CONNECTION
from tests.server_process import ROOT, Instance, prepare
from tests.sdk_errors import sdk_error_code
from leases.management.commands.leasehold_setup import DEV_ACCOUNT

pytestmark = pytest.mark.processes

OTHER = "tenantb"
OTHER_KEY = base64.b64encode(b"tenant-b-key-" + b"k" * 51).decode()
CONNECTIONS = 1000
PER_CONNECTION = 3  # 3,000 flood requests, a quarter of each kind
WAITERS = 300


# The other account and the burst's token, in one Django start (each costs seconds of CPU).
SETUP = f"""
import django
django.setup()
from django.contrib.auth import get_user_model
from leases.services import account_ensure
from leases.models.tokens import ApiToken
account_ensure(name={OTHER!r}, key1={OTHER_KEY!r})
print(ApiToken.issue(user=get_user_model().objects.get(username="admin"), name="burst")[1])
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("flood")
    database = tmp / "leasehold.sqlite3"
    env = prepare(str(database), tmp)
    made = subprocess.run([sys.executable, "-c", SETUP], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    instance = Instance(str(database), tmp, "server", workers=2)
    instance.env["LEASEHOLD_SQLITE_SYNCHRONOUS"] = os.environ.get("LEASEHOLD_SQLITE_SYNCHRONOUS", "NORMAL")
    instance.env["LEASEHOLD_WAITERS_PER_PRINCIPAL"] = str(WAITERS // 3)  # some of the burst is refused
    instance.token = max(made.stdout.split(), key=len)
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()


def _flood_requests(port: int) -> list[bytes]:
    """One of each kind: anonymous and badly signed Azure lease requests,
    anonymous and bad-token JSON lease requests."""
    host = f"Host: 127.0.0.1:{port}\r\n"
    azure = (f"PUT /{DEV_ACCOUNT}/flood/b?comp=lease HTTP/1.1\r\n{host}x-ms-version: 2025-11-05\r\n"
             "x-ms-lease-action: acquire\r\nx-ms-lease-duration: 15\r\nContent-Length: 0\r\n")
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
    bad_signature = f"Authorization: SharedKey {DEV_ACCOUNT}:{base64.b64encode(b'x' * 32).decode()}\r\n" \
                    f"x-ms-date: {date}\r\n"
    body = b'{"duration": 15}'
    api = (f"POST /api/v1/leases/acquire/{DEV_ACCOUNT}/flood/b HTTP/1.1\r\n{host}Content-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n")
    return [(azure + "\r\n").encode(), (azure + bad_signature + "\r\n").encode(),
            (api + "\r\n").encode() + body,
            (api + f"Authorization: Bearer lh_{uuid.uuid4().hex}\r\n\r\n").encode() + body]


async def _flood(port: int, statuses: list[int], retry_after: list[bool]) -> None:
    requests = _flood_requests(port)

    async def one(n: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for i in range(PER_CONNECTION):
                writer.write(requests[(n + i) % len(requests)])
                head = await reader.readuntil(b"\r\n\r\n")
                statuses.append(int(head.split(b" ", 2)[1]))
                if statuses[-1] in (429, 503):
                    retry_after.append(b"\r\nretry-after: " in head.lower())
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
        finally:
            writer.close()

    # All connections open first, then the requests: a flood over 1,000 connections at once.
    await asyncio.gather(*(one(n) for n in range(CONNECTIONS)))


async def _waiting_burst(port: int, path: str, statuses: list[int]) -> None:
    """One principal (the dev account) sends WAITERS acquires at once, each
    waiting 3 s for a lease it holds itself: each waits, then is answered
    409 (or 503 past the waiters' bound)."""

    async def one() -> None:
        url = path + "?comp=lease&restype=container"
        headers = azure_raw.signed_headers("PUT", url, {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15",
                                                        "x-leasehold-wait": "3"})
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(f"PUT {url} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n{head}\r\n".encode())
            answer = await reader.readuntil(b"\r\n\r\n")
            statuses.append(int(answer.split(b" ", 2)[1]))
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(WAITERS)))


def test_floods_and_a_burst_stall_no_other_tenant(server):
    from leasehold_client import AutoRenewLease

    connection = CONNECTION.format(a=OTHER, k=OTHER_KEY, url=server.url)
    blob = BlobClient.from_connection_string(connection, "held", "lease", retry_total=0)
    lost: list[str | None] = []  # the reasons of leases lost
    with AutoRenewLease(blob, duration=15, renew_interval=1.0, on_lost=lambda lease: lost.append(lease.lost_reason)) \
            as lease:
        assert lease.has_lease
        start_renewals = lease.renewals

        # The flood's target exists, its lease held: a flood request that reached the services
        # would be answered there and recorded, or would change it.
        target = f"/{DEV_ACCOUNT}/flood"
        assert azure_raw.signed("PUT", server.url, target + "?restype=container").status_code in (201, 409)
        azure_raw.signed("PUT", server.url, target + "/b", body=b"x", headers={"x-ms-blob-type": "BlockBlob"})
        azure_raw.lease(server.url, target + "/b", "acquire", **{"x-ms-lease-duration": "-1"})
        before_flood = _flood_target(server), *_served_and_recorded(server)

        flood: list[int] = []
        retry_after: list[bool] = []
        asyncio.run(_flood(server.port, flood, retry_after))
        after_flood = _flood_target(server), *_served_and_recorded(server)

        held = f"/{DEV_ACCOUNT}/burst{uuid.uuid4().hex[:8]}"
        assert azure_raw.signed("PUT", server.url, held + "?restype=container").status_code == 201
        assert azure_raw.signed("PUT", server.url, held + "?comp=lease&restype=container", headers={
            "x-ms-lease-action": "acquire", "x-ms-lease-duration": "60"}).status_code == 201
        burst: list[int] = []
        asyncio.run(_waiting_burst(server.port, held, burst))

        renewals = lease.renewals - start_renewals
        assert not lease.lost.is_set() and not lost, (lost, lease.lost_reason)
        lease.check()
    assert renewals >= 2  # it renewed during the floods and the burst (every second; they take 4 s or more)

    assert len(flood) == CONNECTIONS * PER_CONNECTION
    assert set(flood) <= {400, 401, 403, 429, 503}, sorted(set(flood))
    assert flood.count(401) + flood.count(403) > 0
    # Past its address's bound the flood is refused before its credentials are read, with a time to retry.
    assert flood.count(429) + flood.count(503) > 0 and retry_after and all(retry_after)
    # Measured: the services answered only the other tenant's renewals meanwhile, not one flood request
    # (each lease request the services answer counts in /metrics and writes one event).
    assert after_flood[0] == before_flood[0], "the flood's target changed"
    served = after_flood[1] - before_flood[1]
    with sqlite3.connect(server.database) as db:
        meanwhile = db.execute("SELECT account, action FROM leases_leaseevent WHERE id > ? AND id <= ?",
                               (before_flood[2], after_flood[2])).fetchall()
    assert served == len(meanwhile) and set(meanwhile) <= {(OTHER, "renew")}, (served, meanwhile)
    assert len(burst) == WAITERS and set(burst) == {409, 503}, sorted(set(burst))  # 503: past the waiters' bound

    with sqlite3.connect(server.database) as db:
        other = db.execute("SELECT action, status_code FROM leases_leaseevent WHERE account = ?",
                           (OTHER,)).fetchall()
    renewed = [status for action, status in other if action == "renew"]
    assert renewed and set(renewed) == {200}, other  # no renewal refused
    log = server.output()
    # Refused waiters (503 ServerBusy, a throttle) and refused credentials write no ERROR line.
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]
    refusals = log.count("without valid credentials")
    assert 1 <= refusals <= 8, refusals  # once a minute per address and worker, not per request


def _flood_target(server) -> list:
    with sqlite3.connect(server.database) as db:
        return db.execute("SELECT b.etag, b.lease_state, b.lease_id, b.lease_generation FROM leases_blob b "
                          "JOIN leases_container c ON b.container_id = c.id WHERE c.name = 'flood'").fetchall()


def _last_event(server) -> int:
    with sqlite3.connect(server.database) as db:
        return db.execute("SELECT coalesce(max(id), 0) FROM leases_leaseevent").fetchone()[0]


def _served_and_recorded(server) -> tuple[float, int]:
    """The lease requests served and the last event, read as one: the other tenant
    renews every second meanwhile, so a pair is taken only when two reads agree."""
    pair = _lease_requests(server), _last_event(server)
    while True:
        time.sleep(0.05)
        again = _lease_requests(server), _last_event(server)
        if again == pair:
            return pair
        pair = again


def _lease_requests(server) -> float:
    """Lease requests the services answered, all actions, doors and outcomes (/metrics)."""
    import requests

    text = requests.get(server.url + "/metrics", headers={"Authorization": f"Bearer {server.token}"},
                        timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("leasehold_lease_requests_total{"))


def test_one_token_renewing_back_to_back_is_not_throttled(server):
    """3,000 lease actions by one token with the default rate: back to back
    on two kept-alive connections at once (so both workers serve them), each
    request one write of the socket."""
    import socket

    def request(container: str, action: str, body: dict) -> bytes:
        data = json.dumps(body).encode()
        return (f"POST /api/v1/leases/{action}/{DEV_ACCOUNT}/{container} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {server.token}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode() + data

    def renew_back_to_back(statuses: list[int], times: int) -> None:
        container = "rate" + uuid.uuid4().hex[:8]
        assert azure_raw.signed("PUT", server.url, f"/{DEV_ACCOUNT}/{container}?restype=container").status_code == 201
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            reader = sock.makefile("rb")

            def answer() -> tuple[int, dict]:
                status = int(reader.readline().split()[1])
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                return status, json.loads(reader.read(length))

            sock.sendall(request(container, "acquire", {"duration": 60}))
            status, body = answer()
            statuses.append(status)
            renew = request(container, "renew", {"lease_id": body.get("lease_id")})
            for _ in range(times - 1):
                sock.sendall(renew)
                statuses.append(answer()[0])

    import threading

    first: list[int] = []
    second: list[int] = []
    threads = [threading.Thread(target=renew_back_to_back, args=(statuses, 1500)) for statuses in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    statuses = first + second
    assert len(statuses) == 3000 and statuses.count(429) == 0, sorted(set(statuses))
    assert sorted(set(statuses)) == [200, 201]


def _new_log(server, before: int) -> str:
    return server.log_path.read_bytes()[before:].decode(errors="replace")


def test_pipelined_connections_closed_early_log_no_traceback(server):
    """Clients that pipeline requests behind a waiting acquire and close the
    connection before any answer: the request being answered learns that
    the client is gone (uvicorn told only the last one read, so the waiter
    wrote its answer to the closed transport: a RuntimeError and uvicorn's
    traceback)."""
    import socket

    before = server.log_path.stat().st_size
    path = f"/{DEV_ACCOUNT}/pipe{uuid.uuid4().hex[:8]}"
    lease = path + "?comp=lease&restype=container"
    assert azure_raw.signed("PUT", server.url, path + "?restype=container").status_code == 201
    assert azure_raw.signed("PUT", server.url, lease, headers={"x-ms-lease-action": "acquire",
                                                               "x-ms-lease-duration": "60"}).status_code == 201

    def raw(method: str, url: str, extra: dict) -> bytes:
        headers = azure_raw.signed_headers(method, url, extra)
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return f"{method} {url} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n{head}\r\n".encode()

    waiting = {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15", "x-leasehold-wait": "1.5"}
    pipelined = raw("PUT", lease, waiting) + raw("GET", path + "?restype=container", {}) * 5
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(pipelined)  # closed at once: the server reads the requests, then the end
    # A waiter of our own sent after those: answered once theirs have ended too (a handshake, not a sleep).
    ours = azure_raw.signed("PUT", server.url, lease, headers=waiting)
    assert ours.status_code == 409
    log = _new_log(server, before)
    assert "Traceback" not in log and " ERROR " not in log and "ERROR:" not in log, log[-3000:]


def test_bad_host_headers_log_one_warning(server):
    """Django's "Invalid HTTP_HOST header" was an ERROR per request: now a
    WARNING, once a minute per client address."""
    import socket

    before = server.log_path.stat().st_size
    statuses = []
    for n in range(20):
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(f"GET /admin/ HTTP/1.1\r\nHost: evil{n}.example\r\nConnection: close\r\n\r\n".encode())
            statuses.append(int(sock.makefile("rb").readline().split()[1]))
    assert statuses == [400] * 20
    log = _new_log(server, before)
    lines = [line for line in log.splitlines() if "HTTP_HOST" in line]
    assert 1 <= len(lines) <= 2 and all(" WARNING " in line for line in lines), lines  # one per worker at most
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]


def test_every_kind_of_valid_credentials_passes_the_check_before_the_lane(server):
    """The check in front of the lease lane (serving/admission.py) lets each
    kind of valid credentials through to the door -- a token, SharedKey on
    the JSON API, an admin session -- and refuses a session that is not one."""
    import re

    import requests as http

    from tests.api.helpers import shared_key_headers
    from leases.management.commands.leasehold_setup import DEV_KEY

    container = "kinds" + uuid.uuid4().hex[:8]
    assert azure_raw.signed("PUT", server.url, f"/{DEV_ACCOUNT}/{container}?restype=container").status_code == 201
    api = f"/api/v1/leases/acquire/{DEV_ACCOUNT}/{container}"
    body = json.dumps({"duration": 15}).encode()  # each its own lease id: the second and later are refused 409

    by_token = http.post(server.url + api, data=body, timeout=30, headers={
        "Authorization": f"Bearer {server.token}", "Content-Type": "application/json"})
    assert by_token.status_code == 201, by_token.text

    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    signed = shared_key_headers("POST", api, account=DEV_ACCOUNT, key=DEV_KEY, headers=headers)
    by_key = http.post(server.url + api, data=body, headers={**headers, **signed}, timeout=30)
    assert (by_key.status_code, by_key.json()["code"]) == (409, "LeaseAlreadyPresent"), by_key.text  # through

    with http.Session() as browser:
        page = browser.get(server.url + "/admin/login/", timeout=30)
        form = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert form, page.text[:500]
        token = form.group(1)
        logged = browser.post(server.url + "/admin/login/", timeout=30, allow_redirects=False, data={
            "csrfmiddlewaretoken": token, "username": "admin", "password": "x" * 12, "next": "/admin/"},
            headers={"Referer": server.url + "/admin/login/"})
        assert logged.status_code == 302, logged.text[:500]
        csrf = browser.cookies["csrftoken"]
        assert csrf is not None  # set with the login page
        by_session = browser.post(server.url + api, data=body, timeout=30, headers={
            "Content-Type": "application/json", "X-CSRFToken": csrf,
            "Referer": server.url + "/admin/"})
        assert (by_session.status_code, by_session.json()["code"]) == (409, "LeaseAlreadyPresent"), by_session.text

    made_up = http.post(server.url + api, data=body, timeout=30, headers={
        "Content-Type": "application/json", "Cookie": f"sessionid={uuid.uuid4().hex}"})
    assert (made_up.status_code, made_up.json()["code"]) == (401, "NoAuthenticationInformation"), made_up.text
    with sqlite3.connect(server.database) as db:
        actors = {actor for actor, in db.execute("SELECT actor FROM leases_leaseevent WHERE container = ?",
                                                 (container,))}
    assert actors == {"token:burst", f"account:{DEV_ACCOUNT}", "user:admin"}, actors


def test_a_sas_passes_the_check_before_the_lane_and_a_tampered_one_is_refused_there(server):
    """The Azure door's shared access signatures, made by the SDK, through
    the production server: a blob SAS's lease actions pass the check in front
    of the lease lane and are recorded under the SAS's name; a tampered one is
    refused there (403 AuthenticationFailed, Azure's detail), recording nothing."""
    from datetime import datetime, timedelta, timezone

    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import BlobLeaseClient, BlobSasPermissions, generate_blob_sas

    from leases.management.commands.leasehold_setup import DEV_KEY

    container = "sas" + uuid.uuid4().hex[:8]
    assert azure_raw.signed("PUT", server.url, f"/{DEV_ACCOUNT}/{container}?restype=container").status_code == 201
    assert azure_raw.signed("PUT", server.url, f"/{DEV_ACCOUNT}/{container}/b",
                            headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    token = generate_blob_sas(DEV_ACCOUNT, container, "b", account_key=DEV_KEY,
                              permission=BlobSasPermissions(write=True),
                              expiry=datetime.now(timezone.utc) + timedelta(hours=1))
    blob = BlobClient(f"{server.url}/{DEV_ACCOUNT}", container, "b", credential=token, retry_total=0)
    lease = BlobLeaseClient(blob)
    lease.acquire(lease_duration=15)
    lease.renew()
    lease.release()

    tampered = token.replace("sp=w", "sp=rw")
    with pytest.raises(HttpResponseError) as refused:
        BlobLeaseClient(BlobClient(f"{server.url}/{DEV_ACCOUNT}", container, "b", credential=tampered,
                                   retry_total=0)).acquire(lease_duration=15)
    assert (refused.value.status_code, sdk_error_code(refused.value)) == (403, "AuthenticationFailed")
    assert refused.value.response is not None  # refused by the server, not before
    assert "Signature did not match" in refused.value.response.text()
    with sqlite3.connect(server.database) as db:
        rows = db.execute("SELECT action, status_code, actor FROM leases_leaseevent WHERE container = ? "
                          "ORDER BY id", (container,)).fetchall()
    assert [(a, s) for a, s, _ in rows] == [("acquire", 201), ("renew", 200), ("release", 200)], rows
    assert all(actor.startswith(f"sas:{DEV_ACCOUNT}:") for _, _, actor in rows), rows


def test_a_client_still_writing_a_refused_upload_reads_the_refusal(server):
    """As tests/azure/test_azure_requests.py checks it of the test server:
    the production server reads the rest of a body it refused early."""
    container = f"/{DEV_ACCOUNT}/refused"
    assert azure_raw.signed("PUT", server.url, f"{container}?restype=container").status_code == 201
    assert azure_raw.signed("PUT", server.url, f"{container}/b", body=b"x",
                            headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    assert azure_raw.lease(server.url, f"{container}/b", "acquire", duration=-1).status_code == 201
    answer, written, write_error = azure_raw.upload_refused_midway(
        server.url, f"{container}/b?comp=block&blockid=MDAwMDAwMDE%3D", 32 << 20)
    assert (answer, written, write_error) == ("HTTP/1.1 412 Precondition Failed", 32 << 20, "")
