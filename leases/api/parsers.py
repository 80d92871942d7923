"""JSON request bodies, bounded and storable. DRF before 3.16 hands parsers the raw request stream,
which bypasses Django's DATA_UPLOAD_MAX_MEMORY_SIZE check, so the bound is applied here too (later
DRF reads request.body, and the exception handler maps Django's RequestDataTooBig to the same 413).
Strings must be storable, as the Azure endpoint's header-borne values always are: JSON can spell a
lone surrogate (``"\\ud800"``), which cannot be encoded to UTF-8, and a NUL, which PostgreSQL text
refuses."""

from __future__ import annotations

import json

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from leases.domain.errors import LeaseholdError


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = stream.read(limit + 1)  # DRF calls parsers only for a non-empty body
        if len(body) > limit:
            raise LeaseholdError("RequestBodyTooLarge")
        try:
            data = json.loads(body, parse_constant=_refuse_constant)
        except ValueError as exc:  # includes UnicodeDecodeError
            raise ParseError(f"JSON parse error - {exc}") from None
        except RecursionError:  # nesting deeper than the parser's stack
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.") from None
        if _depth_exceeds(data, MAX_DEPTH):
            raise ParseError(f"JSON nested deeper than {MAX_DEPTH} levels.")
        for text in _strings(data):
            if "\x00" in text or not _encodable(text):
                raise ParseError("JSON strings must be valid Unicode without NUL characters.")
        return data


# No request body of this API nests more than three levels; the bound keeps
# recursive walks (ours, DRF's, the serializers') far from Python's stack limit.
MAX_DEPTH = 32


def _depth_exceeds(value, limit: int) -> bool:
    """Iterative, so a deep document cannot exhaust the stack here."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")  # NaN, Infinity: as DRF's STRICT_JSON


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
