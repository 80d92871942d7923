"""The ledger (docs/decisions/0041-ledger.md): each event's hash (``row_hash``, NULL for the events
written before, whose hashes are computed from their content), the blocks, what retention removed
from them, the verifications run; and block 0, the genesis, sealing every event there is."""


from django.db import migrations, models


def seal_genesis(apps, schema_editor):
    from leases.domain import clock
    from leases.storage import ledger_rows

    ledger_rows.genesis(schema_editor.connection, apps.get_model("leases", "LedgerBlock"), clock.now())


def unseal(apps, schema_editor):
    apps.get_model("leases", "LedgerBlock").objects.using(schema_editor.connection.alias).all().delete()


class Migration(migrations.Migration):
    # Not atomic: on PostgreSQL the events table's lock is let go once the column is added, and
    # the genesis is sealed beside lease writes, of the events whose transactions have ended
    # (leases/operations/ledger.py, settled_through).
    atomic = False

    dependencies = [
        ('leases', '0015_tenures'),
    ]

    operations = [
        migrations.CreateModel(
            name='LedgerBlock',
            fields=[
                ('position', models.BigIntegerField(primary_key=True, serialize=False)),
                ('first_id', models.BigIntegerField()),
                ('last_id', models.BigIntegerField(unique=True)),
                ('renewals', models.IntegerField()),
                ('renewals_chain', models.CharField(max_length=64)),
                ('others', models.IntegerField()),
                ('others_chain', models.CharField(max_length=64)),
                ('previous_hash', models.CharField(max_length=64)),
                ('block_hash', models.CharField(max_length=64)),
                ('sealed_at', models.DateTimeField()),
                ('newest_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'ordering': ['-position'],
            },
        ),
        migrations.CreateModel(
            name='LedgerCheck',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('started_at', models.DateTimeField()),
                ('finished_at', models.DateTimeField()),
                ('ok', models.BooleanField()),
                ('blocks', models.BigIntegerField()),
                ('events', models.BigIntegerField()),
                ('unsealed', models.BigIntegerField(default=0)),
                ('digests', models.IntegerField(default=0)),
                ('through_block', models.BigIntegerField(blank=True, null=True)),
                ('problem', models.TextField(blank=True)),
            ],
            options={
                'ordering': ['-id'],
            },
        ),
        migrations.AddField(
            model_name='leaseevent',
            name='row_hash',
            field=models.CharField(blank=True, max_length=64, null=True),
        ),
        migrations.CreateModel(
            name='LedgerPrune',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('block', models.BigIntegerField()),
                ('part', models.PositiveSmallIntegerField()),
                ('first_id', models.BigIntegerField()),
                ('last_id', models.BigIntegerField()),
                ('count', models.IntegerField()),
                ('chain_from', models.CharField(max_length=64)),
                ('chain_to', models.CharField(max_length=64)),
                ('pruned_at', models.DateTimeField()),
            ],
            options={
                'ordering': ['block', 'part', 'first_id'],
                'indexes': [models.Index(fields=['part', 'last_id'], name='ledger_prune_part_idx')],
            },
        ),
        migrations.RunPython(seal_genesis, unseal),
    ]
