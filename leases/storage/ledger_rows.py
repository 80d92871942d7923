"""The history's rows as the ledger reads them (leases/operations/ledger.py, and migration 0016 for
the genesis): in id order, a chunk at a time, and the id up to which every event that will ever
exist is committed (``settled_through``; docs/decisions/0041-ledger.md says why it is exact)."""

from __future__ import annotations

import time
from datetime import timedelta

from engines import postgres
from leases.domain import ledger
from leases.models import LeaseEvent

TABLE = LeaseEvent._meta.db_table
COLUMNS = ", ".join(("id", "row_hash", *ledger.HASHED))
# On SQLite the times are read as the text stored ("|| ''" hides the column's declared type from the
# driver's datetime converter), which ledger.micros reads straight: half of verify's time was the
# converter making datetimes that micros took apart again.
TEXT_COLUMNS = ", ".join(f"({c} || '')" if i in ledger.TIMES else c for i, c in enumerate(ledger.HASHED))
SQLITE_COLUMNS = f"id, row_hash, {TEXT_COLUMNS}"


def columns(conn) -> str:
    """The columns ``event_rows`` reads, for ``conn``'s database."""
    return COLUMNS if postgres.in_use(conn) else SQLITE_COLUMNS
CHUNK = 10_000
SETTLE_WAIT = 5.0  # the longest ``settled_through`` waits for the transactions in flight to end


def event_rows(cursor, after: int, through: int, limit: int) -> list:
    """(id, stored hash, HASHED columns...) of the events after ``after`` up to ``through``, in id order."""
    cursor.execute(f"SELECT {columns(cursor.db)} FROM {TABLE} WHERE id > %s AND id <= %s ORDER BY id LIMIT %s",
                   [after, through, limit])
    return cursor.fetchall()


def paged_rows(conn, after: int, through: int, chunk: int = CHUNK):
    """Every event after ``after`` up to ``through``, as ``event_rows`` gives them, a chunk at a time."""
    while True:
        with conn.cursor() as cursor:
            rows = event_rows(cursor, after, through, chunk)
        yield from rows
        if len(rows) < chunk:
            return
        after = rows[-1][0]


def hash_of(row) -> str:
    """An event row's hash: the one stored with it, or for an event written without one (before the
    ledger, or by older code during an upgrade), the hash of its content."""
    return row[1] or ledger.event_hash(row[2:])


def sealed_fields(rows) -> dict:
    """A block's counts and chains over ``rows`` (from ``event_rows``), and its newest event's time."""
    chains, counts, newest = [ledger.START, ledger.START], [0, 0], None
    action, outcome = ledger.ACTION + 2, ledger.OUTCOME + 2
    for row in rows:
        part = ledger.part_of(row[action], row[outcome])
        chains[part] = ledger.chain(chains[part], row[0], hash_of(row))
        counts[part] += 1
        when = ledger.micros(row[2]) or 0
        newest = when if newest is None or when > newest else newest
    return dict(renewals=counts[0], renewals_chain=chains[0].hex(), others=counts[1], others_chain=chains[1].hex(),
                newest_at=None if newest is None else ledger.EPOCH + timedelta(microseconds=newest))


def settled_through(conn) -> int | None:
    """The highest event id such that every event with an id up to it that will ever exist is
    committed now (None: none settled in time). SQLite has one writer, whose uncommitted events have
    ids above every committed one. On PostgreSQL a sequence hands out ids before commit: read the
    sequence, then wait for every transaction that held the table's insert lock then (an inserter
    takes it before it draws an id and keeps it to its end) to end."""
    with conn.cursor() as cursor:
        if not postgres.in_use(conn):
            cursor.execute(f"SELECT coalesce(max(id), 0) FROM {TABLE}")
            return cursor.fetchone()[0]
        cursor.execute(f"SELECT pg_get_serial_sequence('{TABLE}', 'id')")
        sequence = cursor.fetchone()[0]
        cursor.execute(f"SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM {sequence}")
        drawn = cursor.fetchone()[0]
        cursor.execute("SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks "
                       f"WHERE locktype = 'relation' AND relation = '{TABLE}'::regclass "
                       "AND mode = 'RowExclusiveLock' AND pid <> pg_backend_pid()")
        inserting = cursor.fetchone()[0]
        deadline = time.monotonic() + SETTLE_WAIT
        while inserting:
            cursor.execute("SELECT coalesce(array_agg(virtualxid), '{}') FROM pg_locks "
                           "WHERE locktype = 'virtualxid' AND virtualxid = ANY(%s)", [inserting])
            inserting = cursor.fetchone()[0]
            if inserting and time.monotonic() > deadline:
                return None
            if inserting:
                time.sleep(0.005)
        return drawn


def genesis(conn, model, sealed_at):
    """Block 0 (``model``: LedgerBlock, or the migration's) over every event there is."""
    through = settled_through(conn) or 0
    fields = dict(position=0, first_id=1, last_id=through, previous_hash=ledger.GENESIS_PREVIOUS, sealed_at=sealed_at,
                  **sealed_fields(paged_rows(conn, 0, through)))
    newest = fields.pop("newest_at")
    block = model(**fields, newest_at=newest, block_hash=ledger.block_hash(**fields))
    block.save(using=conn.alias, force_insert=True)
    return block
