"""Fewer index entries a lease write: every lease action rewrote a page of each index its row
enters. The deadline's index alone (``lease_expires_at``) goes: every query on the deadline also
names the lease state, which ``*_lease_idx`` leads with. The history's blob name index goes into the
resource index, which now leads with the blob: a blob's events by its name alone, and one
resource's events newest first, from one index (docs/decisions/0037).

On PostgreSQL the indexes are built and dropped CONCURRENTLY: other instances go on serving, and a
plain CREATE INDEX would hold every history insert, so every lease write, for as long as it reads
the whole history. Such statements cannot run in a transaction, so this migration is not atomic;
each statement says IF EXISTS (and a build first drops what a failed one left), so that a migrate
that gave way to a long reader (leases/management/commands/migrate.py) can run it again from the top."""

from django.db import migrations, models


def _on_postgresql(schema_editor) -> bool:
    return schema_editor.connection.vendor == "postgresql"


def _drop_concurrently(schema_editor, name: str) -> None:
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(name)}")


class RemoveIndexBesideWrites(migrations.RemoveIndex):
    """RemoveIndex; on PostgreSQL without a lock that holds up writes."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if not _on_postgresql(schema_editor):
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        if self.allow_migrate_model(schema_editor.connection.alias, from_state.apps.get_model(app_label,
                                                                                             self.model_name)):
            _drop_concurrently(schema_editor, self.name)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if not _on_postgresql(schema_editor):
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            _drop_concurrently(schema_editor, self.name)
            index = to_state.models[app_label, self.model_name_lower].get_index_by_name(self.name)
            schema_editor.add_index(model, index, concurrently=True)


class AddIndexBesideWrites(migrations.AddIndex):
    """AddIndex; on PostgreSQL built beside the writes (CONCURRENTLY)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if not _on_postgresql(schema_editor):
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            _drop_concurrently(schema_editor, self.index.name)  # left invalid by a build that failed
            schema_editor.add_index(model, self.index, concurrently=True)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if not _on_postgresql(schema_editor):
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        if self.allow_migrate_model(schema_editor.connection.alias, from_state.apps.get_model(app_label,
                                                                                             self.model_name)):
            _drop_concurrently(schema_editor, self.index.name)


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ('leases', '0013_blocks_and_copies'),
    ]

    operations = [
        RemoveIndexBesideWrites(
            model_name='blob',
            name='blob_expiry_idx',
        ),
        RemoveIndexBesideWrites(
            model_name='container',
            name='container_expiry_idx',
        ),
        RemoveIndexBesideWrites(
            model_name='leaseevent',
            name='event_resource_idx',
        ),
        RemoveIndexBesideWrites(
            model_name='leaseevent',
            name='event_blob_idx',
        ),
        AddIndexBesideWrites(
            model_name='leaseevent',
            index=models.Index(fields=['blob', 'container', 'account', 'occurred_at'], name='event_resource_idx'),
        ),
    ]
