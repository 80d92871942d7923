"""Large blob content as versions of 1 MiB chunks (leases/blob_content.py),
written, read and removed in bounded pieces. Existing content over one chunk
is moved into chunks, one blob at a time (its rows read one by one, so the
migration holds one blob's content in memory, not all of them)."""

import uuid

from django.db import migrations, models
from django.utils import timezone

CHUNK_BYTES = 1 << 20  # as leases.blob_content.CHUNK_BYTES (a migration must not import it)


def chunk_existing(apps, schema_editor):
    alias = schema_editor.connection.alias
    Blob = apps.get_model("leases", "Blob")
    BlobContent = apps.get_model("leases", "BlobContent")
    BlobChunk = apps.get_model("leases", "BlobChunk")
    now = timezone.now()
    big = list(Blob.objects.using(alias).filter(size__gt=CHUNK_BYTES, content_version__isnull=True)
               .values_list("pk", flat=True))
    for pk in big:
        content = bytes(Blob.objects.using(alias).filter(pk=pk).values_list("content", flat=True).get())
        version = uuid.uuid4()
        BlobContent.objects.using(alias).create(id=version, state="live", size=len(content),
                                                chunk_bytes=CHUNK_BYTES, staged_at=now)
        for seq, start in enumerate(range(0, len(content), CHUNK_BYTES)):
            BlobChunk.objects.using(alias).create(version=version, seq=seq,
                                                  data=content[start:start + CHUNK_BYTES])
        # Snapshots of it are rows of their own, moved by this loop too (not shared: a one-off).
        Blob.objects.using(alias).filter(pk=pk).update(content=b"", content_version=version)


def unchunk(apps, schema_editor):
    """Backwards: the content back into the rows, before the tables go."""
    alias = schema_editor.connection.alias
    Blob = apps.get_model("leases", "Blob")
    BlobChunk = apps.get_model("leases", "BlobChunk")
    for pk, version in list(Blob.objects.using(alias).filter(content_version__isnull=False)
                            .values_list("pk", "content_version")):
        data = b"".join(bytes(d) for d in BlobChunk.objects.using(alias).filter(version=version)
                        .order_by("seq").values_list("data", flat=True))
        Blob.objects.using(alias).filter(pk=pk).update(content=data, content_version=None)


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
        migrations.RunPython(chunk_existing, unchunk),
    ]
