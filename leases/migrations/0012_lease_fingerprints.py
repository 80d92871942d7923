"""The history keeps lease id fingerprints, not lease ids (leases/fingerprints.py;
docs/decisions/0029-lease-id-fingerprints.md).

The events recorded so far get the fingerprints of their ids, then the id
columns go: the one change to recorded history, made with the UPDATE trigger
set aside for this migration's transaction and put back after it (on SQLite
dropped and re-created; on PostgreSQL disabled and enabled). Backwards the
ids cannot come back: the columns return empty.
"""

import hashlib
import importlib
import uuid

from django.db import migrations, models

LENGTH = 12  # as leases.fingerprints.LENGTH (a migration must not import it)


def _fingerprint(stored):
    """SQLite keeps a UUIDField as 32 hex digits."""
    if stored is None:
        return None
    return hashlib.sha256(str(uuid.UUID(stored)).encode("ascii")).hexdigest()[:LENGTH]


def fill(apps, schema_editor):
    conn = schema_editor.connection
    if conn.vendor == "sqlite":
        conn.ensure_connection()
        conn.connection.create_function("leasehold_fingerprint", 1, _fingerprint, deterministic=True)
        expression = "leasehold_fingerprint({})"
        schema_editor.execute("DROP TRIGGER IF EXISTS leases_leaseevent_no_update")
    elif conn.vendor == "postgresql":
        expression = f"substr(encode(sha256(convert_to({{}}::text, 'UTF8')), 'hex'), 1, {LENGTH})"
        schema_editor.execute("ALTER TABLE leases_leaseevent DISABLE TRIGGER leases_leaseevent_no_update")
    else:
        return
    for column in ("lease_id", "proposed_lease_id"):
        schema_editor.execute(f"UPDATE leases_leaseevent SET {column.replace('_id', '_fingerprint')} = "
                              f"{expression.format(column)} WHERE {column} IS NOT NULL")
    if conn.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE leases_leaseevent ENABLE TRIGGER leases_leaseevent_no_update")
    else:
        importlib.import_module("leases.migrations.0005_history_append_only").create_triggers(schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ('leases', '0011_stored_access_policies'),
    ]

    operations = [
        migrations.AddField(
            model_name='leaseevent',
            name='lease_fingerprint',
            field=models.CharField(blank=True, max_length=12, null=True),
        ),
        migrations.AddField(
            model_name='leaseevent',
            name='proposed_lease_fingerprint',
            field=models.CharField(blank=True, max_length=12, null=True),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.RemoveIndex(
            model_name='leaseevent',
            name='event_lease_id_idx',
        ),
        migrations.RemoveField(
            model_name='leaseevent',
            name='lease_id',
        ),
        migrations.RemoveField(
            model_name='leaseevent',
            name='proposed_lease_id',
        ),
        migrations.AddIndex(
            model_name='leaseevent',
            index=models.Index(fields=['lease_fingerprint'], name='event_lease_fp_idx'),
        ),
        migrations.AddIndex(
            model_name='leaseevent',
            index=models.Index(condition=models.Q(('proposed_lease_fingerprint__isnull', False)),
                               fields=['proposed_lease_fingerprint'], name='event_proposed_fp_idx'),
        ),
    ]
