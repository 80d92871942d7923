"""Several instances on one PostgreSQL database write lease history at once, each sealing when it
holds the sealer's duty lock, a sequence handing out ids before their transactions commit: the
history they leave verifies, every event in a block, and a digest taken during the traffic holds."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest

from tests import azure_raw
from tests.server_process import ROOT, Instance, prepare

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.also_postgres]

CLIENTS = 6
ROUNDS = 40


def _manage(database: str, var, *args: str) -> subprocess.CompletedProcess:
    env = {**Instance(database, var, "cli").env}
    return subprocess.run([sys.executable, "manage.py", "leasehold_ledger", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def _one(database: str, query: str):
    with psycopg.connect(database, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return row[0]


def test_instances_writing_at_once_leave_a_history_that_verifies(postgres, tmp_path):
    database = postgres()
    prepare(database, tmp_path)
    instances = []
    for name, workers in (("a", 1), ("b", 2), ("c", 2)):
        (tmp_path / name).mkdir()
        instances.append(Instance(database, tmp_path / name, name, workers=workers))
    errors: list[str] = []
    digest_taken = threading.Event()

    def client(n: int) -> None:
        base = instances[n % len(instances)].url
        path = f"/devstoreaccount1/ledger{n}"
        try:
            assert azure_raw.signed("PUT", base, path + "?restype=container").status_code == 201
            for _ in range(ROUNDS):
                lease_id = str(uuid.uuid4())
                assert azure_raw.lease(base, path, "acquire", duration=15, proposed_lease_id=lease_id).status_code == 201
                assert azure_raw.lease(base, path, "renew", lease_id=lease_id).status_code == 200
                assert azure_raw.lease(base, path, "acquire", duration=15).status_code == 409  # refused: an event too
                assert azure_raw.lease(base, path, "release", lease_id=lease_id).status_code == 200
        except Exception as exc:  # noqa: BLE001  (reported below, in the test's thread)
            errors.append(f"client {n}: {exc!r}")

    try:
        for instance in instances:
            instance.start()
        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for thread in threads:
            thread.start()
        while not digest_taken.is_set() and any(t.is_alive() for t in threads):  # a digest amid the traffic
            if _one(database, "SELECT count(*) FROM leases_ledgerblock") >= 3:
                taken = _manage(database, tmp_path, "digest", "--no-seal")
                assert taken.returncode == 0, taken.stderr
                (tmp_path / "digest.json").write_text(taken.stdout)
                digest_taken.set()
            time.sleep(0.2)
        for thread in threads:
            thread.join()
        assert errors == []
        newest = _one(database, "SELECT max(id) FROM leases_leaseevent")
        deadline = time.monotonic() + 60
        while _one(database, "SELECT coalesce(max(last_id), 0) FROM leases_ledgerblock") < newest:
            assert time.monotonic() < deadline, "the instances did not seal the history"
            time.sleep(0.2)
    finally:
        for instance in instances:
            instance.stop()
    assert digest_taken.is_set()
    blocks = _one(database, "SELECT count(*) FROM leases_ledgerblock")
    assert blocks >= 4
    assert _one(database, "SELECT count(*) FROM leases_leaseevent") >= CLIENTS * ROUNDS * 4
    found = _manage(database, tmp_path, "verify", "--digest", str(tmp_path / "digest.json"))
    assert found.returncode == 0, found.stdout + found.stderr
    assert "0 not yet sealed" in found.stdout and "1 digests held" in found.stdout
    assert json.loads((tmp_path / "digest.json").read_text())["block"] >= 2
    for instance in instances:
        assert "Traceback" not in instance.output(), instance.output()[-3000:]
