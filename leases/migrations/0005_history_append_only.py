"""Lease history append-only in the database itself, whatever code runs.

The database refuses, on SQLite and PostgreSQL:
- UPDATE of an event (also INSERT ... ON CONFLICT DO UPDATE on PostgreSQL);
- INSERT OR REPLACE over an existing event (SQLite: REPLACE deletes the old
  row without firing DELETE triggers, so an INSERT trigger refuses it);
- DELETE of an event, unless it occurred before the retention horizon
  (leases_historyhorizon, one row the retention path moves forwards only);
- TRUNCATE of the history (PostgreSQL).

A missing horizon row means nothing may be deleted. The triggers are
(re)created last: on SQLite, Django rebuilds a table to alter it, which drops
its triggers -- a later migration that alters LeaseEvent must re-run
``create_triggers`` (readiness, /health/ready, checks they are there).
"""

from django.db import migrations, models

REFUSED = "lease history is append-only"
REFUSED_DELETE = "lease history is append-only: only events older than the retention horizon may be deleted"
REFUSED_HORIZON = "the retention horizon only moves forwards"

TRIGGERS = ("leases_leaseevent_no_update", "leases_leaseevent_no_delete", "leases_leaseevent_no_replace",
            "leases_leaseevent_no_truncate", "leases_historyhorizon_forwards",
            "leases_historyhorizon_forwards_insert")

SQLITE_UP = [
    f"""CREATE TRIGGER leases_leaseevent_no_update BEFORE UPDATE ON leases_leaseevent
    BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END""",
    f"""CREATE TRIGGER leases_leaseevent_no_delete BEFORE DELETE ON leases_leaseevent
    WHEN NOT EXISTS (SELECT 1 FROM leases_historyhorizon WHERE id = 1 AND OLD.occurred_at < delete_before)
    BEGIN SELECT RAISE(ABORT, '{REFUSED_DELETE}'); END""",
    # One primary-key probe per INSERT; NEW.id is NULL or -1 for a new event.
    f"""CREATE TRIGGER leases_leaseevent_no_replace BEFORE INSERT ON leases_leaseevent
    WHEN EXISTS (SELECT 1 FROM leases_leaseevent WHERE id = NEW.id)
    BEGIN SELECT RAISE(ABORT, '{REFUSED}'); END""",
    f"""CREATE TRIGGER leases_historyhorizon_forwards BEFORE UPDATE ON leases_historyhorizon
    WHEN NEW.delete_before < OLD.delete_before OR NEW.id != OLD.id
    BEGIN SELECT RAISE(ABORT, '{REFUSED_HORIZON}'); END""",
    f"""CREATE TRIGGER leases_historyhorizon_forwards_insert BEFORE INSERT ON leases_historyhorizon
    WHEN EXISTS (SELECT 1 FROM leases_historyhorizon WHERE delete_before > NEW.delete_before)
    BEGIN SELECT RAISE(ABORT, '{REFUSED_HORIZON}'); END""",
]
SQLITE_DOWN = [f"DROP TRIGGER IF EXISTS {name}" for name in TRIGGERS]

PG_UP = [
    f"""CREATE OR REPLACE FUNCTION leases_leaseevent_refuse_update() RETURNS trigger AS $$
    BEGIN RAISE EXCEPTION '{REFUSED}'; END; $$ LANGUAGE plpgsql""",
    f"""CREATE OR REPLACE FUNCTION leases_leaseevent_refuse_delete() RETURNS trigger AS $$
    BEGIN
      IF NOT EXISTS (SELECT 1 FROM leases_historyhorizon WHERE id = 1 AND OLD.occurred_at < delete_before) THEN
        RAISE EXCEPTION '{REFUSED_DELETE}';
      END IF;
      RETURN OLD;
    END; $$ LANGUAGE plpgsql""",
    f"""CREATE OR REPLACE FUNCTION leases_historyhorizon_forwards() RETURNS trigger AS $$
    BEGIN
      IF NEW.delete_before < OLD.delete_before OR NEW.id <> OLD.id THEN
        RAISE EXCEPTION '{REFUSED_HORIZON}';
      END IF;
      RETURN NEW;
    END; $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER leases_leaseevent_no_update BEFORE UPDATE ON leases_leaseevent
    FOR EACH ROW EXECUTE FUNCTION leases_leaseevent_refuse_update()""",
    """CREATE TRIGGER leases_leaseevent_no_delete BEFORE DELETE ON leases_leaseevent
    FOR EACH ROW EXECUTE FUNCTION leases_leaseevent_refuse_delete()""",
    """CREATE TRIGGER leases_leaseevent_no_truncate BEFORE TRUNCATE ON leases_leaseevent
    FOR EACH STATEMENT EXECUTE FUNCTION leases_leaseevent_refuse_update()""",
    """CREATE TRIGGER leases_historyhorizon_forwards BEFORE UPDATE ON leases_historyhorizon
    FOR EACH ROW EXECUTE FUNCTION leases_historyhorizon_forwards()""",
]
PG_DOWN = [f"DROP TRIGGER IF EXISTS {name} ON {'leases_historyhorizon' if 'horizon' in name else 'leases_leaseevent'}"
           for name in TRIGGERS] + [
    "DROP FUNCTION IF EXISTS leases_leaseevent_refuse_delete()",
    "DROP FUNCTION IF EXISTS leases_historyhorizon_forwards()",
]


def drop_triggers(schema_editor):
    vendor = schema_editor.connection.vendor
    for sql in SQLITE_DOWN if vendor == "sqlite" else PG_DOWN if vendor == "postgresql" else ():
        schema_editor.execute(sql)


def create_triggers(schema_editor):
    """Idempotent: replaces the UPDATE trigger an earlier migration made."""
    drop_triggers(schema_editor)
    vendor = schema_editor.connection.vendor
    for sql in SQLITE_UP if vendor == "sqlite" else PG_UP if vendor == "postgresql" else ():
        schema_editor.execute(sql)


def forwards(apps, schema_editor):
    create_triggers(schema_editor)


def backwards(apps, schema_editor):
    drop_triggers(schema_editor)


class Migration(migrations.Migration):
    # The brief says 0001_initial; the branch's current leaf is named instead so
    # that `migrate` sees one leaf here. The lead re-chains when merging.
    dependencies = [("leases", "0004_event_account_idx")]
    operations = [
        migrations.CreateModel(
            name="HistoryHorizon",
            fields=[
                ("id", models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ("delete_before", models.DateTimeField()),
            ],
        ),
        # Cheaper events (bench/event_cost.py): index refusals only.
        migrations.RemoveIndex(model_name="leaseevent", name="event_outcome_idx"),
        migrations.AddIndex(
            model_name="leaseevent",
            index=models.Index(condition=models.Q(("outcome", "refused")), fields=["outcome", "occurred_at"],
                               name="event_refused_idx"),
        ),
        # Last: on SQLite an operation that rebuilds the table drops its triggers.
        migrations.RunPython(forwards, backwards),
    ]
