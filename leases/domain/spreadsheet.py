"""Text cells of a CSV export that a spreadsheet would run as a formula (OWASP's CSV injection):
quoted with a leading ``'``. A rule on what a cell may start with, not a list of characters to skip:
a cell is left as it is only if it starts with a visible character that is not a formula's start.
Anything invisible in first place (a control, format or separator character, a combining mark, a
space, a Hangul filler: what a spreadsheet may skip or a reader cannot see) gets the quote, and so
does a formula character (``= + - @ |``, a tab, a carriage return, a line feed) in first place,
compared in its NFKC form (a spreadsheet reads the full-width ``＝`` as ``=``). Client request ids,
user agents, reasons and names come from clients."""

from __future__ import annotations

import unicodedata

FORMULA_START = frozenset("=+-@|\t\r\n")
# Letters (category Lo) that render as nothing: Unicode's default-ignorable code points outside C*, M*, Z*.
INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")


def _invisible(char: str) -> bool:
    """A control, format, surrogate, private-use or unassigned character, a
    combining mark, any space or separator, or an invisible letter."""
    return unicodedata.category(char)[0] in "CMZ" or char in INVISIBLE_LETTERS


def defused(value: str) -> str:
    """``value``, or ``'value`` if a spreadsheet could run it."""
    if not value:
        return value
    first = value[0]
    if _invisible(first) or unicodedata.normalize("NFKC", first)[:1] in FORMULA_START:
        return "'" + value
    return value
