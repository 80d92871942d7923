"""Large blob content as versions of 1 MiB chunks (leases/blob_content.py),
written, read and removed in bounded pieces. Existing content stays in the
blob rows (read as before); only content uploaded from now on over one chunk
is chunked."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('leases', '0007_fencing_generations'),
    ]

    operations = [
        migrations.CreateModel(
            name='BlobChunk',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('version', models.UUIDField()),
                ('seq', models.IntegerField()),
                ('data', models.BinaryField()),
            ],
        ),
        migrations.CreateModel(
            name='BlobContent',
            fields=[
                ('id', models.UUIDField(primary_key=True, serialize=False)),
                ('state', models.CharField(choices=[('staged', 'staged'), ('live', 'live'), ('released', 'released')], max_length=8)),
                ('size', models.BigIntegerField()),
                ('chunk_bytes', models.IntegerField()),
                ('staged_at', models.DateTimeField()),
                ('released_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.AddField(
            model_name='blob',
            name='content_version',
            field=models.UUIDField(blank=True, editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name='blob',
            index=models.Index(fields=['content_version'], name='blob_content_version_idx'),
        ),
        migrations.AddConstraint(
            model_name='blobchunk',
            constraint=models.UniqueConstraint(fields=('version', 'seq'), name='blobchunk_unique_seq'),
        ),
        migrations.AddIndex(
            model_name='blobcontent',
            index=models.Index(fields=['state', 'staged_at'], name='blobcontent_state_idx'),
        ),
    ]
