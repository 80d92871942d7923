"""The flood scenario of bench/run.py: one bystander renews its
lease back to back (a 15-s lease on the Azure door, every ``--flood-every``
seconds) while a flood of requests without valid credentials arrives over
many connections at once: by default 6,000 JSON lease acquires with made-up
bearer tokens over 1,000 connections (``--flood-kind``: ``token``, or
``signature`` for Azure lease requests with a bad SharedKey signature, or
``anonymous`` for Azure lease requests with no Authorization, or ``mixed``).

Reported: the bystander's renewals during the flood (median, p99, max, how
many, how many refused), the same before the flood (quiet), the flood's
answers by status and how long it took, and the run's conditions (load
average, CPU count): the machine may be shared.

The flood is sent by a process of its own (``python bench/flood.py client
...``: asyncio, one task per connection), so that its Python does not share
a GIL with the bystander's timing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

from hostile import ACCOUNT, CONTAINER, KEY, pct, setup_blobs
from loadgen import Connection, LeaseRequests, Signer
from servers import cpu_seconds, tree_pids

KINDS = ("token", "signature", "anonymous", "mixed")


def flood_requests(kind: str, host: str) -> list[bytes]:
    """The flood's requests of ``kind`` (``mixed``: one of each)."""
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
    azure = (f"PUT /{ACCOUNT}/{CONTAINER}/flooded?comp=lease HTTP/1.1\r\nHost: {host}\r\n"
             "x-ms-version: 2021-12-02\r\nx-ms-lease-action: acquire\r\nx-ms-lease-duration: 15\r\n"
             f"x-ms-date: {date}\r\nContent-Length: 0\r\n")
    body = b'{"duration": 15}'
    api = (f"POST /api/v1/leases/acquire/{ACCOUNT}/{CONTAINER}/flooded HTTP/1.1\r\nHost: {host}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n")
    made = {
        "token": (api + f"Authorization: Bearer lh_{uuid.uuid4().hex}{uuid.uuid4().hex}\r\n\r\n").encode() + body,
        "signature": (azure + f"Authorization: SharedKey {ACCOUNT}:{base64.b64encode(os.urandom(32)).decode()}"
                      "\r\n\r\n").encode(),
        "anonymous": (azure + "\r\n").encode(),
    }
    return list(made.values()) if kind == "mixed" else [made[kind]]


