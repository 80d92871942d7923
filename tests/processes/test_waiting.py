"""Acquires that wait for a held lease (serving/waiting.py, leases/domain/waiting.py)
on real server processes: granted at the release across two workers
(SQLite) and two instances (PostgreSQL), the usual 409 once the wait
runs out, one history event per request, 1,000 waiters on one worker
without a thread each, and the leader helper's standby taking over at the
leader's release.

The release comes once the server holds the waiter (its gauge of waiting
acquires says so: the handshake). "At the release" is an order: the answer
came after the release was sent and before the waiter's wait (WAIT
seconds) could have run out, so only the release's signal (or the break's
end) can have granted it; the break's end is the server's own record (the
grant's time in the history against the break's). How fast the takeover is
(about 0.01 s) is bench/waiting.py's figure, not a test's."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from tests import azure_raw
from tests.conftest import CONNECTION
from tests.server_process import Instance, admin_token, prepare
from tests.serving.test_metrics import scrape, value
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY

pytestmark = pytest.mark.processes
WAIT_S = 60  # a waiter's wait: answered in its first half, it was not answered by its wait running out

WAIT = "x-leasehold-wait"
THOUSAND_WAIT = 10  # seconds each of the 1,000 waiters waits


@pytest.fixture(scope="module")
def sqlite_server(tmp_path_factory):
    """Two workers on one SQLite file, with a JSON API token."""
    tmp = tmp_path_factory.mktemp("waiting")
    database = tmp / "leasehold.sqlite3"
    env = prepare(str(database), tmp)
    server = Instance(str(database), tmp, "server", workers=2)
    server.token = admin_token(database, env)
    server.start()
    try:
        yield server
    finally:
        server.stop()
    log = server.output()
    assert "Traceback" not in log and "Internal Server Error" not in log, log[-3000:]


def _container(base: str) -> str:
    name = "w" + uuid.uuid4().hex[:12]
    assert azure_raw.signed("PUT", base, f"/{DEV_ACCOUNT}/{name}?restype=container").status_code == 201
    return f"/{DEV_ACCOUNT}/{name}"


def _acquire(base: str, path: str, duration: int, **headers) -> requests.Response:
    headers = {"x-ms-lease-action": "acquire", "x-ms-lease-duration": str(duration), **headers}
    return azure_raw.signed("PUT", base, path + "?comp=lease&restype=container", headers=headers)


def _until_waiting(server, count: int) -> None:
    """The handshake: the server's gauge of waiting acquires shows ``count``."""
    auth = {"Authorization": f"Bearer {server.token}"}
    deadline = time.monotonic() + 30
    while value(scrape(server.url, auth), "leasehold_waiting_acquires") < count:
        assert time.monotonic() < deadline, f"the server never held {count} waiters"
        time.sleep(0.05)


def _released_while_waiting(holder_base: str, waiting, paths: list[str]) -> list[tuple[int, bool, float]]:
    """Each container held (60 s); a waiter asks with wait WAIT_S; once the
    server holds them all the holder releases: each waiter's status, whether
    its answer came after the release was sent, and its time from asking."""
    waiter_base = waiting.url
    ids = {}
    for path in paths:
        held = _acquire(holder_base, path, 60)
        assert held.status_code == 201
        ids[path] = held.headers["x-ms-lease-id"]
    answers: dict[str, tuple[int, float, float]] = {}

    def waiter(path):
        sent = time.monotonic()
        response = _acquire(waiter_base, path, 15, **{WAIT: str(WAIT_S)})
        answers[path] = (response.status_code, time.monotonic(), sent)

    threads = [threading.Thread(target=waiter, args=(path,)) for path in paths]
    for thread in threads:
        thread.start()
    _until_waiting(waiting, len(paths))
    released = {}
    for path in paths:
        released[path] = time.monotonic()
        response = azure_raw.signed("PUT", holder_base, path + "?comp=lease&restype=container",
                                    headers={"x-ms-lease-action": "release", "x-ms-lease-id": ids[path]})
        assert response.status_code == 200
    for thread in threads:
        thread.join(timeout=WAIT_S + 30)
    return [(answers[path][0], answers[path][1] > released[path], answers[path][1] - answers[path][2])
            for path in paths]


