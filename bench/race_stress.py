#!/usr/bin/env python3
"""Never two holders, for longer: the scenario of
tests/processes/test_processes.py::test_many_processes_never_grant_one_blob_twice
(the production server with 4 worker processes, 32 clients contending for
one blob: acquire with their own proposed id, renew, release), run for
``seconds`` (default 60) instead of 6, reporting the first anomalies with the
blob's last history events and the server's log.

    .venv/bin/python bench/race_stress.py 60

That test failed once under the full suite (a renew or release just after the
client's own 201 acquire answered 409 LeaseIdMismatchWithLeaseOperation) and
not in any rerun; this is the tool to chase it.
"""
import os
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.chdir(ROOT)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("LEASEHOLD_DATABASE", str(Path(tempfile.mkdtemp(prefix="race-")) / "unused.sqlite3"))
import django  # noqa: E402

django.setup()
from tests import azure_raw  # noqa: E402
from tests.processes.test_processes import Server  # noqa: E402
dur = float(sys.argv[1]) if len(sys.argv) > 1 else 60
tmp = Path(tempfile.mkdtemp(prefix="stress-"))
server = Server(tmp, workers=4).migrate().start()
base = server.url
assert azure_raw.signed("PUT", base, "/devstoreaccount1/race?restype=container").status_code == 201
assert azure_raw.signed("PUT", base, "/devstoreaccount1/race/one", body=b"x", headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
path = "/devstoreaccount1/race/one"
lock = threading.Lock()
holder: list = [None]
anomalies: list = []
count = [0]
stop = time.monotonic() + dur
def client(n):
    me = str(uuid.UUID(int=n + 1))
    while time.monotonic() < stop and not anomalies:
        t0 = time.time()
        r = azure_raw.lease(base, path, "acquire", duration=15, proposed_lease_id=me)
        with lock:
            count[0] += 1
            if r.status_code == 201:
                if holder[0] is not None:
                    anomalies.append(("double", holder[0], me, t0))
                holder[0] = me
        if r.status_code != 201:
            if not (r.status_code == 409 and azure_raw.error_code(r) == "LeaseAlreadyPresent"):
                anomalies.append(("acquire", r.status_code, r.content[:300], me, t0, r.headers.get("x-ms-request-id")))
            continue
        if r.headers.get("x-ms-lease-id") != me:  # another request's answer?
            anomalies.append(("wrong-id", r.headers.get("x-ms-lease-id"), me, t0, r.headers.get("x-ms-request-id")))
        t1 = time.time()
        rn = azure_raw.lease(base, path, "renew", lease_id=me)
        if rn.status_code != 200:
            anomalies.append(("renew", rn.status_code, rn.content[:300], me, t0, t1, r.headers.get("x-ms-lease-id"), r.headers.get("x-ms-request-id"), rn.headers.get("x-ms-request-id")))
        with lock:
            holder[0] = None
        t2 = time.time()
        rl = azure_raw.lease(base, path, "release", lease_id=me)
        if rl.status_code != 200:
            anomalies.append(("release", rl.status_code, rl.content[:300], me, t0, t2, r.headers.get("x-ms-request-id"), rl.headers.get("x-ms-request-id")))
threads = [threading.Thread(target=client, args=(i,)) for i in range(32)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("requests", count[0], "anomalies", anomalies[:5])
if anomalies:
    db = sqlite3.connect(server.db)
    rows = db.execute("SELECT id, occurred_at, action, outcome, lease_fingerprint, proposed_lease_fingerprint, state_before, state_after, error_code, request_id FROM leases_leaseevent WHERE blob='one' ORDER BY id DESC LIMIT 30").fetchall()
    for row in reversed(rows):
        print(row)
    print(server.output()[-3000:])
server.kill()
