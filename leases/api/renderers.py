"""CSV and NDJSON exports of the lease history. Content negotiation (``Accept`` or ``?format=``)
picks one of these; the view then streams rows through it, so an export of any size is never held in
memory. Both write the same columns with the same value formatting as the JSON list (ISO 8601 times,
hyphenated lease ids)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from datetime import datetime
from uuid import UUID

from django.utils import timezone
from rest_framework.renderers import BaseRenderer

from leases.domain import spreadsheet


def plain(value):
    if isinstance(value, datetime):
        text = timezone.localtime(value).isoformat()  # as DRF's DateTimeField renders it
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    if isinstance(value, UUID):
        return str(value)
    return value


class _Line:
    """A file-like object for csv.writer that hands each line back."""

    def write(self, line: str) -> str:
        return line


class CsvRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    # Spreadsheets run some cells as formulas; actor, user agent and reason
    # come from clients, so such cells are quoted with ' (leases/domain/spreadsheet.py).

    def stream(self, columns: list[str], rows: Iterable[tuple]) -> Iterator[str]:
        writer = csv.writer(_Line())
        yield writer.writerow(columns)
        for row in rows:
            yield writer.writerow([self._cell(plain(v)) for v in row])

    def _cell(self, value):
        if isinstance(value, str):
            return spreadsheet.defused(value)
        return "" if value is None else value


class NdjsonRenderer(BaseRenderer):
    media_type = "application/x-ndjson"
    format = "ndjson"
    charset = "utf-8"

    def stream(self, columns: list[str], rows: Iterable[tuple]) -> Iterator[str]:
        for row in rows:
            yield json.dumps({c: plain(v) for c, v in zip(columns, row, strict=True)}) + "\n"