async def _client(port: int, host: str, kind: str, total: int, connections: int) -> dict:
    per = [total // connections + (1 if i < total % connections else 0) for i in range(connections)]
    statuses: dict[str, int] = {}
    opened = []
    for _ in range(connections):  # every connection open before the first request
        try:
            opened.append(await asyncio.open_connection("127.0.0.1", port))
        except OSError:
            statuses["connect failed"] = statuses.get("connect failed", 0) + 1
    go = asyncio.Event()

    async def one(n: int, reader, writer) -> None:
        requests = flood_requests(kind, host)  # each connection its own made-up credentials
        await go.wait()
        try:
            for i in range(per[n]):
                writer.write(requests[(n + i) % len(requests)])
                head = await reader.readuntil(b"\r\n\r\n")
                status = head.split(b" ", 2)[1].decode()
                statuses[status] = statuses.get(status, 0) + 1
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
        except (OSError, asyncio.IncompleteReadError):
            statuses["cut"] = statuses.get("cut", 0) + 1
        finally:
            writer.close()

    tasks = [asyncio.ensure_future(one(n, r, w)) for n, (r, w) in enumerate(opened)]
    started = time.monotonic()
    go.set()
    await asyncio.gather(*tasks)
    return {"statuses": statuses, "seconds": time.monotonic() - started, "connections": len(opened)}


class Bystander:
    """One lease renewed every ``every`` seconds; each renewal's latency and
    status, with the time it was sent."""

    def __init__(self, port: int, host: str, every: float):
        self.port, self.host, self.every = port, host, every
        self.samples: list[tuple[float, float, int]] = []  # (sent at, seconds, status)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        reqs = LeaseRequests(Signer(ACCOUNT, KEY), self.host, f"/{ACCOUNT}/{CONTAINER}/bystander")
        conn = Connection("127.0.0.1", self.port)
        lease_id = str(uuid.uuid4())
        status, _, _ = conn.request(reqs.acquire(lease_id, 15))
        if status != 201:
            self.samples.append((time.monotonic(), 0.0, status))
            return
        try:
            while not self.stop.is_set():
                sent = time.monotonic()
                try:
                    status, _, _ = conn.request(reqs.renew(lease_id))
                except OSError:
                    status = 0
                    conn.close()
                    conn = Connection("127.0.0.1", self.port)
                self.samples.append((sent, time.monotonic() - sent, status))
                self.stop.wait(max(0.0, self.every - (time.monotonic() - sent)))
            conn.request(reqs.release(lease_id))
        finally:
            conn.close()

    def between(self, start: float, end: float) -> list[tuple[float, int]]:
        return [(seconds, status) for sent, seconds, status in self.samples if start <= sent <= end]


def flood(server, *, total: int, connections: int, kind: str, every: float, quiet: float = 3.0) -> dict:
    """The scenario on ``server`` (bench/servers.py): see the module docstring."""
    setup_blobs(server, ["bystander", "flooded"])
    bystander = Bystander(server.port, server.host, every)
    load_before = os.getloadavg()[0]
    bystander.start()
    time.sleep(quiet)  # quiet renewals first, for comparison
    pids = tree_pids(server.pid)
    cpu_before = cpu_seconds(pids)
    flood_start = time.monotonic()
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "client", str(server.port), server.host,
                           kind, str(total), str(connections)], capture_output=True, text=True, timeout=600)
    flood_end = time.monotonic()
    server_cpu = cpu_seconds(pids) - cpu_before  # the bystander's renewals' share is small
    bystander.stop.set()
    bystander.thread.join(30)
    if done.returncode != 0:
        raise RuntimeError(f"flood client failed: {done.stderr[-2000:]}")
    answer = json.loads(done.stdout)
    quiet_lat = [s for s, _ in bystander.between(0, flood_start)]
    during = bystander.between(flood_start, flood_end)
    lat = [s for s, _ in during]
    return {
        "flood requests": total, "flood connections": answer["connections"], "flood seconds": answer["seconds"],
        **{f"flood answered {status}": count for status, count in sorted(answer["statuses"].items())},
        "quiet renew p50 ms": pct(quiet_lat, 0.5) * 1e3, "quiet renew max ms": max(quiet_lat, default=0) * 1e3,
        "renewals": len(during), "renewals refused": sum(1 for _, status in during if status != 200),
        "renew p50 ms": pct(lat, 0.5) * 1e3, "renew p99 ms": pct(lat, 0.99) * 1e3,
        "renew max ms": max(lat, default=float("nan")) * 1e3,
        # when the slowest renewal was sent, in seconds after the flood began (its first burst: about 0)
        "renew max sent at s": max(((seconds, sent - flood_start) for sent, seconds, _ in bystander.samples
                                    if flood_start <= sent <= flood_end), default=(0, float("nan")))[1],
        "renewals over 250 ms": sum(1 for seconds in lat if seconds > 0.25),
        "server CPU us per flood request": server_cpu / total * 1e6,
        "server CPU % of a core": 100 * server_cpu / (flood_end - flood_start),
        "load average before": load_before, "load average after": os.getloadavg()[0], "cpus": os.cpu_count(),
    }


if __name__ == "__main__" and sys.argv[1:2] == ["client"]:
    port, host, kind, total, connections = sys.argv[2:7]
    try:
        import uvloop  # the flood's own CPU as small as it can be
        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(_client(int(port), host, kind, int(total), int(connections)))))