def _events(database: str, path: str, *, times: bool = False) -> list[tuple]:
    container = path.rsplit("/", 1)[1]
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        return db.execute(f"SELECT action, status_code, error_code{', occurred_at' if times else ''} "
                          "FROM leases_leaseevent WHERE container = ? ORDER BY id", (container,)).fetchall()


def test_a_waiter_is_granted_at_the_release_across_two_workers(sqlite_server):
    """Three waiters at once (each on its own connection, so the kernel
    spreads them and the releases over both workers)."""
    base = sqlite_server.url
    paths = [_container(base) for _ in range(3)]
    answers = _released_while_waiting(base, sqlite_server, paths)
    for status, after_release, took in answers:
        assert status == 201 and after_release and took < WAIT_S / 2, answers
    # One event per request: the grant; the waiter's earlier attempts left none.
    assert _events(sqlite_server.database, paths[0]) == [("acquire", 201, ""), ("release", 200, ""),
                                                        ("acquire", 201, "")]


def test_a_waiter_is_granted_at_the_end_of_a_break_without_a_signal(sqlite_server):
    """A break with a period wakes the waiter (a signal), which learns the
    break's end and is granted then by its own timer."""
    base = sqlite_server.url
    path = _container(base)
    assert _acquire(base, path, -1).status_code == 201
    answer: dict[str, Any] = {"sent": time.monotonic()}
    thread = threading.Thread(target=lambda: answer.update(r=_acquire(base, path, 15, **{WAIT: str(WAIT_S)}),
                                                            at=time.monotonic()))
    thread.start()
    _until_waiting(sqlite_server, 1)
    broken = azure_raw.signed("PUT", base, path + "?comp=lease&restype=container",
                              headers={"x-ms-lease-action": "break", "x-ms-lease-break-period": "1"})
    assert broken.status_code == 202
    thread.join(timeout=WAIT_S + 30)
    assert answer["r"].status_code == 201, answer
    assert answer["at"] - answer["sent"] < WAIT_S / 2  # granted at the break's end, not at its wait's
    # as the server recorded them: granted once the break's period had passed, not before
    events = _events(sqlite_server.database, path, times=True)
    assert [event[:3] for event in events] == [("acquire", 201, ""), ("break", 202, ""), ("acquire", 201, "")]
    at = [datetime.fromisoformat(str(event[3])) for event in events]
    assert at[2] - at[1] >= timedelta(seconds=1), at


def test_a_wait_that_runs_out_is_the_usual_409_with_retry_after(sqlite_server):
    base = sqlite_server.url
    path = _container(base)
    assert _acquire(base, path, 60).status_code == 201
    api = f"{base}/api/v1/leases/acquire{path}"
    auth = {"Authorization": f"Bearer {sqlite_server.token}"}
    started = time.monotonic()
    response = requests.post(api, json={"duration": 15, "wait": 1.5}, headers=auth, timeout=30)
    took = time.monotonic() - started
    body = response.json()
    assert response.status_code == 409 and body["code"] == "LeaseAlreadyPresent", body
    assert took >= 1.4 and 55 <= body["retry_after"] <= 60 and response.headers["Retry-After"]
    # The Azure door's header likewise.
    started = time.monotonic()
    refused = _acquire(base, path, 15, **{WAIT: "1"})
    assert refused.status_code == 409 and azure_raw.error_code(refused) == "LeaseAlreadyPresent"
    assert time.monotonic() - started >= 0.9  # it waited out its wait
    # Each request recorded once, with its final answer.
    assert _events(sqlite_server.database, path) == [("acquire", 201, ""), ("acquire", 409, "LeaseAlreadyPresent"),
                                                    ("acquire", 409, "LeaseAlreadyPresent")]
    # A wait that is not 0-60 seconds as a number is 400 naming it, and changes nothing.
    for bad in ("5", True, 61, -1, [1]):
        response = requests.post(api, json={"duration": 15, "wait": bad}, headers=auth, timeout=30)
        assert response.status_code == 400 and response.json()["field"] == "wait", (bad, response.text)
    for bad in ("61", "soon", "-1", "1e1"):
        response = _acquire(base, path, 15, **{WAIT: bad})
        assert response.status_code == 400 and azure_raw.error_code(response) == "InvalidHeaderValue", bad
        assert "<HeaderName>x-leasehold-wait</HeaderName>" in response.text


