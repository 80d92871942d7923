"""Fewer index entries a lease write: every lease action rewrote a page of each index its row
enters. The deadline's index alone (``lease_expires_at``) goes: every query on the deadline also
names the lease state, which ``*_lease_idx`` leads with. The history's blob name index goes into the
resource index, which now leads with the blob: a blob's events by its name alone, and one
resource's events newest first, from one index (docs/decisions/0037)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('leases', '0013_blocks_and_copies'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='blob',
            name='blob_expiry_idx',
        ),
        migrations.RemoveIndex(
            model_name='container',
            name='container_expiry_idx',
        ),
        migrations.RemoveIndex(
            model_name='leaseevent',
            name='event_resource_idx',
        ),
        migrations.RemoveIndex(
            model_name='leaseevent',
            name='event_blob_idx',
        ),
        migrations.AddIndex(
            model_name='leaseevent',
            index=models.Index(fields=['blob', 'container', 'account', 'occurred_at'], name='event_resource_idx'),
        ),
    ]
