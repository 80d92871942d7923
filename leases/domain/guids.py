"""Lease ids as .NET's ``Guid.Parse`` reads them (Azure is a .NET service and its documentation says
"any valid GUID string format"), minus the ``X`` format (``{0x...,0x...,{0x...}}``), which no client
sends: ``N`` (32 hex digits), ``D`` (hyphenated 8-4-4-4-12), ``B`` (``D`` in braces) and ``P``
(``D`` in parentheses), hex digits in either case, white space around the value ignored as .NET
ignores it. Python's ``uuid.UUID`` alone is laxer (``urn:uuid:`` prefixes, hyphens anywhere, braces
around ``N``), so the spelling is checked here first."""

from __future__ import annotations

import re
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
