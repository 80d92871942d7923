"""Retention's horizon per kind of event, in the history's delete trigger (decision 0041, follow-up of
2026-11-29). Row 1 of leases_historyhorizon is the horizon of every event but a successful renewal,
row 2 that of successful renewals, each set by the pruner from its own retention (none: no row, and
nothing of that kind may be deleted). Before, one horizon, now minus the shortest retention, let a
writer delete any event older than a day (the renewals' default) without a trigger refusing.
The rows there were (the shortest retention's) are removed: until the pruner's next batch sets them
again, nothing may be deleted. Tenures may be deleted only by row 1 (they are not pruned)."""

import importlib

from django.db import migrations

APPEND_ONLY = importlib.import_module("leases.migrations.0005_history_append_only")
RENEWAL = "OLD.action = 'renew' AND OLD.outcome = 'success'"
DELETABLE = (f"EXISTS (SELECT 1 FROM leases_historyhorizon h WHERE OLD.occurred_at < h.delete_before "
             f"AND ((h.id = 2 AND {RENEWAL}) OR (h.id = 1 AND NOT ({RENEWAL}))))")
REFUSED_DELETE = ("lease history is append-only: only events older than the retention horizon of their kind "
                  "may be deleted")

SQLITE_UP = [
    "DROP TRIGGER IF EXISTS leases_leaseevent_no_delete",
    f"""CREATE TRIGGER leases_leaseevent_no_delete BEFORE DELETE ON leases_leaseevent
    WHEN NOT {DELETABLE}
    BEGIN SELECT RAISE(ABORT, '{REFUSED_DELETE}'); END""",
    # Each row moves forwards only; one row's horizon says nothing of the other's.
    "DROP TRIGGER IF EXISTS leases_historyhorizon_forwards_insert",
    f"""CREATE TRIGGER leases_historyhorizon_forwards_insert BEFORE INSERT ON leases_historyhorizon
    WHEN EXISTS (SELECT 1 FROM leases_historyhorizon WHERE id = NEW.id AND delete_before > NEW.delete_before)
    BEGIN SELECT RAISE(ABORT, '{APPEND_ONLY.REFUSED_HORIZON}'); END""",
]
PG_UP = [
    f"""CREATE OR REPLACE FUNCTION leases_leaseevent_refuse_delete() RETURNS trigger AS $$
    BEGIN
      IF NOT {DELETABLE} THEN
        RAISE EXCEPTION '{REFUSED_DELETE}';
      END IF;
      RETURN OLD;
    END; $$ LANGUAGE plpgsql""",
]


def create_triggers(schema_editor):
    """The history's triggers (0005) with this delete rule; idempotent (leases/models/history_triggers.py
    re-runs it after every migrate)."""
    APPEND_ONLY.create_triggers(schema_editor)
    vendor = schema_editor.connection.vendor
    for sql in SQLITE_UP if vendor == "sqlite" else PG_UP if vendor == "postgresql" else ():
        schema_editor.execute(sql)


def forwards(apps, schema_editor):
    schema_editor.execute("DELETE FROM leases_historyhorizon")
    create_triggers(schema_editor)


def backwards(apps, schema_editor):
    schema_editor.execute("DELETE FROM leases_historyhorizon")
    APPEND_ONLY.create_triggers(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("leases", "0017_tenure_audit_indexes")]
    operations = [migrations.RunPython(forwards, backwards)]
