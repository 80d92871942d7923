#!/usr/bin/env python3
"""Leases checked for linearizability under faults, for minutes: the long
form of the fault tests' recorded histories (tests/lincheck.py).

The production server (2 worker processes, SQLite) and 24 clients on 12
blobs: acquire with their own id (15 s), renew, change, release, break
(period 0-3 s); now and then a holder pauses past its lease (17 s) before
renewing. Faults every few seconds, in turn: the whole server SIGKILLed and
started again on its file, or one worker SIGKILLed (the supervisor replaces
it). Requests cut by a fault (made before the connection broke, or never),
and 503s, are outcomes unknown; refused connections never reached a server
and are not recorded. At the end the
whole history is checked and the figures printed: operations checked,
faults injected, time to check.

    .venv/bin/python bench/linearizability.py [seconds]     # default 240
    .venv/bin/python bench/linearizability.py --check FILE  # a history it saved, checked again
"""
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("LEASEHOLD_DATABASE", str(Path(tempfile.mkdtemp(prefix="lin-")) / "unused.sqlite3"))
import django  # noqa: E402

django.setup()
from tests import azure_raw  # noqa: E402
from tests.lincheck import Op, Recorder, check  # noqa: E402
from tests.processes.test_processes import Server  # noqa: E402

if sys.argv[1:2] == ["--check"]:  # a saved history checked again, without the load
    ops = [Op(**fields) for fields in json.loads(Path(sys.argv[2]).read_text())]
    verdict = check(ops)
    print(f"{len(ops)} operations checked in {verdict.seconds:.2f} s ({verdict.states} model states): "
          f"{'linearizable' if verdict else 'NOT linearizable'}")
    if not verdict:
        print(verdict.explain())
    sys.exit(0 if verdict else 1)
SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 240
BLOBS, CLIENTS, FAULT_EVERY = 12, 24, 6.0

server = Server(Path(tempfile.mkdtemp(prefix="lin-")), workers=2).migrate().start()
base = server.url
assert azure_raw.signed("PUT", base, "/devstoreaccount1/lin?restype=container").status_code == 201
paths = [f"/devstoreaccount1/lin/b{n}" for n in range(BLOBS)]
for path in paths:
    assert azure_raw.signed("PUT", base, path, body=b"x", headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201

history = Recorder()
stop = threading.Event()
statuses: dict = {}
faults = {"server killed": 0, "worker killed": 0, "holder paused": 0}
errors: list = []


def lease(me: str, path: str, action: str, **sent):
    sent_at, gone = history.clock(), False
    try:
        response = azure_raw.lease(base, path, action, **sent)
    except requests.ConnectionError as exc:
        if "Connection refused" in str(exc):
            time.sleep(0.05)
            return None
        response, gone = None, True  # cut by a kill: made before now, or never
    except requests.Timeout:
        response = None
    key = response.status_code if response is not None else "no answer"
    statuses[key] = statuses.get(key, 0) + 1
    history.http(me, path, action, sent_at, response, server_gone=gone, lease_id=sent.get("lease_id"),
                 proposed_id=sent.get("proposed_lease_id"), duration=sent.get("duration"),
                 break_period=sent.get("break_period"))
    return response


def client(n: int) -> None:
    rng = random.Random(n)
    me = str(uuid.UUID(int=n + 1))
    try:
        while not stop.is_set():
            path = paths[rng.randrange(BLOBS)]
            if rng.random() < 0.1:
                lease(f"breaker-{n}", path, "break", break_period=rng.choice([0, 1, 3]))
                continue
            r = lease(me, path, "acquire", duration=15, proposed_lease_id=me)
            if r is None or r.status_code != 201:
                time.sleep(0.01)
                continue
            if rng.random() < 0.01:
                faults["holder paused"] += 1
                stop.wait(17)  # past its lease: someone else may take it
            for _ in range(rng.randrange(3)):
                lease(me, path, "renew", lease_id=me)
            if rng.random() < 0.2:  # to a new id and back
                other = str(uuid.uuid4())
                lease(me, path, "change", lease_id=me, proposed_lease_id=other)
                lease(me, path, "change", lease_id=other, proposed_lease_id=me)
            lease(me, path, "release", lease_id=me)
    except Exception as exc:  # noqa: BLE001
        errors.append(repr(exc))


threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(CLIENTS)]
started = time.monotonic()
for thread in threads:
    thread.start()
rng = random.Random(0)
while time.monotonic() < started + SECONDS:
    time.sleep(FAULT_EVERY * rng.uniform(0.5, 1.5))
    if rng.random() < 0.5:
        server.kill()
        server.start()
        faults["server killed"] += 1
    else:
        found = subprocess.run(["pgrep", "-P", str(server.proc.pid)], capture_output=True, text=True).stdout.split()
        if found:
            os.kill(int(rng.choice(found)), signal.SIGKILL)
            faults["worker killed"] += 1
stop.set()
for thread in threads:
    thread.join(timeout=60)
server.kill()
ran = time.monotonic() - started

ops = history.ops
saved = Path(tempfile.mkdtemp(prefix="lin-")) / "history.json"
saved.write_text(json.dumps([dataclasses.asdict(op) for op in ops]))
unknown = sum(1 for op in ops if not op.known)
print(f"{len(ops)} operations in {ran:.0f} s on {BLOBS} blobs by {CLIENTS} clients "
      f"({unknown} outcomes unknown); answers {dict(sorted(statuses.items(), key=str))}", flush=True)
print(f"faults injected: {faults}; the history: {saved} (check it again: --check {saved})", flush=True)
verdict = history.check()
print(f"checked in {verdict.seconds:.2f} s ({verdict.states} model states): "
      f"{'linearizable' if verdict else 'NOT linearizable'}")
if not verdict:
    print(verdict.explain())
if errors:
    print("client errors:", errors[:5])
sys.exit(0 if verdict and not errors else 1)
