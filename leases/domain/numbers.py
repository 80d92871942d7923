"""Whole numbers from clients, parsed one strict way for every door. Header values (Azure), JSON
integers (the JSON API) and form values (the admin) come here: ASCII digits with an optional leading
minus -- no "+", no "--15", no "²", no floats or booleans -- and the range is checked before the
number is used for any arithmetic, storage or time conversion. The length is checked before
``int()``, so a huge string costs nothing."""

from __future__ import annotations

import re

WHOLE = re.compile(r"-?[0-9]{1,19}\Z")
BIGINT = 2**63 - 1  # the largest value a database's 64-bit integer column holds


def whole(value: object, *, low: int, high: int) -> int | None:
    """``value`` (text, surrounding whitespace allowed, or an int that is not
    a bool) as an int within ``low``..``high``; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and WHOLE.match(text := value.strip()):
        number = int(text)
    else:
        return None
    return number if low <= number <= high else None
