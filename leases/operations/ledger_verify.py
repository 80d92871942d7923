"""Verifying the ledger: every retained event's hash recomputed from its content, every block's chains
recomputed from its events (and, where retention removed some, from its prune records), every
block's hash recomputed and chained to the one before, every tenure held to the events that made it
(ledger_tenures.py), and each digest an auditor kept held to the block it names. The first thing that does not match is named; nothing is written but the record of
the run (``record``)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection

from leases.domain import clock, ledger
from leases.models import LedgerBlock, LedgerCheck, LedgerPrune
from leases.operations import ledger_tenures
from leases.storage.ledger_rows import TABLE, columns

CHUNK = 50_000
PARTS = ("successful renewals", "other events")


class DigestError(Exception):
    """A digest that cannot be checked against this database (exit 2)."""


Mismatch = ledger_tenures.Mismatch  # the first thing that does not match (exit 1)


@dataclass
class Report:
    started_at: datetime
    blocks: int = 0
    events: int = 0
    unsealed: int = 0
    digests: int = 0
    tenures: int = 0
    tenures_unproven: int = 0  # older than the oldest event kept of their begin's kind
    through_block: int | None = None
    problem: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problem


def _events(after: int = -2 ** 63):
    """Every event (id, stored hash, HASHED columns...), in id order, read in short queries."""
    while True:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {columns(connection)} FROM {TABLE} WHERE id > %s ORDER BY id LIMIT %s",
                           [after, CHUNK])
            rows = cursor.fetchall()
        yield from rows
        if len(rows) < CHUNK:
            return
        after = rows[-1][0]


def _checked_hash(row) -> str:
    """The event's hash, recomputed; a stored one must be the same."""
    found = ledger.event_hash(row[2:])
    if row[1] and row[1] != found:
        raise Mismatch(f"event {row[0]} does not match its hash: it was written as {row[1]}, "
                       f"its content now hashes to {found} (the event was changed)")
    return found


def _blocks():
    fields = ("position", "first_id", "last_id", "renewals", "renewals_chain", "others", "others_chain",
              "previous_hash", "block_hash", "sealed_at")
    return LedgerBlock.objects.order_by("position").values_list(*fields, named=True).iterator(chunk_size=2000)


def _prunes():
    return LedgerPrune.objects.order_by("block", "part", "first_id").iterator(chunk_size=2000)


def load_digests(texts: list[tuple[str, str]]) -> list[dict]:
    """Each (name, text) read as a digest whose block this database has; DigestError if not."""
    found = []
    for name, text in texts:
        try:
            digest = ledger.parse_digest(text)
        except ledger.BadDigest as exc:
            raise DigestError(f"{name} is not a ledger digest: {exc}") from None
        if not LedgerBlock.objects.filter(position=digest["block"]).exists():
            newest = LedgerBlock.objects.order_by("-position").values_list("position", flat=True).first()
            raise DigestError(
                f"{name} names block {digest['block']}, which this database does not have (its ledger ends at "
                f"block {newest}): the newest blocks were removed, or the digest is of another database")
        found.append({**digest, "file": name})
    return found


def verify(digests: list[dict] | None = None) -> Report:
    report = Report(started_at=clock.now())
    try:
        _walk(report)
        ledger_tenures.check(report)  # the events proved, the tenures are held to them
        for digest in digests or ():
            stored = LedgerBlock.objects.filter(position=digest["block"]).values_list("block_hash", flat=True).first()
            if stored != digest["hash"]:
                raise Mismatch(f"block {digest['block']} does not match the digest {digest['file']}: the digest says "
                               f"{digest['hash']}, the database's block is {stored} (the history up to that block "
                               "was rewritten, or the database replaced)")
            report.digests += 1
    except Mismatch as exc:
        report.problem = str(exc)
    return report