def test_the_leader_helpers_standby_takes_over_at_the_release(sqlite_server):
    from azure.storage.blob import BlobServiceClient
    from leasehold_client import LeaderElection

    service = BlobServiceClient.from_connection_string(
        CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=sqlite_server.url))
    blob = service.get_blob_client(_container(sqlite_server.url).rsplit("/", 1)[1], "leader")
    leader = LeaderElection(blob, duration=15).campaign()
    assert leader is not None
    standby = LeaderElection(blob, duration=15)
    elected: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: elected.update(term=standby.campaign(), at=time.monotonic()))
    thread.start()
    _until_waiting(sqlite_server, 1)  # the standby is waiting on the server
    released = time.monotonic()
    leader.release()
    thread.join(timeout=30)
    try:
        # at the release, not when its server-side wait (SERVER_WAIT, 20 s) ran out
        assert elected["term"] is not None and elected["at"] - released < 10, elected["at"] - released
    finally:
        elected["term"].release()


def test_a_thousand_waiters_take_no_thread_each(tmp_path):
    """One worker; 1,000 acquires waiting at once on one held container
    (the server's gauge of waiting acquires says when): the worker's threads
    do not grow, the 1,001st is refused (the bound per principal), each
    request is answered once (at the end of its wait: 409) and recorded
    once, and the gauge is back to 0."""
    database = tmp_path / "leasehold.sqlite3"
    prepare(str(database), tmp_path)
    server = Instance(str(database), tmp_path, "server", workers=1)
    server.env.update(LEASEHOLD_ACCESS_LOG="on", LEASEHOLD_LOG_LEVEL="info")
    server.token = admin_token(database, server.env)
    server.start()
    try:
        base = server.url
        path = _container(base)
        assert _acquire(base, path, -1).status_code == 201
        assert server.proc is not None  # started
        scrape(base, {"Authorization": f"Bearer {server.token}"})  # the scrape's own thread, before the count
        threads_before = _threads(server.proc.pid)
        # their wait is the scenario's pace, long enough for a busy machine to open 1,000 connections in it
        answers, threads_waiting = asyncio.run(_many_waiters(server, path, count=1000, wait=THOUSAND_WAIT))
        assert [status for status, _ in answers] == [409] * 1000
        deadline = time.monotonic() + 10  # a waiter leaves its place just after its answer is sent
        while value(scrape(base, {"Authorization": f"Bearer {server.token}"}), "leasehold_waiting_acquires"):
            assert time.monotonic() < deadline, "waiters answered but still counted"
            time.sleep(0.05)
        assert min(took for _, took in answers) >= THOUSAND_WAIT * 0.95  # each was held for its whole wait
        # none per waiter: what may start meanwhile is the event loop's default executor
        # (at most cores + 4 threads) and a lane's thread, against 1,000 waiters
        assert threads_waiting - threads_before <= (os.cpu_count() or 1) + 5, (threads_before, threads_waiting)
        acquires = [line for line in server.output().splitlines() if "PUT /" in line and "comp=lease" in line]
        assert len(acquires) == 1 + 1 + 1000  # the holder's, the refused one, one answer per waiter
        events = _events(database, path)
        assert len(events) == 1 + 1000 and events.count(("acquire", 409, "LeaseAlreadyPresent")) == 1000
    finally:
        server.stop()


