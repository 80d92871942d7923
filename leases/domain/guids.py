"""Lease ids as .NET's ``Guid.Parse`` reads them (Azure is a .NET service and its documentation says
"any valid GUID string format"), minus the ``X`` format (``{0x...,0x...,{0x...}}``), which no client
sends: ``N`` (32 hex digits), ``D`` (hyphenated 8-4-4-4-12), ``B`` (``D`` in braces) and ``P``
(``D`` in parentheses), hex digits in either case, white space around the value ignored as .NET
ignores it. Python's ``uuid.UUID`` alone is laxer (``urn:uuid:`` prefixes, hyphens anywhere, braces
around ``N``), so the spelling is checked here first."""

from __future__ import annotations

import os
import re
import time
import uuid

from leases.domain import machine
from leases.domain.errors import LeaseholdError

_D = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
SPELLING = re.compile(rf"[ \t]*(?:[0-9A-Fa-f]{{32}}|{_D}|\{{{_D}\}}|\({_D}\))[ \t]*\Z")


def parse(value: str | None, field: str, *, noun: str = machine.BLOB) -> uuid.UUID | None:
    if value is None:
        return None
    if not isinstance(value, str) or not SPELLING.match(value):
        raise LeaseholdError("InvalidHeaderValue", noun=noun, field=field, value=str(value)[:200])
    return machine.parse_guid(value, field, noun=noun)


def request_id() -> str:
    """A new request id (x-ms-request-id, the history's request_id): a GUID in
    the ``D`` format, UUID version 7 (RFC 9562): the Unix time in milliseconds,
    then 74 random bits. Ids made close in time sort close together, so the
    history's request id index takes a batch's events on one page, where
    random GUIDs put each on a page of its own (docs/decisions/0037)."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits, 74 used
    value = ((ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64
             | 0b10 << 62 | rand & 0x3FFF_FFFF_FFFF_FFFF)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
