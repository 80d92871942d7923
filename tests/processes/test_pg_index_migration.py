"""Migration 0014 on PostgreSQL while the history is written: its indexes are built and dropped
CONCURRENTLY, so no statement of it holds a lock that would hold up a history insert (every lease
write makes one), however long the history; run again from the top, as a migrate that gave way to
a long reader runs it, it ends the same; and backwards it puts the old indexes back."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from tests.server_process import ROOT

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.also_postgres]
psycopg = pytest.importorskip("psycopg")

EVENTS = 200_000  # enough history that a plain CREATE INDEX holds its lock for a visible while
# Lock modes that conflict with an INSERT's ROW EXCLUSIVE.
BLOCKING = ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")
TABLES = ("leases_leaseevent", "leases_blob", "leases_container")
INSERT = ("INSERT INTO leases_leaseevent (occurred_at, action, outcome, resource_type, account, container, blob, "
          "state_before, state_after, status_code, error_code, actor, via, reason, request_id, client_request_id, "
          "remote_addr, user_agent) SELECT now(), 'renew', 'success', 'blob', 'devstoreaccount1', 'c', 'b' || (g %% 500), "
          "'leased', 'leased', 200, '', 'account:devstoreaccount1', 'azure', '', md5(g::text), '', '', '' "
          "FROM generate_series(1, %s) AS g")


def migrate_to(env: dict, target: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", "migrate", "leases", target, "--noinput"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def indexes_of(conn) -> dict[str, tuple[bool, str]]:
    """The history's and the resources' indexes: name -> (valid, definition)."""
    rows = conn.execute(
        "SELECT c.relname, i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
        "WHERE t.relname = ANY(%s)", [list(TABLES)]).fetchall()
    return {name: (valid, definition) for name, valid, definition in rows}


def migrate_beside_inserts(database: str, env: dict, target: str) -> None:
    """Migrate to ``target`` while, every few ms, a watcher looks for any lock on the tables held by
    another session that would hold up an insert, and a history insert that may wait 0.2 s at most
    is made: none may be seen, and each insert must be made."""
    seen: list[tuple] = []
    inserts: list[float] = []
    failed: list[BaseException] = []
    stop = threading.Event()

    def watch() -> None:
        try:
            with psycopg.connect(database, autocommit=True) as watcher, \
                    psycopg.connect(database, autocommit=True) as writer:
                writer.execute("SET lock_timeout = '200ms'")
                while not stop.is_set():
                    seen.extend(watcher.execute(
                        "SELECT c.relname, l.mode, a.query FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                        "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.granted AND c.relname = ANY(%s) "
                        "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                        "AND l.mode = ANY(%s) AND l.pid <> pg_backend_pid()",
                        [list(TABLES), list(BLOCKING)]).fetchall())
                    started = time.monotonic()
                    writer.execute(INSERT, [1])
                    inserts.append(time.monotonic() - started)
                    time.sleep(0.002)
        except BaseException as exc:  # noqa: BLE001  (an insert refused after 0.2 s: the test's failure)
            failed.append(exc)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        done = migrate_to(env, target)
    finally:
        stop.set()
        watcher.join(30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert failed == [], failed  # every insert made within 0.2 s
    assert seen == [], seen  # no lock that holds up an insert, not even for a moment
    assert len(inserts) > 20, inserts  # the watch ran through the migration


def history_at(database: str, tmp_path, target: str, *, other_doors: int = 0) -> dict:
    """A database migrated to ``target`` with EVENTS events of the Azure door and ``other_doors`` of
    the JSON API's, analysed; the environment to migrate it further."""
    env = {**os.environ, "LEASEHOLD_DATABASE": database, "LEASEHOLD_VAR_DIR": str(tmp_path),
           "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = migrate_to(env, target)
    assert done.returncode == 0, done.stdout + done.stderr
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(INSERT, [EVENTS])
        if other_doors:
            conn.execute(INSERT.replace("'azure'", "'api'"), [other_doors])
        conn.execute("ANALYZE leases_leaseevent")
    return env


def test_migration_0014_holds_up_no_history_insert_and_runs_again_from_the_top(postgres, tmp_path):
    database = postgres()
    env = history_at(database, tmp_path, "0013")

    migrate_beside_inserts(database, env, "0014")
    with psycopg.connect(database, autocommit=True) as conn:
        after = indexes_of(conn)
        assert not {"blob_expiry_idx", "container_expiry_idx", "event_blob_idx"} & set(after), sorted(after)
        valid, definition = after["event_resource_idx"]
        assert valid and "(blob, container, account, occurred_at)" in definition, definition

        # Run again from the top, as after giving way halfway: the new index
        # dropped and built again, the old ones still gone, nothing refused.
        conn.execute("DELETE FROM django_migrations WHERE app = 'leases' AND name = '0014_fewer_index_writes'")
    again = migrate_to(env, "0014")
    assert again.returncode == 0, again.stdout + again.stderr
    with psycopg.connect(database, autocommit=True) as conn:
        assert indexes_of(conn) == after

    back = migrate_to(env, "0013")  # and backwards, the indexes as they were
    assert back.returncode == 0, back.stdout + back.stderr
    with psycopg.connect(database, autocommit=True) as conn:
        before = indexes_of(conn)
    assert {"blob_expiry_idx", "container_expiry_idx", "event_blob_idx"} <= set(before), sorted(before)
    assert all(valid for valid, _ in before.values()), before
    assert "(account, container, blob, occurred_at)" in before["event_resource_idx"][1], before["event_resource_idx"]
