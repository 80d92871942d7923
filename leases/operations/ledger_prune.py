"""Retention's deletes as the ledger allows them (leases/operations/retention.py calls them in its
short transactions): only sealed events, each part of a block (successful renewals, the rest) from
its first event on in id order, as far as its events are past their retention; each batch leaves a
LedgerPrune record of what went (the ids, how many, the part's chain before and after them), from
which verify resumes the block's chain. Once a part is gone whole its chain must be the block's:
if not, the history was tampered with, and nothing of that block is pruned (LedgerRefusesPrune)."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import groupby

from django.db import connection
from django.db.models import Max, Sum

from leases.domain import clock, ledger
from leases.models import LedgerBlock, LedgerPrune
from leases.storage import ledger_rows

RENEWAL = "action = 'renew' AND outcome = 'success'"
WHERE = {ledger.RENEWALS: RENEWAL, ledger.OTHERS: f"NOT ({RENEWAL})"}


class LedgerRefusesPrune(Exception):
    """A part of a block whose events do not match what was sealed: kept, for verify to name."""


def _candidates(cursor, part: int, after: int, through: int, limit: int) -> list:
    cursor.execute(f"SELECT {ledger_rows.COLUMNS} FROM {ledger_rows.TABLE} WHERE id > %s AND id <= %s AND "
                   f"{WHERE[part]} ORDER BY id LIMIT %s", [after, through, limit])
    return cursor.fetchall()


def _left_in(cursor, part: int, after: int, block: LedgerBlock) -> bool:
    cursor.execute(f"SELECT 1 FROM {ledger_rows.TABLE} WHERE id > %s AND id <= %s AND {WHERE[part]} LIMIT 1",
                   [after, block.last_id])
    return cursor.fetchone() is not None


def _plan_part(part: int, kept: timedelta, now: datetime, limit: int) -> list[dict]:
    """Up to ``limit`` sealed events of ``part`` older than ``kept``, as each block's share to delete
    and record. Read outside the write transaction: sealed events change only by the pruner, and one
    prunes at a time (the duty lock)."""
    cutoff = ledger.micros(now - kept) or 0
    after = LedgerPrune.objects.filter(part=part).aggregate(last=Max("last_id"))["last"] or 0
    through = LedgerBlock.objects.aggregate(last=Max("last_id"))["last"] or 0
    with connection.cursor() as cursor:
        rows = _candidates(cursor, part, after, through, limit)
        old = []
        for row in rows:  # the prefix past its retention: a part goes from its start on
            if (ledger.micros(row[2]) or 0) >= cutoff:
                break
            old.append(row)
        if not old:
            return []
        blocks = list(LedgerBlock.objects.filter(last_id__gte=old[0][0], first_id__lte=old[-1][0]).order_by("position"))
        return [_share(cursor, part, block, list(rows)) for block, rows in
                groupby(old, key=lambda row: next(b for b in blocks if b.first_id <= row[0] <= b.last_id))]


def _share(cursor, part: int, block: LedgerBlock, rows: list) -> dict:
    before = LedgerPrune.objects.filter(block=block.position, part=part)
    earlier = before.order_by("-last_id").first()
    start = bytes.fromhex(earlier.chain_to) if earlier else ledger.START
    chain = start
    for row in rows:
        chain = ledger.chain(chain, row[0], ledger_rows.hash_of(row))
    if not _left_in(cursor, part, rows[-1][0], block):  # the part goes whole: it must be what was sealed
        count = (before.aggregate(n=Sum("count"))["n"] or 0) + len(rows)
        sealed = (block.renewals, block.renewals_chain) if part == ledger.RENEWALS else (block.others,
                                                                                      block.others_chain)
        if (count, chain.hex()) != sealed:
            raise LedgerRefusesPrune(f"block {block.position}: its events do not match what was sealed; "
                                     "not pruning it (run `manage.py leasehold_ledger verify`)")
    return dict(block=block.position, part=part, ids=[row[0] for row in rows], chain_from=start.hex(),
                chain_to=chain.hex())


def plan(renewals: timedelta | None, events: timedelta | None, now: datetime, limit: int) -> list[dict]:
    """What a batch deletes: successful renewals past ``renewals``, then everything else past
    ``events`` (None: kept), ``limit`` at most, as shares of blocks."""
    shares: list[dict] = []
    for part, kept in ((ledger.RENEWALS, renewals), (ledger.OTHERS, events)):
        planned = sum(len(s["ids"]) for s in shares)
        if kept is not None and planned < limit:
            shares += _plan_part(part, kept, now, limit - planned)
    return shares


def apply(shares: list[dict]) -> int:
    """Delete the planned events and record each share, in the caller's transaction; how many went."""
    with connection.cursor() as cursor:
        for share in shares:
            ids = share["ids"]
            cursor.execute(f"DELETE FROM {ledger_rows.TABLE} WHERE id IN ({', '.join(['%s'] * len(ids))})", ids)
            if cursor.rowcount != len(ids):  # another pruner was at it: none of this batch stands
                raise LedgerRefusesPrune(f"block {share['block']}: events planned for pruning were gone")
    LedgerPrune.objects.bulk_create([
        LedgerPrune(block=s["block"], part=s["part"], first_id=s["ids"][0], last_id=s["ids"][-1], count=len(s["ids"]),
                    chain_from=s["chain_from"], chain_to=s["chain_to"], pruned_at=clock.now()) for s in shares])
    return sum(len(s["ids"]) for s in shares)
