"""Migration 0021 on PostgreSQL while the history is written, as 0014 (test_pg_index_migration.py): the
actor index rebuilt and the via index made CONCURRENTLY, so no statement of it holds a lock that would
hold up a history insert (every lease write makes one); run again from the top it ends the same; and
backwards it puts the old actor index back."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.processes.test_pg_index_migration import BLOCKING, EVENTS, INSERT, TABLES, _indexes, _migrate

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.also_postgres]
psycopg = pytest.importorskip("psycopg")


def test_migration_0021_holds_up_no_history_insert_and_runs_again_from_the_top(postgres, tmp_path):
    database = postgres()
    env = {**os.environ, "LEASEHOLD_DATABASE": database, "LEASEHOLD_VAR_DIR": str(tmp_path),
           "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = _migrate(env, "0020")
    assert done.returncode == 0, done.stdout + done.stderr
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(INSERT, [EVENTS])
        conn.execute(INSERT.replace("'azure'", "'api'"), [EVENTS // 100])
        conn.execute("ANALYZE leases_leaseevent")

    seen: list[tuple] = []
    inserts: list[float] = []
    failed: list[BaseException] = []
    stop = threading.Event()

    def watch() -> None:
        """Every few ms: any blocking lock on the tables held by another session, and one history
        insert that may wait 0.2 s at most."""
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
        done = _migrate(env, "0021")
    finally:
        stop.set()
        watcher.join(30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert failed == [], failed  # every insert made within 0.2 s
    assert seen == [], seen  # no lock that holds up an insert, not even for a moment
    assert len(inserts) > 20, inserts  # the watch ran through the migration
    with psycopg.connect(database, autocommit=True) as conn:
        after = _indexes(conn)
        assert after["event_actor_idx"][0] and "(actor, occurred_at, id, action)" in after["event_actor_idx"][1]
        assert after["event_via_idx"][0] and "WHERE (NOT" in after["event_via_idx"][1], after["event_via_idx"]
        conn.execute("DELETE FROM django_migrations WHERE app = 'leases' AND name = '0021_event_indexes'")
    again = _migrate(env, "0021")  # from the top, as after giving way halfway
    assert again.returncode == 0, again.stdout + again.stderr
    with psycopg.connect(database, autocommit=True) as conn:
        assert _indexes(conn) == after

    back = _migrate(env, "0020")
    assert back.returncode == 0, back.stdout + back.stderr
    with psycopg.connect(database, autocommit=True) as conn:
        before = _indexes(conn)
    assert "event_via_idx" not in before and all(valid for valid, _ in before.values()), before
    assert "(actor, occurred_at)" in before["event_actor_idx"][1], before["event_actor_idx"]
