"""User delegation keys (leases/models/delegation.py): who asked for each, the roles they held, whether
it was revoked; never the key's value."""

from django.db import migrations, models
import django.db.models.deletion


class Migration(migrations.Migration):
    dependencies = [
        ('leases', '0018_per_kind_horizons'),
    ]

    operations = [
        migrations.CreateModel(
            name='UserDelegationKey',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('issuer', models.CharField(max_length=512)),
                ('signed_oid', models.CharField(max_length=160)),
                ('signed_tid', models.CharField(max_length=64)),
                ('actor', models.CharField(max_length=200)),
                ('start', models.DateTimeField()),
                ('expiry', models.DateTimeField()),
                ('version', models.CharField(max_length=10)),
                ('roles', models.JSONField(default=dict)),
                ('salt', models.CharField(max_length=32)),
                ('issued_at', models.DateTimeField()),
                ('revoked_at', models.DateTimeField(blank=True, null=True)),
                ('account', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                              related_name='delegation_keys', to='leases.account')),
            ],
            options={
                'ordering': ['-issued_at'],
                'indexes': [models.Index(fields=['account', 'signed_oid', 'start', 'expiry'], name='udk_lookup_idx')],
            },
        ),
    ]
