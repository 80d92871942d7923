"""Everything the Azure door reads from a request, checked before use (header values, query
parameters, metadata headers, the body and its length and MD5), so that a malformed input is a 400
(or 411/413/416) Azure error here, never a 500 further in. WSGI hands header names upper-cased with
``-`` folded into ``_`` (``x-ms-meta-Build_Id`` arrives as ``HTTP_X_MS_META_BUILD_ID``) and decodes
header bytes as Latin-1; what a name looked like on the wire is read in this module only
(``header_name`` for the names errors show), besides metadata names and the string-to-sign, which
both doors share (leases/domain/client_headers.py, leases/auth/sharedkey.py)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from datetime import datetime
from xml.etree import ElementTree

from django.core.exceptions import DisallowedHost, RequestDataTooBig, TooManyFieldsSent

from leases.domain import names
from leases.domain.errors import LeaseholdError
from leases.azure import xml_input

# A header value the door accepts: printable ASCII and tab. Anything else
# arrived as bytes WSGI decoded as Latin-1 (or a server dropped), so its
# meaning is unknown: refused, not guessed (an If-Match with typographic
# quotes must not silently match nothing).
HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*\Z")
# Headers an empty value cannot be meant for. A WSGI server may hand a header
# whose value is not visible ASCII (an If-Match with typographic quotes) over
# as an empty string, so for these an empty value is refused: dropping it
# would turn "only if it matches" into "always".
# (Metadata values may be empty; see README for what that costs.)
NOT_EMPTY = {f"HTTP_{name}": name.lower().replace("_", "-") for name in (
    "IF_MATCH", "IF_NONE_MATCH", "IF_MODIFIED_SINCE", "IF_UNMODIFIED_SINCE", "RANGE", "X_MS_RANGE",
    "X_MS_LEASE_ID", "X_MS_PROPOSED_LEASE_ID", "X_MS_LEASE_ACTION", "X_MS_LEASE_DURATION",
    "X_MS_LEASE_BREAK_PERIOD", "CONTENT_MD5", "X_MS_BLOB_CONTENT_MD5", "X_MS_DELETE_SNAPSHOTS",
    "X_MS_BLOB_TYPE", "X_MS_VERSION")}

# Query parameters with a shape of their own; any other is only checked for
# repetition and for characters XML cannot echo.
DIGITS = re.compile(r"[0-9]{1,9}\Z")
SNAPSHOT = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.[0-9]{1,7})?Z\Z")
# include= values Azure knows; the ones Leasehold does not produce
# (copy, tags, versions, ...) are accepted and have nothing to add.
LIST_BLOBS_INCLUDE = frozenset({"snapshots", "metadata", "uncommittedblobs", "copy", "deleted", "tags",
                                "versions", "deletedwithversions", "immutabilitypolicy", "legalhold",
                                "permissions"})
LIST_CONTAINERS_INCLUDE = frozenset({"metadata", "deleted", "system"})

RANGE = re.compile(r"bytes=([0-9]+)-([0-9]*)\Z")
# Digits beyond this many are a number larger than any blob: clamped, not
# handed to int() (which refuses more than 4,300 digits).
RANGE_DIGITS = 18


def header_name(environ_key: str) -> str:
    """The header's name as far as WSGI lets us know it."""
    if environ_key in ("CONTENT_LENGTH", "CONTENT_TYPE"):
        return environ_key.lower().replace("_", "-")
    return environ_key[5:].lower().replace("_", "-")


def check_header_values(environ: dict) -> None:
    for key, value in environ.items():
        if not (key[:5] == "HTTP_" or key in ("CONTENT_LENGTH", "CONTENT_TYPE")):
            continue
        # isascii/isprintable first: C-speed for the usual value (every request passes here).
        if not (value.isascii() and value.isprintable()) and not HEADER_VALUE.match(value):
            shown = "".join(c if " " <= c <= "~" else "?" for c in value[:200])
            raise LeaseholdError("InvalidHeaderValue", field=header_name(key), value=shown)
        if (not value or value.isspace()) and key in NOT_EMPTY:
            raise LeaseholdError("InvalidHeaderValue", field=NOT_EMPTY[key], value=value,
                                 message="The value for one of the HTTP headers is not in the correct format "
                                         "(empty, or not visible ASCII).")


# ------------------------------------------------------------------ query

def query_error(name: str, value: str, message: str | None = None) -> LeaseholdError:
    """400 InvalidQueryParameterValue naming the parameter as Azure does
    (QueryParameterName/Value, whatever the parameter's name)."""
    return LeaseholdError("InvalidQueryParameterValue", field=name[:64], value=value[:200], message=message,
                          detail={"query": True})


