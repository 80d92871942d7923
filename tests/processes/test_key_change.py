"""An account's key changed on a running server takes effect at once, on
both doors: the Azure door's SharedKey and SAS, and the JSON API's
SharedKey. The key is changed the way an operator changes it
(``LEASEHOLD_ACCOUNTS=name:key manage.py leasehold_setup``) while clients
keep signing with the old and the new key; every request sent after the new
key is in the database (the test reads it there) must find the old key
refused and the new one accepted. On SQLite with one server process of two
workers; on PostgreSQL with two instances (marked postgres)."""

from __future__ import annotations

import base64
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
import requests
from azure.storage.blob import generate_container_sas

from tests import azure_raw
from tests.api.helpers import shared_key_headers
from tests.server_process import ROOT, Instance, prepare

pytestmark = [pytest.mark.processes, pytest.mark.xfail(strict=False, reason=(
    "leases/auth/sharedkey.py remembers an account's keys for ACCOUNT_CACHE_SECONDS (1 s) in each process; "
    "a key changed by another process works on there until then (reported to the lead: the fix is in leases/auth/)"))]

ACCOUNT, CONTAINER = "keyed", "keys"
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


def _refused(status: int) -> bool:
    return status in (401, 403)  # the JSON API's 401, the Azure door's 403 AuthenticationFailed


DOORS = {"azure sharedkey": _azure, "azure sas": _sas, "api sharedkey": _api}


def _key_in(database: str) -> str:
    query = "SELECT key1 FROM leases_account WHERE name = %s"
    if database.startswith(("postgres://", "postgresql://")):
        import psycopg

        with psycopg.connect(database) as conn:
            row = conn.execute(query, (ACCOUNT,)).fetchone()
    else:
        with sqlite3.connect(database) as conn:
            row = conn.execute(query.replace("%s", "?"), (ACCOUNT,)).fetchone()
    assert row is not None
    return row[0]


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
        while _key_in(database) != NEW:
            assert time.monotonic() < deadline, "the key never changed"
        seen.append(time.monotonic())
        changer.join(BOUND)
        while len(after) < 4 * len(servers) * len(DOORS) * 2:  # every door of every server, with each key, a few times
            assert time.monotonic() < deadline and thread.is_alive(), after
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(BOUND)
    return after


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
        assert azure_raw.signed("PUT", server.url, f"/{ACCOUNT}/{CONTAINER}?restype=container",
                                account=ACCOUNT, key=OLD).status_code == 201
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
        assert azure_raw.signed("PUT", servers[0].url, f"/{ACCOUNT}/{CONTAINER}?restype=container",
                                account=ACCOUNT, key=OLD).status_code == 201
        _expect_at_once(_change_under_load(database, env, servers))
    finally:
        for server in servers:
            server.stop()
