"""Large blob content in bounded pieces: a version of 1 MiB chunks (``CHUNK_BYTES``) staged, made
live, released and collected, each step in short transactions, so that no upload, download or
clean-up holds the database's writer (or a read) for longer than one chunk; content up to a chunk
stays in the blob's row. docs/development/architecture.md ("Large blob content") tells the life of a
version, docs/decisions/0009 why."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from leases.domain import clock
from leases import conf
from leases.models import Blob, BlobBlock, BlobChunk, BlobContent, BlobPart
from engines.writer_wait import is_writer_busy, received_at
from leases.storage import block_lists, compiled_reads

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20  # one row, one write transaction; content up to this stays in the blob's row
PIECE_BYTES = 64 << 10  # a download yields pieces of this size (serving/asgi.py sends ~64 KiB at a time)
DELETE_BATCH = 8  # chunks deleted per transaction (8 MiB of pages freed)
COLLECT_BATCHES = 4  # transactions one ``collect`` after a request may take
STAGE_PAUSE = conf.current().stage_pause  # pause after a piece, x its time
# A download of a replaced or deleted blob may take this long and still be
# served whole; a slower one is cut short (see stream()).
RELEASED_GRACE = timedelta(minutes=10)
# A staged version older than this belongs to an upload that died: each of
# its pieces waits at most LEASEHOLD_WRITE_WAIT (5 s), so 64 pieces take
# minutes at the very worst, never an hour.
STAGED_TTL = timedelta(hours=1)
# A name's uncommitted blocks are discarded when none was staged for this long (as on Azure).
BLOCK_TTL = timedelta(days=7)
PART_BATCH = 1000  # parts of a committed block list deleted per transaction


class ContentGone(Exception):
    """A download's version was deleted while it was being sent (it was
    replaced or deleted more than RELEASED_GRACE ago)."""


class StagedContentLost(Exception):
    """The upload's staged version is no longer there (it took longer than
    STAGED_TTL and was collected): nothing may point at it."""


def inline(size: int) -> bool:
    """Whether content of ``size`` bytes is kept in the blob's own row."""
    return size <= CHUNK_BYTES


def _piece(fn):
    """Run ``fn`` in a write transaction of its own, whose wait for the
    writer counts from now (not from the request's arrival: an upload of
    many pieces is not refused for the time its earlier pieces took)."""
    with received_at(time.monotonic()), transaction.atomic():
        return fn()


# ------------------------------------------------------------------ writing

def stage(content, *, now: datetime | None = None) -> uuid.UUID:
    """Store ``content`` (bytes or memoryview, more than CHUNK_BYTES) as a
    staged version, one chunk per write transaction; its id. If a piece
    fails (the writer busy past the wait, a full disk), what was staged is
    discarded and the error raised."""
    view = memoryview(content).cast("B")
    pieces = (bytes(view[at:at + CHUNK_BYTES]) for at in range(0, len(view), CHUNK_BYTES))
    return _stage(pieces, len(view), now=now)


def stage_stream(read, length: int, *, hashes=(), now: datetime | None = None) -> uuid.UUID:
    """As ``stage``, for ``length`` bytes read by ``read(n)`` (a request's
    body, spooled by the front): memory is one chunk, whatever the length.
    Each of ``hashes`` (objects with ``update``) sees every byte. IOError if
    the body ends short (nothing stays staged)."""
    def pieces():
        left = length
        while left:
            data = read(min(CHUNK_BYTES, left))
            if not data:
                raise IOError(f"the body ended {left} bytes short")
            while len(data) < min(CHUNK_BYTES, left):  # a short read of a socket: the rest of the chunk
                more = read(min(CHUNK_BYTES, left) - len(data))
                if not more:
                    raise IOError(f"the body ended {left - len(data)} bytes short")
                data += more
            for h in hashes:
                h.update(data)
            left -= len(data)
            yield data
    return _stage(pieces(), length, now=now)


def _stage(pieces, size: int, *, now: datetime | None) -> uuid.UUID:
    version = uuid.uuid4()
    now = now or clock.now()

    def header():
        BlobContent.objects.create(id=version, state=BlobContent.STAGED, size=size, chunk_bytes=CHUNK_BYTES,
                                   staged_at=now)
    try:
        seq = -1
        for seq, data in enumerate(pieces):
            def write(seq=seq, data=data):
                if seq == 0:
                    header()
                BlobChunk.objects.create(version=version, seq=seq, data=data)

            started = time.monotonic()
            _piece(write)
            # The WAL checkpointer (and everyone else) gets the writer
            # for a while before the next piece.
            time.sleep((time.monotonic() - started) * STAGE_PAUSE)
        if seq < 0:  # no bytes: the version alone
            _piece(header)
    except BaseException:
        discard(version)
        raise
    return version


def make_live(version: uuid.UUID, *, state: str = BlobContent.LIVE) -> None:
    """In the caller's transaction (the one that points a blob, or an
    uncommitted block: ``state`` block, at ``version``): the staged version
    becomes live, or StagedContentLost."""
    if not BlobContent.objects.filter(id=version, state=BlobContent.STAGED).update(state=state):
        raise StagedContentLost(f"staged content {version} is gone (collected after {STAGED_TTL})")


