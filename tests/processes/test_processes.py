"""Real server processes on real SQLite files: contention across worker
processes of the production server (serving/server.py), durability across SIGKILL, and the README's own start command."""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from leases.domain import fingerprints
from tests import azure_raw
from tests.lincheck import Recorder
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests.conftest import CONNECTION, free_port

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DEV = CONNECTION.split(";")[0]


class Server:
    """The production server (python -m config.serve), on its own database file."""

    def __init__(self, tmp: Path, *, workers: int):
        self.db = tmp / "leasehold.sqlite3"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "LEASEHOLD_DATABASE": str(self.db), "LEASEHOLD_VAR_DIR": str(tmp),
                    "LEASEHOLD_BIND": f"127.0.0.1:{self.port}", "LEASEHOLD_WORKERS": str(workers),
                    "DJANGO_SETTINGS_MODULE": "config.settings"}
        self.proc: subprocess.Popen[bytes] | None = None

    def migrate(self):
        """migrate + leasehold_setup, as `make run` does (a copy of a database
        made so, when it fits: tests/server_process.py's prepare)."""
        from tests.server_process import prepare

        prepare(self.db, self.db.parent, self.env)
        return self

    def start(self):
        # A file, not a pipe: a pipe nobody reads would stall a chatty server.
        self.log = open(self.db.with_name("server.log"), "ab")
        self.proc = proc = subprocess.Popen([sys.executable, "-m", "serving.server"], cwd=ROOT, env=self.env,
                                            start_new_session=True, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, proc, output=self.output)
        return self

    def kill(self):
        """SIGKILL the whole process group: master and workers, no clean-up."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.log.close()
            # The workers inherited the listening socket and may outlive the
            # master by a moment: wait until nothing answers on the port, or
            # the next start() could mistake a dying worker for the new server.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", self.port)) != 0:
                        return
                time.sleep(0.02)
            raise AssertionError("the killed server's port still answers")

    def output(self) -> str:
        return self.db.with_name("server.log").read_bytes().decode(errors="replace")


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60,
                  output: Callable[[], str] | None = None) -> None:
    """``output``: the server's output so far; without it, ``proc``'s piped stdout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            if output is not None:
                text = output()
            else:
                assert proc.stdout is not None, "a server without an output function pipes its stdout"
                text = proc.stdout.read().decode(errors="replace")
            raise AssertionError(f"server exited: {text[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)  # waiting for a process to come up, not passing lease time
    raise AssertionError("server did not start")


@pytest.fixture
def server_factory(tmp_path):
    servers = []

    def make(workers=1):
        server = Server(tmp_path, workers=workers)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.kill()


def test_many_processes_never_grant_one_blob_twice(server_factory):
    """4 worker processes, 32 clients contending for one blob: a client that
    got 201 holds the lease until it releases; no other 201 may arrive while
    it does. Zero 5xx, and every granted lease is in the history; the whole
    history of answers is linearizable (tests/lincheck.py)."""
    server = server_factory(workers=4).migrate().start()
    base = server.url
    assert azure_raw.signed("PUT", base, "/devstoreaccount1/race?restype=container").status_code == 201
    assert azure_raw.signed("PUT", base, "/devstoreaccount1/race/one", body=b"x",
                            headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    path = "/devstoreaccount1/race/one"

    lock = threading.Lock()
    holder: list[str | None] = [None]
    granted, double, errors = [], [], []
    statuses: dict[int, int] = {}
    stop = time.monotonic() + 3  # enough for hundreds of attempts (checked below)
    history = Recorder()

    def lease(me: str, action: str, **sent):
        sent_at = history.clock()
        response = azure_raw.lease(base, path, action, **sent)
        history.http(me, path, action, sent_at, response, lease_id=sent.get("lease_id"),
                     proposed_id=sent.get("proposed_lease_id"), duration=sent.get("duration"))
        return response

    def client(n: int):
        me = str(uuid.UUID(int=n + 1))
        try:
            while time.monotonic() < stop:
                r = lease(me, "acquire", duration=15, proposed_lease_id=me)
                with lock:
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    if r.status_code == 201:
                        if holder[0] is not None:
                            double.append((holder[0], me))
                        holder[0] = me
                        granted.append(me)
                if r.status_code != 201:
                    assert r.status_code == 409 and azure_raw.error_code(r) == "LeaseAlreadyPresent", r.content
                    continue
                # the answer is this client's own (not another request's)
                assert r.headers["x-ms-lease-id"] == me, (r.headers, me)
                acquired_at = time.monotonic()  # a lease held past 15 s may expire and go to another
                renewed = lease(me, "renew", lease_id=me)
                assert renewed.status_code == 200, (renewed.content, time.monotonic() - acquired_at)
                with lock:
                    holder[0] = None  # give up the belief before the release goes out
                released = lease(me, "release", lease_id=me)
                assert released.status_code == 200, (released.content, time.monotonic() - acquired_at)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, (errors[:3], double, statuses)
    assert not double
    assert not any(s >= 500 for s in statuses), statuses
    # real contention: hundreds of attempts, the lease handed between clients
    assert sum(statuses.values()) > 200 and len(set(granted)) >= 3, (statuses, len(granted))
    verdict = history.check()
    assert verdict, verdict.explain()
    print(verdict.explain())
    server.kill()
    log = server.output()
    assert "database is locked" not in log and "Traceback" not in log, log[-3000:]

    db = sqlite3.connect(server.db)
    rows = db.execute("SELECT action, outcome, lease_fingerprint FROM leases_leaseevent WHERE blob='one' "
                      "ORDER BY id").fetchall()
    # the history is in time order: each decision's time is read under the
    # writer lock, so no event is stamped before one committed ahead of it
    times = [t for (t,) in db.execute("SELECT occurred_at FROM leases_leaseevent WHERE blob='one' ORDER BY id")]
    backwards = [(a, b) for a, b in zip(times, times[1:]) if b < a]
    assert not backwards, (len(backwards), backwards[:3])
    acquires = [lid for action, outcome, lid in rows if action == "acquire" and outcome == "success"]
    assert sorted(acquires) == sorted(fingerprints.of(x) for x in granted)
    # replayed from the history, leases alternate: acquire, (renew), release, acquire, ...
    holding = None
    for action, outcome, lid in rows:
        if outcome != "success":
            continue
        if action == "acquire":
            assert holding is None
            holding = lid
        elif action == "release":
            assert holding == lid
            holding = None
    assert sum(statuses.values()) == len([r for r in rows if r[0] == "acquire"])


def test_acknowledged_leases_survive_a_sigkill_mid_load(server_factory):
    """Clients take, renew and release the leases of 3 blobs while the server
    is killed (SIGKILL, master and worker) and started again on its file:
    the whole history of answers is one a single correct lease could have
    given (tests/lincheck.py): no acknowledged acquire, renewal or release
    lost, requests cut by the kill counted as outcomes unknown. And an
    infinite lease acquired before the load is still held by its holder."""
    server = server_factory(workers=1).migrate().start()
    base = server.url
    assert azure_raw.signed("PUT", base, "/devstoreaccount1/kill?restype=container").status_code == 201
    paths = [f"/devstoreaccount1/kill/b{n}" for n in range(4)]
    for path in paths:
        assert azure_raw.signed("PUT", base, path, body=b"x", headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    held, paths = paths[3], paths[:3]
    infinite = azure_raw.lease(base, held, "acquire", duration=-1)
    assert infinite.status_code == 201
    history, stop, errors = Recorder(), threading.Event(), []
    answered_after = {"restart": float("inf"), "count": 0}

    def lease(me: str, path: str, action: str, **sent):
        sent_at = history.clock()
        try:
            response = azure_raw.lease(base, path, action, **sent)
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
            if "Connection refused" in str(exc):  # never reached a server: nothing to record
                time.sleep(0.05)  # the server is starting again
                return None
            # cut by the kill, before its answer or in the middle of its body:
            # it may or may not have been made, before now
            response = None
        history.http(me, path, action, sent_at, response, server_gone=response is None,
                     lease_id=sent.get("lease_id"), proposed_id=sent.get("proposed_lease_id"),
                     duration=sent.get("duration"))
        if response is not None and sent_at > answered_after["restart"]:
            answered_after["count"] += 1
        return response

    def client(n: int):
        me, path = str(uuid.UUID(int=n + 1)), paths[n % len(paths)]
        try:
            while not stop.is_set():
                r = lease(me, path, "acquire", duration=15, proposed_lease_id=me)
                if r is None or r.status_code != 201:
                    assert r is None or r.status_code == 409, r.content
                    continue
                for action in ("renew", "release"):
                    r = lease(me, path, action, lease_id=me)
                    assert r is None or r.status_code in (200, 409), r.content
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    time.sleep(1)  # under load, then killed
    server.kill()
    server.start()
    answered_after["restart"] = history.clock()
    deadline = time.monotonic() + 30
    while answered_after["count"] < 100 and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for load after the restart, not for lease time
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors[:3]
    assert answered_after["count"] >= 100, answered_after
    props = azure_raw.signed("HEAD", server.url, held)
    assert props.headers["x-ms-lease-state"] == "leased" and props.headers["x-ms-lease-duration"] == "infinite"
    # the holder still holds it: renew with its id works, a newcomer is refused
    assert azure_raw.lease(server.url, held, "renew", lease_id=infinite.headers["x-ms-lease-id"]).status_code == 200
    assert azure_raw.lease(server.url, held, "acquire", duration=15).status_code == 409
    verdict = history.check()
    assert verdict, verdict.explain()
    print(verdict.explain(), f"({sum(1 for op in history.ops if not op.known)} outcomes unknown)")


def test_readme_start_command_serves_development_storage(tmp_path):
    """`make run` as the README says, then the SDK with UseDevelopmentStorage=true's
    account and key. On a free port (LEASEHOLD_BIND), so that a `make run` on
    10000 and `make test` work side by side."""
    from azure.storage.blob import BlobServiceClient

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "LEASEHOLD_VAR_DIR": str(tmp_path), "LEASEHOLD_WORKERS": "2",
           "LEASEHOLD_BIND": f"127.0.0.1:{port}"}
    env.pop("LEASEHOLD_DATABASE", None)
    proc = subprocess.Popen(["make", "run"], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc, timeout=120)
        development = BlobServiceClient.from_connection_string("UseDevelopmentStorage=true")
        assert development.url.startswith("http://127.0.0.1:10000/devstoreaccount1")
        # the same account and credential, on this server's port
        client = BlobServiceClient(f"{base}/{development.account_name}", credential=development.credential,
                                   retry_total=0)
        blob = client.create_container("readme").upload_blob("hello.txt", b"hi")
        lease = blob.acquire_lease(lease_duration=15)
        assert blob.get_blob_properties().lease.state == "leased"
        lease.release()
        # The README's SDK example, as written, twice in a row (a second run must not fail).
        here = CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=base)
        example = _readme_example().replace('"UseDevelopmentStorage=true"', repr(here))
        for _ in range(2):
            namespace: dict[str, Any] = {}
            exec(compile(example, "README.md", "exec"), namespace)
            assert namespace["blob"].get_blob_properties().lease.state == "available"
        assert requests.get(f"{base}/admin/login/", timeout=10).status_code == 200
        css = requests.get(f"{base}/static/admin/css/base.css", timeout=10)
        assert css.status_code == 200 and "text/css" in css.headers["Content-Type"]
        assert (tmp_path / "leasehold.sqlite3").exists()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=30)[0].decode(errors="replace")
    assert "Password:" in out  # the first admin password is shown once
    assert f"Leasehold ready on http://127.0.0.1:{port} (admin: /admin/)" in out


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    quick_start = text[text.index("## Quick start"):]
    example = re.search(r"```python\n(.*?)```", quick_start, re.S)
    assert example, quick_start
    return example.group(1)
