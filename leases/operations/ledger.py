"""Sealing the history into the ledger's blocks (leases/domain/ledger.py says what is hashed): one
process at a time among every process and instance sharing the database (a duty lock of its own,
leases/operations/duties.py) seals, in blocks of at most ``BLOCK_EVENTS`` events, only events whose
transactions can no longer be in flight, so that no event can later appear inside a sealed range
(``settled_through``; docs/decisions/0041-ledger.md says why this is exact). The lease writes
themselves only hash their own event: nothing here is read or locked by them."""

from __future__ import annotations

import logging
import threading

from django.db import IntegrityError, connection

from leases.domain import clock, ledger
from leases.models import LedgerBlock
from leases.operations import duties
from leases.storage import ledger_rows
from leases.storage.transactions import write_transaction

log = logging.getLogger("leasehold.ledger")

BLOCK_EVENTS = 10_000  # the most events a block seals (a block's read and hashing stay short)
SEAL_EVERY = 2.0  # seconds between the sealer's rounds


def newest_block() -> LedgerBlock | None:
    return LedgerBlock.objects.order_by("-position").first()


def block_over(rows, *, position: int, first_id: int, last_id: int, previous_hash: str, sealed_at) -> LedgerBlock:
    """The block sealing ``rows`` (from ``ledger_rows.event_rows``), ids ``first_id`` to ``last_id``."""
    fields = dict(position=position, first_id=first_id, last_id=last_id, previous_hash=previous_hash,
                  sealed_at=sealed_at, **ledger_rows.sealed_fields(rows))
    newest = fields.pop("newest_at")
    return LedgerBlock(**fields, newest_at=newest, block_hash=ledger.block_hash(**fields))


def seal(*, limit: int = BLOCK_EVENTS, most_blocks: int | None = None) -> int:
    """Seal what has settled, a block of at most ``limit`` events at a time; the number of blocks
    sealed. Another sealer that got there first ends the round (the block's position is its key)."""
    through = ledger_rows.settled_through(connection)
    sealed = 0
    while through is not None and (most_blocks is None or sealed < most_blocks):
        last = newest_block()
        if last is None:  # the migration makes it; a database emptied since (tests' flush) starts anew
            log.warning("ledger: no genesis block; sealing every event there is as block 0")
            try:
                write_transaction(lambda: ledger_rows.genesis(connection, LedgerBlock, clock.now()))
            except IntegrityError:
                break
            sealed += 1
            continue
        if through <= last.last_id:
            break
        with connection.cursor() as cursor:  # events are never changed: no write lock needed to read them
            rows = ledger_rows.event_rows(cursor, last.last_id, through, limit)
        if not rows:
            break
        end = through if len(rows) < limit else rows[-1][0]
        block = block_over(rows, position=last.position + 1, first_id=last.last_id + 1, last_id=end,
                           previous_hash=last.block_hash, sealed_at=clock.now())
        try:
            write_transaction(lambda: block.save(force_insert=True))
        except IntegrityError:
            log.info("ledger: block %d was sealed by another process", block.position)
            break
        sealed += 1
    return sealed


def digest() -> dict:
    """The newest sealed block, as an auditor keeps it."""
    first, last = (LedgerBlock.objects.filter(position=0).values_list("block_hash", flat=True).first(),
                   newest_block())
    if last is None or first is None:
        raise RuntimeError("the ledger has no blocks: run `manage.py migrate`")
    return ledger.digest(position=last.position, block_hash=last.block_hash, sealed_at=last.sealed_at,
                         last_id=last.last_id, genesis=first)


class Sealer(duties.DutyThread):
    """Seals every ``every`` seconds in whichever process holds the sealer's duty lock."""

    label = "ledger: sealing"
    logger = log

    def __init__(self, every: float = SEAL_EVERY):
        super().__init__(name="leasehold-ledger", idle=every,
                         lock=duties.DutyLock(key=duties.SEAL_LOCK_KEY, duty="ledger"))

    def round(self) -> None:
        while seal(most_blocks=10) == 10 and not self.stopping.is_set():
            pass


_sealer: Sealer | None = None
_sealer_lock = threading.Lock()


def start_sealer() -> Sealer:
    global _sealer
    with _sealer_lock:
        if _sealer is None or not _sealer.is_alive():
            _sealer = Sealer()
            _sealer.start()
    return _sealer


def stop_sealer() -> None:
    """Stop this process's sealer, if it runs (a server's shutdown: its thread must not outlive it)."""
    global _sealer
    with _sealer_lock:
        if _sealer is not None:
            _sealer.stop()
            _sealer = None