def release_unreferenced(versions, *, now: datetime) -> int:
    """In the caller's transaction, after it stopped naming ``versions``:
    mark released those that no blob or snapshot names any more."""
    versions = {v for v in versions if v is not None}
    if not versions:
        return 0
    return (_unnamed(BlobContent.objects.filter(id__in=versions, state=BlobContent.LIVE))
            .update(state=BlobContent.RELEASED, released_at=now))


# ------------------------------------------------------------------ reading

def read_chunk(version: uuid.UUID, seq: int) -> bytes | None:
    """One chunk, in one short read (no transaction spans a download)."""
    data = BlobChunk.objects.filter(version=version, seq=seq).values_list("data", flat=True).first()
    return None if data is None else bytes(data)


def stream(version: uuid.UUID, start: int, end: int, *, chunk_bytes: int = CHUNK_BYTES):
    """Bytes ``start``..``end`` (inclusive) of ``version``, read a chunk at a
    time and yielded in PIECE_BYTES pieces: memory is one chunk per
    download, and each read is one short query. A version does not change,
    so the pieces are all of one upload; if the version is deleted under a
    download (replaced or deleted more than RELEASED_GRACE ago), ContentGone
    is raised: the response ends short of its Content-Length and the
    client sees an incomplete body (the SDKs then retry the range with
    If-Match on the ETag, which a replaced blob answers 412). A committed
    block list (chunk_bytes 0) is read in batches of blocks (block_lists.stream)."""
    if BlobContent.objects.filter(id=version, chunk_bytes=0).exists():
        try:
            yield from block_lists.stream(version, start, end, stream_chunks=_stream_chunks, piece_bytes=PIECE_BYTES,
                                         chunk_bytes=CHUNK_BYTES)
        except block_lists.MissingPart as exc:
            raise ContentGone(str(exc)) from None
        return
    yield from _stream_chunks(version, start, end, chunk_bytes=chunk_bytes)


def _stream_chunks(version: uuid.UUID, start: int, end: int, *, chunk_bytes: int = CHUNK_BYTES):
    position = start
    while position <= end:
        seq = position // chunk_bytes
        data = read_chunk(version, seq)
        if data is None:
            raise ContentGone(f"content {version} chunk {seq} was deleted during the download")
        view = memoryview(data)
        offset = position - seq * chunk_bytes
        last = min(len(view), end - seq * chunk_bytes + 1)
        if offset >= last:  # the version is shorter than its blob says: never written so
            raise ContentGone(f"content {version} chunk {seq} is shorter than expected")
        while offset < last:
            piece = view[offset:min(last, offset + PIECE_BYTES)]
            yield bytes(piece)
            offset += len(piece)
            position += len(piece)


def read_all(blob: Blob) -> bytes:
    """A blob's (or snapshot's) whole content, inline or chunked. For tests
    and tools; the Azure door streams (``stream``)."""
    if blob.content_version is None:
        return bytes(blob.content)
    return b"".join(stream(blob.content_version, 0, blob.size - 1)) if blob.size else b""


# ------------------------------------------------------------------ removing

def _delete_some(version: uuid.UUID) -> int:
    """Delete up to DELETE_BATCH chunks of ``version`` in one transaction,
    and the version's row once none is left; chunks deleted."""
    def batch():
        if BlobContent.objects.filter(id=version, state=BlobContent.LIVE).exists():
            return 0  # a blob names it: never deleted under a reader (a caller's mistake)
        if parts := _delete_parts(version):  # a committed block list's blocks, before its layout
            return min(parts, DELETE_BATCH)
        ids = list(BlobChunk.objects.filter(version=version).order_by("seq")
                   .values_list("pk", flat=True)[:DELETE_BATCH + 1])
        last = len(ids) <= DELETE_BATCH
        ids = ids[:DELETE_BATCH]
        if ids:
            BlobChunk.objects.filter(pk__in=ids).delete()
        if last:  # the version's last chunks: its row goes with them
            BlobContent.objects.filter(id=version).delete()
        return len(ids)

    return _piece(batch)


def _delete_parts(version: uuid.UUID) -> int:
    """Up to PART_BATCH parts of a committed block list, in the caller's
    transaction; the blocks no other list or blob names are released as of
    the list's own release (its readers' grace is theirs). Parts deleted."""
    parts = list(BlobPart.objects.filter(version=version).values_list("pk", "source")[:PART_BATCH])
    if not parts:
        return 0
    released = BlobContent.objects.filter(id=version).values_list("released_at", flat=True).first()
    BlobPart.objects.filter(pk__in=[pk for pk, _ in parts]).delete()
    (_unnamed(BlobContent.objects.filter(id__in={source for _, source in parts}, state=BlobContent.LIVE))
     .update(state=BlobContent.RELEASED, released_at=released or clock.now()))
    return len(parts)


