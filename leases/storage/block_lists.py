"""Committed block lists (content versions of chunk_bytes 0), written and read in bounded work. Put
Block List writes one BlobPart row per distinct block (its ``seq`` the block's index in the list's
table) and the order of the parts in one chunk of the version (the layout: per part, the index and
the size), so a commit of 50,000 parts of one block writes three rows, not 50,000. An append blob's
list, and a list written before the layout, has a BlobPart row per part and no chunk. A read goes
PARTS_PER_BATCH parts at a time, each batch's blocks read in one query (docs/decisions/0030)."""

from __future__ import annotations

import bisect
import struct
import uuid
from itertools import accumulate

from leases.models import BlobChunk, BlobPart

LAYOUT = struct.Struct(">IQ")  # a part: its block's index in the list's table, its size
PARTS_PER_BATCH = 256  # parts looked up per query when reading
BATCH_BYTES = 4 << 20  # at most this much of blocks' bytes fetched by one query


class MissingPart(Exception):
    """A part (or its block's chunk) the read needs is not there: the list was deleted under it."""


# ------------------------------------------------------------------ writing

def write(version: uuid.UUID, entries) -> int:
    """In the caller's transaction: the parts ``entries`` ((block id, size,
    block version), in order, at most MAX_COMMITTED: the layout, 12 bytes a
    part, fits one chunk) as the list ``version``; its size."""
    table: dict[tuple[str, uuid.UUID], int] = {}
    rows: list[BlobPart] = []
    order: list[bytes] = []
    start = 0
    for block_id, size, source in entries:
        index = table.get((block_id, source))
        if index is None:
            index = table[(block_id, source)] = len(rows)
            rows.append(BlobPart(version=version, seq=index, block_id=block_id, start=start, size=size,
                                 source=source))
        order.append(LAYOUT.pack(index, size))
        start += size
    BlobPart.objects.bulk_create(rows, batch_size=500)
    if order:
        BlobChunk.objects.create(version=version, seq=0, data=b"".join(order))
    return start


def _layout(version: uuid.UUID) -> list[tuple[int, int]] | None:
    """A list's (block index, size) per part, or None: one written a row per part."""
    data = BlobChunk.objects.filter(version=version, seq=0).values_list("data", flat=True).first()
    return None if data is None else list(LAYOUT.iter_unpack(bytes(data)))


def in_order(version: uuid.UUID) -> list[tuple[str, int]]:
    """A list's parts in order: (block id, size)."""
    layout = _layout(version)
    if layout is None:
        return list(BlobPart.objects.filter(version=version).order_by("seq").values_list("block_id", "size"))
    ids = dict(BlobPart.objects.filter(version=version).values_list("seq", "block_id"))
    return [(ids[index], size) for index, size in layout]


# ------------------------------------------------------------------ reading

def _batches_by_layout(version: uuid.UUID, layout, position: int, end: int):
    starts = list(accumulate((size for _, size in layout), initial=0))
    at = bisect.bisect_right(starts, position) - 1
    while at < len(layout) and starts[at] <= end:
        picked = [k for k in range(at, min(at + PARTS_PER_BATCH, len(layout))) if starts[k] <= end and layout[k][1]]
        at += PARTS_PER_BATCH
        sources = dict(BlobPart.objects.filter(version=version, seq__in={layout[k][0] for k in picked})
                       .values_list("seq", "source"))
        if len(sources) < len({layout[k][0] for k in picked}):
            raise MissingPart(f"list {version} lost a block's row")
        yield [(starts[k], layout[k][1], sources[layout[k][0]]) for k in picked]


def _batches_by_rows(version: uuid.UUID, position: int, end: int):
    parts = BlobPart.objects.filter(version=version, size__gt=0).values_list("start", "size", "source")
    first = parts.filter(start__lte=position).order_by("-start").first()
    if first is None:
        raise MissingPart(f"list {version} has no block at byte {position}")
    batch = [first]
    while batch:
        yield [part for part in batch if part[0] <= end]
        if batch[-1][0] + batch[-1][1] > end:
            return
        batch = list(parts.filter(start__gt=batch[-1][0]).order_by("start")[:PARTS_PER_BATCH])


def stream(version: uuid.UUID, start: int, end: int, *, stream_chunks, piece_bytes: int, chunk_bytes: int):
    """Bytes ``start``..``end`` of the list ``version``, in pieces of about
    ``piece_bytes``: consecutive small blocks are fetched together (one
    query for up to PARTS_PER_BATCH parts or BATCH_BYTES bytes, a block
    listed again fetched once; a block of up to ``chunk_bytes`` is one
    chunk), a larger block through
    ``stream_chunks(block version, first, last)``. MissingPart if a part or
    a block is gone."""
    layout = _layout(version)
    batches = (_batches_by_rows(version, start, end) if layout is None
               else _batches_by_layout(version, layout, start, end))
    position, out = start, bytearray()
    for batch in batches:
        for item in _groups(batch, chunk_bytes):
            if isinstance(item, list):  # small blocks, fetched together
                for first, size, data in _fetched(item):
                    position = _check(version, position, first, size)
                    last = min(end, first + size - 1)
                    if len(data) <= last - first:
                        raise MissingPart(f"a block of list {version} is shorter than listed")
                    out += memoryview(data)[position - first:last - first + 1]
                    position = last + 1
                    if len(out) >= piece_bytes:
                        yield bytes(out)
                        out.clear()
                continue
            first, size, source = item  # a block of more than a chunk, a chunk at a time
            position = _check(version, position, first, size)
            if out:
                yield bytes(out)
                out.clear()
            last = min(end, first + size - 1)
            yield from stream_chunks(source, position - first, last - first)
            position = last + 1
    if position <= end:
        raise MissingPart(f"list {version} ends before byte {position}")
    if out:
        yield bytes(out)


def _groups(batch, chunk_bytes: int):
    """A batch's parts as lists of consecutive small ones (their distinct
    blocks at most BATCH_BYTES together) and, alone, each larger one."""
    group: list = []
    fetched, seen = 0, set[uuid.UUID]()
    for part in batch:
        if part[1] > chunk_bytes:
            if group:
                yield group
                group, fetched, seen = [], 0, set()
            yield part
            continue
        if part[2] not in seen:
            if group and fetched + part[1] > BATCH_BYTES:
                yield group
                group, fetched, seen = [], 0, set()
            seen.add(part[2])
            fetched += part[1]
        group.append(part)
    if group:
        yield group


def _check(version: uuid.UUID, position: int, first: int, size: int) -> int:
    if not first <= position < first + size:
        raise MissingPart(f"list {version} has no block at byte {position}")
    return position


def _fetched(group):
    """(first byte, size, the block's bytes) for each part of ``group``, in one query."""
    if not group:
        return []
    data = dict(BlobChunk.objects.filter(version__in={source for _, _, source in group}, seq=0)
                .values_list("version", "data"))
    if len(data) < len({source for _, _, source in group}):
        raise MissingPart("a block's chunk was deleted during the download")
    return [(first, size, data[source]) for first, size, source in group]
