"""The lease lane is shared by principals in turn, through the production server: one account's
burst of renewals is queued behind a held writer lock, another account's renewal arrives after
all of it, and the order in which the server committed them (the history's ids) shows the second
account served within the burst's first batches, not behind all of it. What the server hands the
fair lane (each request's principal) is what this checks: with every request queued under one
principal, the other account's renewal comes last."""

from __future__ import annotations

import asyncio
import base64
import fcntl
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY

from tests import azure_raw
from tests.server_process import ROOT, Instance, prepare

pytestmark = pytest.mark.processes

OTHER = "tenantfair"
OTHER_KEY = base64.b64encode(b"tenant-fair-key-" + b"k" * 48).decode()
BURST = 300
SETUP = f"""
import django
django.setup()
from leases.services import account_ensure
account_ensure(name={OTHER!r}, key1={OTHER_KEY!r})
"""


@pytest.fixture
def server(tmp_path):
    database = tmp_path / "leasehold.sqlite3"
    env = prepare(str(database), tmp_path)
    subprocess.run([sys.executable, "-c", SETUP], cwd=ROOT, env=env, check=True, capture_output=True)
    instance = Instance(str(database), tmp_path, "server", workers=1)  # one worker: one lane to share
    instance.env["LEASEHOLD_WRITE_WAIT"] = "300"  # the writer is held while the burst arrives
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()


def _acquire(server, account: str, key: str, container: str) -> str:
    path = f"/{account}/{container}"
    assert azure_raw.signed("PUT", server.url, path + "?restype=container", account=account,
                            key=key).status_code == 201
    got = azure_raw.signed("PUT", server.url, path + "?comp=lease&restype=container", account=account, key=key,
                           headers={"x-ms-lease-action": "acquire", "x-ms-lease-duration": "-1"})
    assert got.status_code == 201
    return got.headers["x-ms-lease-id"]


def _renewal(port: int, account: str, key: str, container: str, lease_id: str) -> bytes:
    url = f"/{account}/{container}?comp=lease&restype=container"
    headers = azure_raw.signed_headers("PUT", url, {"x-ms-lease-action": "renew", "x-ms-lease-id": lease_id},
                                       account=account, key=key)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"PUT {url} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n{head}\r\n".encode()


def _read_by_server(port: int, connections: int) -> bool:
    """Whether the server holds ``connections`` connections on ``port`` and has read everything
    sent on each (its receive queues empty): the requests are in the server, not in the kernel."""
    listed = subprocess.run(["ss", "-tnH", "state", "established", f"( sport = :{port} )"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    return len(listed) >= connections and all(line.split()[0] == "0" for line in listed)


def _until(condition, what: str, ceiling: float = 120) -> None:
    deadline = time.monotonic() + ceiling
    while not condition():
        assert time.monotonic() < deadline, f"not in {ceiling} s: {what}"
        time.sleep(0.05)


async def _send(port: int, request: bytes):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    return reader, writer


async def _answer(reader, writer) -> int:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1])
    finally:
        writer.close()


def test_another_accounts_renewal_is_served_within_a_burst_not_behind_it(server):
    mine = _acquire(server, DEV_ACCOUNT, DEV_KEY, "burst")
    theirs = _acquire(server, OTHER, OTHER_KEY, "alone")
    lock = os.open(server.database + ".writer-lock", os.O_RDWR | os.O_CREAT)

    async def run() -> list[int]:
        fcntl.flock(lock, fcntl.LOCK_EX)  # every write waits: the burst queues in the server
        try:
            burst = [await _send(server.port, _renewal(server.port, DEV_ACCOUNT, DEV_KEY, "burst", mine))
                     for _ in range(BURST)]
            await asyncio.to_thread(_until, lambda: _read_by_server(server.port, BURST), "the burst received")
            other = await _send(server.port, _renewal(server.port, OTHER, OTHER_KEY, "alone", theirs))
            await asyncio.to_thread(_until, lambda: _read_by_server(server.port, BURST + 1), "the renewal received")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
        return await asyncio.gather(*(_answer(*c) for c in [*burst, other]))

    try:
        statuses = asyncio.run(run())
    finally:
        os.close(lock)
    assert set(statuses) == {200}, sorted(set(statuses))
    with sqlite3.connect(server.database) as db:
        order = [account for (account,) in db.execute(
            "SELECT account FROM leases_leaseevent WHERE action = 'renew' ORDER BY id")]
    assert order.count(DEV_ACCOUNT) == BURST and order.count(OTHER) == 1
    after = len(order) - 1 - order.index(OTHER)  # the burst's renewals committed after the other account's
    # Fair: within the burst's first two batches (64 each: serving/lease_batch.py), so most of the burst
    # comes after it; first come first served, it would come after all of it.
    assert after >= BURST - 2 * 64, order.index(OTHER)