def _walk(report: Report) -> None:
    events = _events()
    pending = next(events, None)
    prunes = itertools.groupby(_prunes(), key=lambda p: p.block)
    pruned_block, pruned = next(prunes, (None, None))
    previous, position, first_id = ledger.GENESIS_PREVIOUS, 0, 1
    for block in _blocks():
        if block.position != position:
            raise Mismatch(f"block {position} is missing (the next block is {block.position})")
        if block.first_id != first_id or block.last_id < block.first_id - 1:
            raise Mismatch(f"block {position} covers events {block.first_id}-{block.last_id}, "
                           f"not from {first_id} on (its range was changed)")
        if block.previous_hash != previous:
            raise Mismatch(f"block {position} does not chain to block {position - 1} (a block was changed)")
        fields = {k: getattr(block, k) for k in ("position", "first_id", "last_id", "renewals", "renewals_chain",
                                                  "others", "others_chain", "previous_hash", "sealed_at")}
        if ledger.block_hash(**fields) != block.block_hash:
            raise Mismatch(f"block {position} does not match its hash (the block was changed)")
        removed: list = []
        if pruned_block is not None and pruned_block < position:  # a record of no block: inserted
            raise Mismatch(f"a prune record names block {pruned_block}, whose events it does not fit")
        if pruned_block == position:
            removed = list(pruned or ())
            pruned_block, pruned = next(prunes, (None, None))
        chains, counts = [ledger.START, ledger.START], [0, 0]
        records = [[r for r in removed if r.part == p] for p in (0, 1)]
        while pending is not None and pending[0] <= block.last_id:
            row, pending = pending, next(events, None)
            if row[0] < block.first_id:
                raise Mismatch(f"event {row[0]} lies in no block's range (it was inserted)")
            part = ledger.part_of(row[ledger.ACTION + 2], row[ledger.OUTCOME + 2])
            while records[part] and records[part][0].last_id < row[0]:
                chains[part] = _resume(records[part].pop(0), chains[part], counts, part, position)
            chains[part] = ledger.chain(chains[part], row[0], _checked_hash(row))
            counts[part] += 1
            report.events += 1
        for part in (0, 1):
            while records[part]:
                chains[part] = _resume(records[part].pop(0), chains[part], counts, part, position)
        _compare(block, chains, counts)
        previous, position, first_id = block.block_hash, position + 1, block.last_id + 1
        report.blocks += 1
        report.through_block = block.position
    if report.blocks == 0:
        raise Mismatch("the ledger has no genesis block (block 0): it was removed, or never made (migrate)")
    if pruned_block is not None:
        raise Mismatch(f"a prune record names block {pruned_block}, which this database does not have")
    while pending is not None:  # events not sealed yet: each must still match its own hash
        _checked_hash(pending)
        report.unsealed += 1
        pending = next(events, None)


def _resume(record, chain: bytes, counts: list, part: int, position: int) -> bytes:
    """The chain past a prune record: it must start where the chain is."""
    if record.chain_from != chain.hex():
        raise Mismatch(f"block {position}: the prune record of its {PARTS[part]} {record.first_id}-{record.last_id} "
                       "does not continue its chain (events were removed or inserted around it)")
    counts[part] += record.count
    return bytes.fromhex(record.chain_to)


def _compare(block, chains: list, counts: list) -> None:
    sealed = ((block.renewals, block.renewals_chain), (block.others, block.others_chain))
    for part in (0, 1):
        count, chain = sealed[part]
        if counts[part] != count:
            how = "deleted" if counts[part] < count else "inserted"
            raise Mismatch(f"block {block.position} (events {block.first_id}-{block.last_id}) sealed {count} "
                           f"{PARTS[part]}, {counts[part]} are there or were pruned (events were {how})")
        if chains[part].hex() != chain:
            raise Mismatch(f"block {block.position} (events {block.first_id}-{block.last_id}): its {PARTS[part]} "
                           "do not match what was sealed (events were reordered, or replaced)")


def record(report: Report) -> LedgerCheck:
    return LedgerCheck.objects.create(
        started_at=report.started_at, finished_at=clock.now(), ok=report.ok, blocks=report.blocks,
        events=report.events, unsealed=report.unsealed, digests=report.digests,
        through_block=report.through_block, problem=report.problem[:2000])