def _threads(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


async def _many_waiters(server, path: str, *, count: int, wait: float) -> tuple[list[tuple[int, float]], int]:
    """``count`` raw acquires with ``x-leasehold-wait``, one connection each;
    their statuses and times, and the server's threads while they all wait."""
    signed = azure_raw.signed_headers("PUT", path + "?comp=lease&restype=container",
                                      {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15"})
    head = "".join(f"{k}: {v}\r\n" for k, v in {**signed, WAIT: str(wait)}.items())
    request = (f"PUT {path}?comp=lease&restype=container HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}"
               "Content-Length: 0\r\n\r\n").encode()

    async def one():
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        sent = time.monotonic()
        writer.write(request)
        await writer.drain()
        status = int((await reader.readline()).split()[1])
        writer.close()
        return status, time.monotonic() - sent

    tasks = [asyncio.ensure_future(one()) for _ in range(count)]
    # until the server holds them all (its gauge of waiting acquires), within their wait
    auth = {"Authorization": f"Bearer {server.token}"}
    while value(await asyncio.to_thread(scrape, server.url, auth), "leasehold_waiting_acquires") < count:
        assert not any(task.done() for task in tasks), "a waiter was answered before all were waiting"
        await asyncio.sleep(0.05)
    threads = _threads(server.proc.pid)
    # One more is past the bound (LEASEHOLD_WAITERS_PER_PRINCIPAL, 1000): 503 ServerBusy at once,
    # while the 1,000 still wait (none of them answered yet).
    over = await asyncio.get_running_loop().run_in_executor(None, lambda: _acquire(server.url, path, 15, **{WAIT: "4"}))
    assert over.status_code == 503 and azure_raw.error_code(over) == "ServerBusy", over.text
    assert over.headers["Retry-After"] == "1" and not any(task.done() for task in tasks)
    return await asyncio.gather(*tasks), threads


def _listening(database: str) -> int:
    import psycopg

    with psycopg.connect(database, autocommit=True) as conn:
        [(count,)] = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                  "AND query = 'LISTEN leasehold_wake'").fetchall()
        return count


@pytest.mark.postgres
@pytest.mark.also_postgres
def test_a_waiter_on_one_instance_is_granted_at_a_release_on_another(postgres, tmp_path):
    database = postgres()
    env = prepare(database, tmp_path)
    instances = [Instance(database, tmp_path, "a", workers=1), Instance(database, tmp_path, "b", workers=1)]
    instances[1].token = admin_token(database, env)
    try:
        for instance in instances:
            instance.start()
        path = _container(instances[0].url)
        _container(instances[1].url)
        assert _listening(database) == 0  # serving, no waiter: no worker listens (serving/waiting.py)
        answers = _released_while_waiting(instances[0].url, instances[1], [path])
        for status, after_release, took in answers:
            assert status == 201 and after_release and took < WAIT_S / 2, answers
    finally:
        for instance in instances:
            instance.stop()


def test_a_waiter_on_a_blob_then_deleted_is_answered_404_at_the_delete(sqlite_server):
    """The delete ends the lease and wakes the waiter, which tries again and
    learns the blob is gone (it held its connection to the end of its wait)."""
    base = sqlite_server.url
    container = _container(base)
    path = container + "/doomed"
    assert azure_raw.signed("PUT", base, path, headers={"x-ms-blob-type": "BlockBlob"}, body=b"x").status_code == 201
    held = azure_raw.signed("PUT", base, path + "?comp=lease", headers={"x-ms-lease-action": "acquire",
                                                                       "x-ms-lease-duration": "60"})
    assert held.status_code == 201
    answer: dict[str, Any] = {}

    def waiter():
        started = time.monotonic()
        response = azure_raw.signed("PUT", base, path + "?comp=lease", headers={
            "x-ms-lease-action": "acquire", "x-ms-lease-duration": "15", WAIT: str(WAIT_S)})
        answer.update(status=response.status_code, code=azure_raw.error_code(response), started=started,
                      at=time.monotonic())

    thread = threading.Thread(target=waiter)
    thread.start()
    _until_waiting(sqlite_server, 1)
    deleted = time.monotonic()
    gone = azure_raw.signed("DELETE", base, path, headers={"x-ms-lease-id": held.headers["x-ms-lease-id"]})
    assert gone.status_code == 202
    thread.join(timeout=WAIT_S + 30)
    assert answer["status"] == 404 and answer["code"] == "BlobNotFound", answer
    assert answer["at"] > deleted and answer["at"] - answer["started"] < WAIT_S / 2, answer  # not at its wait's end


def test_a_wait_key_written_with_escapes_waits(sqlite_server):
    """``"\\u0077ait"`` is the key "wait" in JSON: the door read it as such,
    but the server looked for the bytes "wait" and did not hold the request
    (it was answered 409 at once, as an acquire that may not wait)."""
    base = sqlite_server.url
    path = _container(base)
    assert _acquire(base, path, 60).status_code == 201
    started = time.monotonic()
    response = requests.post(f"{base}/api/v1/leases/acquire{path}", data=b'{"duration": 15, "\\u0077ait": 1.5}',
                             headers={"Authorization": f"Bearer {sqlite_server.token}",
                                      "Content-Type": "application/json"}, timeout=30)
    took = time.monotonic() - started
    assert response.status_code == 409 and response.json()["code"] == "LeaseAlreadyPresent", response.text
    assert took >= 1.4, took  # it waited out its wait
