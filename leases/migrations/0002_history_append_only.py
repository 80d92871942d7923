"""The database itself refuses UPDATEs of lease history, whatever code runs.
DELETE stays possible for a deliberate retention job (and test flushes)."""

from django.db import migrations

SQLITE_UP = """
CREATE TRIGGER leases_leaseevent_no_update BEFORE UPDATE ON leases_leaseevent
BEGIN SELECT RAISE(ABORT, 'lease history is append-only'); END;
"""
SQLITE_DOWN = "DROP TRIGGER IF EXISTS leases_leaseevent_no_update;"

PG_UP = """
CREATE OR REPLACE FUNCTION leases_leaseevent_refuse_update() RETURNS trigger AS $$
BEGIN RAISE EXCEPTION 'lease history is append-only'; END; $$ LANGUAGE plpgsql;
CREATE TRIGGER leases_leaseevent_no_update BEFORE UPDATE ON leases_leaseevent
FOR EACH ROW EXECUTE FUNCTION leases_leaseevent_refuse_update();
"""
PG_DOWN = """
DROP TRIGGER IF EXISTS leases_leaseevent_no_update ON leases_leaseevent;
DROP FUNCTION IF EXISTS leases_leaseevent_refuse_update();
"""


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        schema_editor.execute(SQLITE_UP)
    elif vendor == "postgresql":
        schema_editor.execute(PG_UP)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        schema_editor.execute(SQLITE_DOWN)
    elif vendor == "postgresql":
        schema_editor.execute(PG_DOWN)


class Migration(migrations.Migration):
    dependencies = [("leases", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