def check_query(request) -> None:
    """No parameter twice (``?comp=lease&comp=metadata`` is not a choice to
    make for the client), no value XML cannot echo, and the shaped ones
    well-formed."""
    if not request.META.get("QUERY_STRING"):
        return
    try:
        lists = list(request.GET.lists())
    except TooManyFieldsSent:
        raise LeaseholdError("InvalidQueryParameterValue", message="Too many query parameters.",
                             detail={"query": True}) from None
    for name, values in lists:
        if len(values) > 1:
            raise query_error(name, ",".join(values), f"The query parameter {name[:64]} is given more than once.")
        value = values[0]
        if not names.xml_safe(name) or not names.xml_safe(value):
            raise query_error(name, value, "A query parameter holds characters XML cannot carry.")
        if name == "timeout" and not DIGITS.match(value):
            raise query_error("timeout", value)
        if name == "snapshot" and value and not _snapshot_time(value):
            raise query_error("snapshot", value)


def _snapshot_time(value: str) -> bool:
    match = SNAPSHOT.match(value)
    if not match:
        return False
    try:
        datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return False
    return True


def int_query(request, name: str, default: int, *, low: int, high: int) -> int:
    raw = request.GET.get(name)
    if raw is None:
        return default
    # ASCII digits only: str.isdigit() accepts "²" and "①", which int() refuses.
    if not DIGITS.match(raw) or not low <= int(raw) <= high:
        raise query_error(name, raw)
    return int(raw)


def include_set(request, allowed: frozenset) -> set[str]:
    raw = request.GET.get("include")
    if raw is None or raw == "":
        return set()
    values = {v.strip().lower() for v in raw.split(",")}
    if not values <= allowed:
        raise query_error("include", raw)
    return values


def endpoint(request, account: str) -> str:
    """The ServiceEndpoint of a listing. It names the Host the client used,
    so that Host must be one ALLOWED_HOSTS lists (else 400, not a 500)."""
    try:
        return request.build_absolute_uri(f"/{account}/")
    except DisallowedHost:
        host = getattr(request, "META", {}).get("HTTP_HOST", "")
        raise LeaseholdError("InvalidHeaderValue", field="Host", value=host[:200],
                             message="The Host header names a host this server does not serve.") from None


def parse_range(value: str, size: int) -> tuple[int, int]:
    match = RANGE.match(value.strip())
    if not match:
        raise LeaseholdError("InvalidHeaderValue", field="range", value=value[:200])
    start = _bounded(match.group(1))
    end = _bounded(match.group(2)) if match.group(2) else size - 1
    if start >= size or end < start:
        raise LeaseholdError("InvalidRange")
    return start, min(end, size - 1)


def _bounded(digits: str) -> int:
    digits = digits.lstrip("0") or "0"
    return 10 ** RANGE_DIGITS if len(digits) > RANGE_DIGITS else int(digits)


# ------------------------------------------------------------------ body

def read_body(request) -> bytes:
    """The whole body Content-Length announced, or an Azure refusal: no
    length (or a chunked body) is 411 MissingContentLengthHeader, and a body
    that ends early (the client died mid-upload) is refused, so that
    nothing is stored and nothing replaced."""
    meta = request.META
    if meta.get("HTTP_TRANSFER_ENCODING") or "CONTENT_LENGTH" not in meta or meta["CONTENT_LENGTH"] == "":
        raise LeaseholdError("MissingContentLengthHeader", field="Content-Length")
    announced = meta["CONTENT_LENGTH"]
    if not re.fullmatch(r"[0-9]{1,18}", announced):
        raise LeaseholdError("InvalidHeaderValue", field="Content-Length", value=announced[:200])
    try:
        body = request.body
    except RequestDataTooBig:
        raise LeaseholdError("RequestBodyTooLarge") from None
    except OSError:  # the connection broke while the server read
        raise LeaseholdError("IncompleteBody") from None
    if len(body) != int(announced):
        raise LeaseholdError("IncompleteBody")
    return body


def check_md5(body: bytes, meta: dict) -> None:
    """Content-MD5 (the body's transactional hash) and x-ms-blob-content-md5
    (the blob's hash; for Put Blob the same bytes) must match the body."""
    digest = None
    for key, field in (("HTTP_CONTENT_MD5", "Content-MD5"), ("HTTP_X_MS_BLOB_CONTENT_MD5", "x-ms-blob-content-md5")):
        value = meta.get(key)
        if not value:
            continue
        try:
            given = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            given = b""
        if len(given) != 16:
            raise LeaseholdError("InvalidMd5", field=field, value=value[:200])
        digest = digest or hashlib.md5(body).digest()
        if given != digest:
            raise LeaseholdError("Md5Mismatch", field=field, value=value[:200], detail={
                "UserSpecifiedMd5": value, "ServerCalculatedMd5": base64.b64encode(digest).decode()})


def xml_root(body: bytes, tag: str) -> ElementTree.Element:
    """A request's XML body whose root element is ``tag``; anything else,
    a document type (entities to expand) in whatever encoding included, is
    400 InvalidXmlDocument saying why (leases/azure/xml_input.py)."""
    return xml_input.tree([body], tag)
