"""Text cells of a CSV export that a spreadsheet would run as a formula (OWASP's CSV injection):
quoted with a leading ``'``. A spreadsheet skips leading spaces before a formula's ``=`` and reads
the full-width forms (``＝``, ``＋``, ``－``, ``＠``) as the ASCII ones, so a cell is looked at after
its leading white space (and the invisible characters that count as none), its first character in
NFKC form. Cells starting with a tab, a carriage return or a line feed are quoted too. Client
request ids, user agents, reasons and names come from clients."""

from __future__ import annotations

import unicodedata

FORMULA_START = frozenset("=+-@|")
CONTROL_START = frozenset("\t\r\n")
INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff"  # zero-width characters, which str.isspace() does not count


def defused(value: str) -> str:
    """``value``, or ``'value`` if a spreadsheet would run it."""
    if not value:
        return value
    if value[0] in CONTROL_START:
        return "'" + value
    stripped = value.lstrip().lstrip(INVISIBLE).lstrip()
    if stripped and unicodedata.normalize("NFKC", stripped[0])[:1] in FORMULA_START:
        return "'" + value
    return value
