"""An account's key changed on a running server takes effect at once, on
both doors: the Azure door's SharedKey and SAS, and the JSON API's
SharedKey, for plain requests and for lease requests (whose credentials
the server checks before they queue, serving/admission.py, from the keys
the process read last: only a pre-filter). The key is changed the way an
operator changes it (``LEASEHOLD_ACCOUNTS=name:key manage.py
leasehold_setup``) while clients keep signing with the old and the new key;
every request sent after the new key is in the database (the test reads it
there) must find the old key refused and the new one accepted. On SQLite
with one server process of two workers; on PostgreSQL with two instances
(marked postgres)."""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import requests
from azure.storage.blob import generate_container_sas

from tests import azure_raw
from tests.api.helpers import shared_key_headers
from tests.server_process import ROOT, Instance, prepare

pytestmark = pytest.mark.processes

ACCOUNT, CONTAINER, BLOB = "keyed", "keys", "leased"
LEASE = "7f8c2a1e-0b5d-4c3a-9e6f-1a2b3c4d5e6f"  # the one lease every lease request acquires (again)
OLD, NEW = (base64.b64encode(bytes([n]) * 32).decode() for n in (1, 2))
BOUND = 60  # every wait's bound


def _set_key(env: dict, key: str) -> None:
    done = subprocess.run([sys.executable, "manage.py", "leasehold_setup"], cwd=ROOT, capture_output=True, text=True,
                          env={**env, "LEASEHOLD_ACCOUNTS": f"{ACCOUNT}:{key}"}, timeout=BOUND)
    assert done.returncode == 0, done.stderr[-2000:]


def _azure(base: str, key: str) -> int:
    path = f"/{ACCOUNT}/{CONTAINER}?restype=container"
    return azure_raw.signed("GET", base, path, account=ACCOUNT, key=key).status_code


def _sas(base: str, key: str) -> int:
    token = generate_container_sas(ACCOUNT, CONTAINER, account_key=key, permission="rl",
                                   expiry=datetime.now(timezone.utc) + timedelta(hours=1))
    return requests.get(f"{base}/{ACCOUNT}/{CONTAINER}?restype=container&comp=list&{token}", timeout=30).status_code


def _api(base: str, key: str) -> int:
    url = f"{base}/api/v1/containers/"
    return requests.get(url, headers=shared_key_headers("GET", url, account=ACCOUNT, key=key, headers={}),
                        timeout=30).status_code


# Lease requests are checked before they queue (serving/admission.py), from the keys the process read
# last: an acquire of the lease already held, with its own id (201 the first time, 200 after).
LEASE_HEADERS = {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "-1", "x-ms-proposed-lease-id": LEASE}


def _ok(status: int) -> int:
    return 200 if status == 201 else status


def _azure_lease(base: str, key: str) -> int:
    path = f"/{ACCOUNT}/{CONTAINER}?comp=lease&restype=container"
    return _ok(azure_raw.signed("PUT", base, path, account=ACCOUNT, key=key, headers=LEASE_HEADERS).status_code)


def _sas_lease(base: str, key: str) -> int:  # on a blob: a container's lease is not a service SAS's to take
    token = generate_container_sas(ACCOUNT, CONTAINER, account_key=key, permission="w",
                                   expiry=datetime.now(timezone.utc) + timedelta(hours=1))
    return _ok(requests.put(f"{base}/{ACCOUNT}/{CONTAINER}/{BLOB}?comp=lease&{token}",
                            headers={**LEASE_HEADERS, "x-ms-version": "2025-11-05"}, timeout=30).status_code)


def _api_lease(base: str, key: str) -> int:
    url = f"{base}/api/v1/leases/acquire/{ACCOUNT}/{CONTAINER}"
    body = json.dumps({"duration": -1, "proposed_lease_id": LEASE}).encode()
    sent = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    headers = shared_key_headers("POST", url, account=ACCOUNT, key=key, headers=sent)
    return _ok(requests.post(url, data=body, headers={**sent, **headers}, timeout=30).status_code)


def _refused(status: int) -> bool:
    return status in (401, 403)  # the JSON API's 401, the Azure door's 403 AuthenticationFailed


DOORS = {"azure sharedkey": _azure, "azure sas": _sas, "api sharedkey": _api,
         "azure lease sharedkey": _azure_lease, "azure lease sas": _sas_lease, "api lease sharedkey": _api_lease}


@contextmanager
def _key_reader(database: str) -> Iterator[Callable[[], str]]:
    """A reader of the account's key in the database, on one connection: a
    connection per reading (on PostgreSQL a backend process each) made the
    test's wait for the change a spin of connects."""
    query = "SELECT key1 FROM leases_account WHERE name = %s"
    if database.startswith(("postgres://", "postgresql://")):
        import psycopg

        conn: Any = psycopg.connect(database, autocommit=True)
    else:
        conn, query = sqlite3.connect(database, isolation_level=None), query.replace("%s", "?")

    def read() -> str:
        row = conn.execute(query, (ACCOUNT,)).fetchone()
        assert row is not None
        return row[0]

    try:
        yield read
    finally:
        conn.close()


