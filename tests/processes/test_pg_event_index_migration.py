"""Migration 0021 on PostgreSQL while the history is written, as 0014 (test_pg_index_migration.py): the
actor index rebuilt and the via index made CONCURRENTLY, so no statement of it holds a lock that would
hold up a history insert (every lease write makes one); run again from the top it ends the same; and
backwards it puts the old actor index back."""

from __future__ import annotations

import pytest

from tests.processes.test_pg_index_migration import EVENTS, indexes_of, migrate_to, history_at, migrate_beside_inserts

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.also_postgres]
psycopg = pytest.importorskip("psycopg")


def test_migration_0021_holds_up_no_history_insert_and_runs_again_from_the_top(postgres, tmp_path):
    database = postgres()
    env = history_at(database, tmp_path, "0020", other_doors=EVENTS // 100)
    migrate_beside_inserts(database, env, "0021")
    with psycopg.connect(database, autocommit=True) as conn:
        after = indexes_of(conn)
        assert after["event_actor_idx"][0] and "(actor, occurred_at, id, action)" in after["event_actor_idx"][1]
        assert after["event_via_idx"][0] and "WHERE (NOT" in after["event_via_idx"][1], after["event_via_idx"]
        conn.execute("DELETE FROM django_migrations WHERE app = 'leases' AND name = '0021_event_indexes'")
    again = migrate_to(env, "0021")  # from the top, as after giving way halfway
    assert again.returncode == 0, again.stdout + again.stderr
    with psycopg.connect(database, autocommit=True) as conn:
        assert indexes_of(conn) == after

    back = migrate_to(env, "0020")
    assert back.returncode == 0, back.stdout + back.stderr
    with psycopg.connect(database, autocommit=True) as conn:
        before = indexes_of(conn)
    assert "event_via_idx" not in before and all(valid for valid, _ in before.values()), before
    assert "(actor, occurred_at)" in before["event_actor_idx"][1], before["event_actor_idx"]
