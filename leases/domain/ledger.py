"""The ledger's hashes, pure: what an event's hash covers (the columns of HASHED, as ASCII JSON,
times as microseconds since the epoch), how a block chains its events (per part, in id order:
SHA-256 of chain, id, event hash) and what a block's hash covers; docs/guide/auditing.md spells the
format out so that an auditor can recompute every one from the rows alone, and
docs/decisions/0041-ledger.md says why this shape."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone

HASHED = ("occurred_at", "action", "outcome", "resource_type", "account", "container", "blob",
          "lease_fingerprint", "proposed_lease_fingerprint", "duration", "break_period", "lease_time",
          "expires_at", "state_before", "state_after", "generation", "status_code", "error_code", "actor",
          "via", "reason", "request_id", "client_request_id", "remote_addr", "user_agent")
TIMES = (HASHED.index("occurred_at"), HASHED.index("expires_at"))
ACTION, OUTCOME = HASHED.index("action"), HASHED.index("outcome")
NOT_HASHED = ("id", "row_hash")  # every other column of the history is in HASHED (tests hold it so)

RENEWALS, OTHERS = 0, 1  # a block's two parts, as retention prunes them
START = bytes(32)
GENESIS_PREVIOUS = "0" * 64
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)
_dumps = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def micros(value) -> int | None:
    """A time as whole microseconds since the epoch: from a datetime (naive means UTC) or the text
    SQLite stores ("YYYY-MM-DD HH:MM:SS[.ffffff]", UTC)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return (value - (_EPOCH_NAIVE if value.tzinfo is None else EPOCH)) // _MICROSECOND


def event_hash(values) -> str:
    """The hex hash of an event from its HASHED columns' values, in that order (as written or as read
    back from either database)."""
    row = list(values)
    for i in TIMES:
        row[i] = micros(row[i])
    return hashlib.sha256(_dumps(["leasehold-event-v1", *row]).encode()).hexdigest()


def part_of(action, outcome) -> int:
    return RENEWALS if action == "renew" and outcome == "success" else OTHERS


def chain(state: bytes, event_id: int, hex_hash: str) -> bytes:
    """The chain after one more event."""
    return hashlib.sha256(state + event_id.to_bytes(8, "big") + bytes.fromhex(hex_hash)).digest()


def block_hash(*, position: int, first_id: int, last_id: int, renewals: int, renewals_chain: str, others: int,
               others_chain: str, previous_hash: str, sealed_at) -> str:
    fields = ["leasehold-block-v1", position, first_id, last_id, renewals, renewals_chain, others, others_chain,
              previous_hash, micros(sealed_at)]
    return hashlib.sha256(_dumps(fields).encode()).hexdigest()


def digest(*, position: int, block_hash: str, sealed_at: datetime, last_id: int, genesis: str) -> dict:
    """What an auditor keeps: the newest sealed block, and the ledger it belongs to."""
    return {"ledger": "leasehold", "block": position, "hash": block_hash,
            "sealed_at": sealed_at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z"),
            "events_through": last_id, "genesis": genesis}


class BadDigest(ValueError):
    """A digest that cannot be read as one."""


def parse_digest(text: str) -> dict:
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise BadDigest(f"not JSON ({exc})") from None
    if not isinstance(found, dict):
        raise BadDigest("not a JSON object")
    position, hex_hash = found.get("block"), found.get("hash")
    if type(position) is not int or position < 0:
        raise BadDigest('no block position ("block": a whole number)')
    if not isinstance(hex_hash, str) or len(hex_hash) != 64 or any(c not in "0123456789abcdef" for c in hex_hash):
        raise BadDigest('no block hash ("hash": 64 lowercase hex digits)')
    return found
