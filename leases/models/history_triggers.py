"""The history's append-only triggers (migration 0005_history_append_only, its delete rule per kind of
event from 0018_per_kind_horizons): which must exist, and
putting them back after every ``migrate``. On SQLite, Django alters a table by rebuilding it, which
drops its triggers; so a later migration that alters LeaseEvent would leave the history unguarded.
``migrate`` therefore ends by re-creating any that are missing (a post_migrate handler,
leases/apps.py), and readiness (/health/ready) reports any still missing."""

from __future__ import annotations

import importlib

from engines import postgres

TRIGGERS = {
    "sqlite": ("leases_leaseevent_no_update", "leases_leaseevent_no_delete", "leases_leaseevent_no_replace",
               "leases_historyhorizon_forwards", "leases_historyhorizon_forwards_insert"),
    "postgresql": ("leases_leaseevent_no_update", "leases_leaseevent_no_delete", "leases_leaseevent_no_truncate",
                   "leases_historyhorizon_forwards"),
}
TABLES = ("leases_leaseevent", "leases_historyhorizon")
# The tenures' guard (migration 0015_tenures), kept the same way once that table exists.
TENURE_TRIGGERS = {
    "sqlite": ("leases_tenure_no_update", "leases_tenure_no_delete", "leases_tenure_no_replace"),
    "postgresql": ("leases_tenure_no_update", "leases_tenure_no_delete", "leases_tenure_no_truncate"),
}
TENURE_TABLE = "leases_tenure"


def present(conn, cursor) -> set[str]:
    if postgres.in_use(conn):
        cursor.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")
    else:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
    return {row[0] for row in cursor.fetchall()}


def missing(conn, cursor) -> list[str]:
    have = present(conn, cursor)
    expected = [*TRIGGERS.get(conn.vendor, ())]
    if TENURE_TABLE in conn.introspection.table_names(cursor):
        expected += TENURE_TRIGGERS.get(conn.vendor, ())
    return [name for name in expected if name not in have]


def ensure(conn) -> list[str]:
    """Re-create the triggers if any is missing (and the tables exist);
    returns the names that were missing."""
    with conn.cursor() as cursor:
        if not set(TABLES) <= set(conn.introspection.table_names(cursor)):
            return []  # not migrated that far: the migration creates them
        gone = missing(conn, cursor)
    for names, module in ((TRIGGERS, "0018_per_kind_horizons"), (TENURE_TRIGGERS, "0015_tenures")):
        if set(gone) & set(names.get(conn.vendor, ())):
            migration = importlib.import_module(f"leases.migrations.{module}")
            with conn.schema_editor() as editor:
                migration.create_triggers(editor)
    return gone


def after_migrate(sender, using="default", **kwargs):
    from django.db import connections

    ensure(connections[using])