def _change_under_load(database: str, env: dict, servers: list[Instance]) -> list[tuple]:
    """Clients sign with the old and the new key through every door of
    every server while the key changes; the requests sent once the test saw
    the new key in the database, with what they got."""
    for server in servers:  # before: the old key opens every door, the new one none
        for door, call in DOORS.items():
            assert (call(server.url, OLD), _refused(call(server.url, NEW))) == (200, True), (server.url, door)
    seen: list[float] = []
    after: list[tuple] = []
    stop = threading.Event()

    def clients() -> None:
        while not stop.is_set():
            for server in servers:
                for door, call in DOORS.items():
                    for name, key in (("old", OLD), ("new", NEW)):
                        sent = time.monotonic()
                        status = call(server.url, key)
                        if seen and sent > seen[0]:
                            after.append((server.url, door, name, status))

    thread = threading.Thread(target=clients)
    thread.start()
    try:
        changer = threading.Thread(target=_set_key, args=(env, NEW))
        changer.start()
        deadline = time.monotonic() + BOUND
        with _key_reader(database) as key_in:
            while key_in() != NEW:
                assert time.monotonic() < deadline, "the key never changed"
                time.sleep(0.005)  # between readings, not a bound
        seen.append(time.monotonic())
        changer.join(BOUND)
        while len(after) < 4 * len(servers) * len(DOORS) * 2:  # every door of every server, with each key, a few times
            assert time.monotonic() < deadline and thread.is_alive(), after
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(BOUND)
    return after


def _create(base: str) -> None:
    assert azure_raw.signed("PUT", base, f"/{ACCOUNT}/{CONTAINER}?restype=container",
                            account=ACCOUNT, key=OLD).status_code == 201
    assert azure_raw.signed("PUT", base, f"/{ACCOUNT}/{CONTAINER}/{BLOB}", account=ACCOUNT, key=OLD,
                            headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201


def _expect_at_once(after: list[tuple]) -> None:
    wrong = [(url, door, name, status) for url, door, name, status in after
             if not (_refused(status) if name == "old" else status == 200)]
    assert not wrong, f"{len(wrong)} of {len(after)} requests after the change got the other key's answer: {wrong[:6]}"


def test_a_changed_key_takes_effect_at_once_on_both_doors(tmp_path):
    database = str(tmp_path / "leasehold.sqlite3")
    env = prepare(database, tmp_path)
    _set_key(env, OLD)
    server = Instance(database, tmp_path, "server", workers=2).start()
    try:
        _create(server.url)
        _expect_at_once(_change_under_load(database, env, [server]))
    finally:
        server.stop()


@pytest.mark.postgres
def test_a_changed_key_takes_effect_at_once_on_two_instances(postgres, tmp_path):
    database = postgres()
    env = prepare(database, tmp_path)
    _set_key(env, OLD)
    servers = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        servers.append(Instance(database, tmp_path / name, name, workers=1))
    try:
        for server in servers:
            server.start()
        _create(servers[0].url)
        _expect_at_once(_change_under_load(database, env, servers))
    finally:
        for server in servers:
            server.stop()


# ------------------------------------------------------------------ lease requests, one request at a time

THIRD = base64.b64encode(bytes([3]) * 32).decode()
LEASE_DOORS = {"azure lease sharedkey": _azure_lease, "azure lease sas": _sas_lease, "api lease sharedkey": _api_lease}
TOKEN_SETUP = """
import django
django.setup()
from django.contrib.auth import get_user_model
from leases.models.tokens import ApiToken
print(ApiToken.issue(user=get_user_model().objects.get(username="admin"), name="keys")[1])
"""


def _token_lease(base: str, token: str) -> int:
    return _ok(requests.post(f"{base}/api/v1/leases/acquire/{ACCOUNT}/{CONTAINER}",
                             json={"duration": -1, "proposed_lease_id": LEASE},
                             headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code)


def test_a_lease_request_checked_before_it_queues_sees_the_key_of_now(tmp_path):
    """A lease request's credentials are checked before it queues from the
    keys the worker read last (one worker: the same memory every time),
    then by its door. Right after a change, with nothing read since: the
    new key is accepted (the check reads again before it refuses), and the
    old key, which that memory still holds, is refused (the door reads the
    keys again); a token revoked in the database is refused by the next
    request, though the worker used it a moment before."""
    database = str(tmp_path / "leasehold.sqlite3")
    env = prepare(database, tmp_path)
    _set_key(env, OLD)
    made = subprocess.run([sys.executable, "-c", TOKEN_SETUP], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True, timeout=BOUND)
    token = max(made.stdout.split(), key=len)
    server = Instance(database, tmp_path, "server", workers=1).start()
    try:
        _create(server.url)
        for door, call in LEASE_DOORS.items():
            assert call(server.url, OLD) == 200, door
        _set_key(env, NEW)  # the worker still remembers OLD: nothing of this account was read since
        assert [(door, call(server.url, NEW)) for door, call in LEASE_DOORS.items()] == \
            [(door, 200) for door in LEASE_DOORS]  # accepted, though the memory says otherwise
        _set_key(env, THIRD)  # the worker now remembers NEW
        assert [(door, _refused(call(server.url, NEW))) for door, call in LEASE_DOORS.items()] == \
            [(door, True) for door in LEASE_DOORS]  # refused, though the memory says otherwise
        assert [(door, call(server.url, THIRD)) for door, call in LEASE_DOORS.items()] == \
            [(door, 200) for door in LEASE_DOORS]

        assert _token_lease(server.url, token) == 200  # the worker remembers the token as usable
        with sqlite3.connect(database) as conn:
            conn.execute("UPDATE leases_apitoken SET revoked_at = ? WHERE name = ?",
                         (datetime.now(timezone.utc).isoformat(" "), "keys"))
        assert _token_lease(server.url, token) == 401
    finally:
        server.stop()
