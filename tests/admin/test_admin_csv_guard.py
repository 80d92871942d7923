"""The CSV exports' formula guard (leases/domain/spreadsheet.py) is a rule on
a cell's first character, not a list of characters to skip: a cell starting
with anything invisible (direction marks, a soft hyphen, zero-width spaces,
a byte order mark, any control, format or separator character, a combining
mark, a Hangul filler) or with a formula character, in any width, gets the
quote; a cell starting with a visible letter, digit or other sign is left
as it is. Through the admin's export too."""

from __future__ import annotations

import csv
import io

import pytest

from leases.domain.spreadsheet import defused
from leases.services import lease_break

from .helpers import app

INVISIBLE = ["\u200e", "\u200f", "\u202a", "\u202e", "\u2066", "\u2069", "\u00ad", "\u200b", "\u200c", "\u200d",
             "\u2060", "\u2061", "\u180e", "\ufeff", "\ufff9", "\u034f", "\u0301", "\u115f", "\u3164", "\uffa0",
             "\u00a0", "\u2028", "\u2029", "\u3000", "\x00", "\x1b", "\x7f", "\x85", "\ue000", " ", "\t"]
FORMULAS = ["=1+1", "+cmd", "-1+1", "@SUM(A1)", "|calc", "\uff1d1+1", "\ufe661+1", "\r=1", "\n=1"]


@pytest.mark.parametrize("invisible", INVISIBLE, ids=lambda c: f"U+{ord(c):04X}")
@pytest.mark.parametrize("formula", ["=1+1", "+1", "-1", "@A1", "\uff1dA1"])
def test_an_invisible_character_before_a_formula_does_not_hide_it(invisible, formula):
    for cell in (invisible + formula, invisible * 3 + formula, " " + invisible + formula):
        assert defused(cell) == "'" + cell, ascii(cell)


@pytest.mark.parametrize("invisible", INVISIBLE, ids=lambda c: f"U+{ord(c):04X}")
def test_a_cell_starting_with_an_invisible_character_is_quoted(invisible):
    assert defused(invisible + "plain") == "'" + invisible + "plain"


@pytest.mark.parametrize("cell", FORMULAS)
def test_a_formula_is_quoted(cell):
    assert defused(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["plain", "a=1", "1+1", "\uff21=1", "user:root", "10.1.2.3", "(x)", "Ünïcode",
                                  "日本", "'quoted", "x\u202e=1", ""])
def test_a_visible_start_is_left_alone(cell):
    assert defused(cell) == cell


def test_the_admin_export_quotes_a_reason_hidden_behind_a_direction_mark(superuser_client, estate):
    reason = "\u202e\u200b=HYPERLINK(\"http://evil\")"
    lease_break(ref=estate.ref("leased"), actor=app(), break_period=0, reason=reason)
    response = superuser_client.get("/admin/leases/leaseevent/export.csv", {"action": "break"})
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [row["reason"] for row in rows if row["blob"] == "leased.txt"] == ["'" + reason]


