"""Migration 0016 seals the events that exist before it as block 0: a database at 0014 with history
written then (no hashes) is migrated, its events are block 0's and it verifies; an event of that
history changed afterwards is found by block 0."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from tests.server_process import ROOT

pytestmark = pytest.mark.processes

COLUMNS = ("occurred_at, action, outcome, resource_type, account, container, blob, state_before, state_after, "
           "status_code, error_code, actor, via, reason, request_id, client_request_id, remote_addr, user_agent")


def _manage(database, var_dir, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "LEASEHOLD_DATABASE": str(database), "LEASEHOLD_VAR_DIR": str(var_dir),
           "DJANGO_SETTINGS_MODULE": "config.settings"}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_migration_seals_the_history_before_it_as_block_zero(tmp_path):
    database = tmp_path / "old.sqlite3"
    assert _manage(database, tmp_path, "migrate", "leases", "0014").returncode == 0
    with sqlite3.connect(database) as db:
        db.executemany(f"INSERT INTO leases_leaseevent ({COLUMNS}) VALUES "
                       "(datetime('now', ?), ?, 'success', 'container', 'devstoreaccount1', 'old', '', '', '', 200, "
                       "'', 'account:devstoreaccount1', 'azure', '', '', '', '', '')",
                       [(f"-{i} seconds", "renew" if i % 3 else "acquire") for i in range(300)])
    done = _manage(database, tmp_path, "migrate")
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(database) as db:
        block = db.execute("SELECT position, first_id, last_id, renewals, others FROM leases_ledgerblock").fetchall()
        assert block == [(0, 1, 300, 200, 100)]
        assert db.execute("SELECT count(*) FROM leases_leaseevent WHERE row_hash IS NULL").fetchone()[0] == 300
    found = _manage(database, tmp_path, "leasehold_ledger", "verify")
    assert found.returncode == 0 and "1 blocks, 300 sealed events" in found.stdout, found.stderr
    with sqlite3.connect(database) as db:
        db.execute("DROP TRIGGER leases_leaseevent_no_update")
        db.execute("UPDATE leases_leaseevent SET actor = 'user:mallory' WHERE id = 7")
    found = _manage(database, tmp_path, "leasehold_ledger", "verify")
    assert found.returncode == 1 and "block 0 (events 1-300)" in found.stderr, found.stderr