def _unnamed(versions):
    """``versions`` that no blob, snapshot or committed block list names."""
    return (versions.exclude(Exists(Blob.objects.filter(content_version=OuterRef("id"))))
            .exclude(Exists(BlobPart.objects.filter(source=OuterRef("id")))))


def discard(version: uuid.UUID) -> bool:
    """Delete a staged version nothing names (a refused or failed upload's),
    in bounded batches, now. Best effort: if the writer stays busy or the
    disk fails, ``collect`` finds it after STAGED_TTL. Whether it is gone."""
    try:
        while _delete_some(version) == DELETE_BATCH:
            pass
        return True
    except Exception as exc:  # never hide the upload's own outcome behind the clean-up's
        log.warning("staged content %s left for later clean-up: %s", version, exc)
        return False


def _first_due(staged_before: datetime, released_before: datetime):
    """The oldest version staged before the first time and never made live, or released before the second."""
    return BlobContent.objects.filter(
        Q(state=BlobContent.STAGED, staged_at__lt=staged_before)
        | Q(state=BlobContent.RELEASED, released_at__lt=released_before)).order_by("staged_at").values_list("id")[:1]


def collect(*, now: datetime | None = None, max_batches: int | None = COLLECT_BATCHES) -> int:
    """Delete released versions past their grace and staged versions of
    dead uploads, DELETE_BATCH chunks per transaction, at most
    ``max_batches`` transactions (None: until none is due); chunks deleted."""
    now = now or clock.now()
    deleted = batches = 0
    if max_batches is None:
        while discard_idle_blocks(now=now):
            pass
    else:
        discard_idle_blocks(now=now)
    while max_batches is None or batches < max_batches:
        row = compiled_reads.first_row("due content", _first_due, now - STAGED_TTL, now - RELEASED_GRACE)
        if row is None:
            break
        version = row[0]
        deleted += _delete_some(version)
        batches += 1
    return deleted


def collect_after_request(written: int = 0) -> None:
    """``collect`` a few batches after a write was answered for -- twice as
    many chunks as it wrote, and at least COLLECT_BATCHES batches, so that
    removal keeps ahead of what uploads release; its failure (the writer
    busy, ...) is logged, never the request's."""
    chunks = (written + CHUNK_BYTES - 1) // CHUNK_BYTES if not inline(written) else 0
    try:
        collect(max_batches=COLLECT_BATCHES + 2 * chunks // DELETE_BATCH)
    except Exception as exc:
        if not is_writer_busy(exc):
            log.warning("blob content clean-up failed: %s", exc)


def sweep_orphans(*, now: datetime | None = None) -> int:
    """Mark released the live versions that no blob names (a race between
    two instances that each still saw the other's reference; ``release``
    misses nothing else), and the uncommitted blocks' versions no block
    names (their container was deleted). Versions marked."""
    now = now or clock.now()
    blocks = (BlobContent.objects.filter(state=BlobContent.BLOCK)
              .exclude(Exists(BlobBlock.objects.filter(version=OuterRef("id"))))
              .update(state=BlobContent.RELEASED, released_at=now))
    return blocks + _unnamed(BlobContent.objects.filter(state=BlobContent.LIVE)).update(
        state=BlobContent.RELEASED, released_at=now)


def _first_idle(cutoff: datetime):
    """The name of uncommitted blocks none of which was staged since ``cutoff``."""
    return (BlobBlock.objects.filter(staged_at__lt=cutoff)
            .exclude(Exists(BlobBlock.objects.filter(container_id=OuterRef("container_id"), name=OuterRef("name"),
                                                     staged_at__gte=cutoff)))
            .order_by("id").values_list("container_id", "name")[:1])


def discard_idle_blocks(*, now: datetime) -> int:
    """The uncommitted blocks of one name none of whose blocks was staged in
    BLOCK_TTL, discarded in one transaction (their versions released);
    how many (0: no such name)."""
    idle = compiled_reads.first_row("idle blocks", _first_idle, now - BLOCK_TTL)
    if idle is None:
        return 0
    return _piece(lambda: discard_blocks(container_id=idle[0], name=idle[1], now=now))


def discard_blocks(*, container_id: int, name: str | None, now: datetime) -> int:
    """In the caller's transaction: a name's (None: every name's) uncommitted
    blocks deleted, the versions still in state block released (a commit
    made its own live first)."""
    rows = BlobBlock.objects.filter(container_id=container_id)
    if name is not None:
        rows = rows.filter(name=name)
    (BlobContent.objects.filter(id__in=rows.values("version"), state=BlobContent.BLOCK)
     .update(state=BlobContent.RELEASED, released_at=now))
    return rows.delete()[0]


def prune(*, now: datetime | None = None) -> dict:
    """Everything due, in bounded transactions: for the retention pruner
    (leases.operations.retention) and ``manage.py leasehold_blob_gc``."""
    now = now or clock.now()
    swept = _piece(lambda: sweep_orphans(now=now))
    chunks = collect(now=now, max_batches=None)
    return {"orphans_released": swept, "chunks_deleted": chunks}
