"""Where large content is stored (leases/storage/blob_content.py): versions of
chunks, uncommitted blocks, committed block lists. Imported by
leases/models/__init__.py, which Django reads."""

from __future__ import annotations

from django.db import models


class BlobContent(models.Model):
    """One stored version of a large blob's content (leases.storage.blob_content):
    written as ``staged`` chunks in short transactions of their own, made
    ``live`` in the one transaction that points a blob at it, ``released``
    when no blob or snapshot points at it any more; released and abandoned
    staged versions are deleted in bounded batches afterwards."""

    # block: an uncommitted block's bytes (BlobBlock names it). A version of
    # chunk_bytes 0 is a committed block list: its bytes are its BlobParts'.
    STAGED, LIVE, RELEASED, BLOCK = "staged", "live", "released", "block"

    id = models.UUIDField(primary_key=True)
    state = models.CharField(max_length=8, choices=[(s, s) for s in (STAGED, LIVE, RELEASED, BLOCK)])
    size = models.BigIntegerField()
    chunk_bytes = models.IntegerField()
    staged_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "staged_at"], name="blobcontent_state_idx")]

    def __str__(self) -> str:
        return f"{self.id} ({self.state}, {self.size} bytes)"


class BlobChunk(models.Model):
    """Bytes ``seq * chunk_bytes`` onwards of a content version. No foreign
    key: chunks are written before their version may be used, and deleted
    in batches before it."""

    version = models.UUIDField()
    seq = models.IntegerField()
    data = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "seq"], name="blobchunk_unique_seq")]


class BlobBlock(models.Model):
    """An uncommitted block (Put Block) of a blob name, which may have no
    committed blob yet: its bytes are the version ``version`` (state block).
    Put Block List discards all of a name's rows; a name with none staged
    for a week loses them (leases.storage.blob_content.discard_idle_blocks)."""

    container = models.ForeignKey("leases.Container", on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=1024)
    block_id = models.CharField(max_length=100)  # base64 as sent: at most 64 bytes decoded
    size = models.BigIntegerField()
    version = models.UUIDField()
    staged_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["container", "name", "block_id"], name="blobblock_unique_id")]
        indexes = [models.Index(fields=["staged_at"], name="blobblock_staged_idx"),
                   models.Index(fields=["version"], name="blobblock_version_idx")]


class BlobPart(models.Model):
    """Block ``seq`` of a committed block list (the version ``version``, of
    chunk_bytes 0): bytes ``start``.. ``start + size`` of the blob are those of
    the block's own version ``source``, which committed lists share (a block
    committed again is not copied)."""

    version = models.UUIDField()
    seq = models.IntegerField()
    block_id = models.CharField(max_length=100)
    start = models.BigIntegerField()
    size = models.BigIntegerField()
    source = models.UUIDField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "seq"], name="blobpart_unique_seq")]
        indexes = [models.Index(fields=["source"], name="blobpart_source_idx"),
                   models.Index(fields=["version", "start"], name="blobpart_start_idx")]
