"""Indexes for the auditors' tenure filters that scanned (decision 0040, follow-up of 2026-11-29): how a
tenure ended (end=held, broken...), its generation, and the few tenures whose lease was changed (a
fingerprint given after a change). Each is written when a tenure begins or ends, never by a renewal."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('leases', '0016_ledger'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='tenure',
            index=models.Index(fields=['end'], name='tenure_end_idx'),
        ),
        migrations.AddIndex(
            model_name='tenure',
            index=models.Index(fields=['generation'], name='tenure_generation_idx'),
        ),
        migrations.AddIndex(
            model_name='tenure',
            index=models.Index(condition=models.Q(('fingerprints', models.F('lease_fingerprint')), _negated=True), fields=['id'], name='tenure_changed_idx'),
        ),
    ]
