"""Metadata as Azure holds it, the one home of its rules for every door (Azure headers, JSON API,
services): names are C# identifiers (ASCII letters, digits and ``_``, not starting with a digit; C#
keywords are not refused, as Azure does not refuse them), and two may not differ only in case (Azure
compares them ignoring case); values travel as HTTP header values on the Azure door, so they are
printable ASCII (a tab inside is allowed; HTTP would trim one at an end); all names and values
together are at most 8 KiB (Azure's limit), more is 400 MetadataTooLarge, where Azure answers the
same."""

from __future__ import annotations

import re
from collections.abc import Mapping

from leases.domain.errors import LeaseholdError

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
VALUE = re.compile(r"[\x20-\x7e\t]*\Z")
MAX_BYTES = 8 * 1024


def invalid(reason: str) -> LeaseholdError:
    return LeaseholdError("InvalidMetadata", detail={"reason": reason})


def validate(pairs: Mapping | None) -> dict:
    """The pairs as given (a plain dict), or the Azure refusal."""
    if pairs is None:
        return {}
    if not isinstance(pairs, Mapping):
        raise invalid("Metadata must be name-value pairs.")
    seen: set[str] = set()
    total = 0
    for name, value in pairs.items():
        if name == "":
            raise LeaseholdError("EmptyMetadataKey")
        if not isinstance(name, str) or not NAME.match(name):
            raise invalid(f"Metadata name {name!r} is not a C# identifier.")
        if not isinstance(value, str) or not VALUE.match(value):
            raise invalid(f"The value of metadata {name!r} is not printable ASCII.")
        folded = name.lower()
        if folded in seen:
            raise invalid(f"Metadata name {name!r} is given twice (names ignore case).")
        seen.add(folded)
        total += len(name) + len(value)
    if total > MAX_BYTES:
        raise LeaseholdError("MetadataTooLarge")
    return dict(pairs)
