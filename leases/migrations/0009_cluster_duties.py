"""What instances sharing a database share: the JSON API's rate counters
(unlogged on PostgreSQL: no WAL or fsync per API request; a crash only
forgets counts) and the secret key (leases/shared_secret.py)."""

from django.db import migrations, models


def unlogged(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE leases_apiratecount SET UNLOGGED")


class Migration(migrations.Migration):

    dependencies = [
        ('leases', '0008_blob_chunks'),
    ]

    operations = [
        migrations.CreateModel(
            name='SharedSecret',
            fields=[
                ('id', models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ('key', models.TextField(blank=True)),
                ('fingerprint', models.CharField(max_length=64)),
                ('created_at', models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name='ApiRateCount',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.TextField()),
                ('slot', models.BigIntegerField()),
                ('count', models.IntegerField()),
                ('expires', models.FloatField()),
            ],
            options={
                'indexes': [models.Index(fields=['expires'], name='api_rate_expires_idx')],
                'constraints': [models.UniqueConstraint(fields=('key', 'slot'), name='api_rate_key_slot')],
            },
        ),
        migrations.RunPython(unlogged, migrations.RunPython.noop),
    ]
