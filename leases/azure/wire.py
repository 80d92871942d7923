"""Azure wire shapes: response headers, XML bodies, error envelopes."""

from __future__ import annotations

import functools
import math
import re
from datetime import datetime, timezone
from email.utils import formatdate
from urllib.parse import quote
from xml.sax.saxutils import escape

from django.http import HttpResponse

from leases.domain import machine, names
from leases.domain.errors import LeaseholdError

DEFAULT_VERSION = "2025-11-05"
VERSION_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")  # ASCII digits, no trailing newline
OLDEST_VERSION = "2012-02-12"
# Versions before OLDEST_VERSION that are answered with their own lease
# semantics (machine.py, legacy=True): the two whose SharedKey string-to-sign
# is the one auth.py checks. 2009-07-17 and older sign differently, and any
# other date before 2012-02-12 was never a service version: both stay 400.
LEGACY_VERSIONS = frozenset({"2009-09-19", "2011-08-18"})
XML_DECLARATION = '\ufeff<?xml version="1.0" encoding="utf-8"?>'

# Adapter-neutral input names (errors.LeaseholdError.field) -> Azure headers.
HEADER_NAMES = {
    "action": "x-ms-lease-action",
    "lease_id": "x-ms-lease-id",
    "proposed_lease_id": "x-ms-proposed-lease-id",
    "duration": "x-ms-lease-duration",
    "break_period": "x-ms-lease-break-period",
    "wait": "x-leasehold-wait",  # a Leasehold extension (leases/domain/waiting.py)
    "delete_snapshots": "x-ms-delete-snapshots",
    "blob_type": "x-ms-blob-type",
    "version": "x-ms-version",
    "if_modified_since": "If-Modified-Since",
    "if_unmodified_since": "If-Unmodified-Since",
    "range": "x-ms-range",
}
QUERY_FIELDS = {"snapshot", "comp", "restype", "maxresults", "include", "timeout"}


def http_date(dt: datetime) -> str:
    """RFC 7231 date (whole seconds, GMT), as email.utils.format_datetime
    gives it; every response carries one or two, so they are cached."""
    return _http_date(math.floor(dt.timestamp()))


@functools.lru_cache(maxsize=4096)
def _http_date(seconds: int) -> str:
    return formatdate(seconds, usegmt=True)


def error_time(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond:06d}0Z"


# What an error body cannot carry: names.NOT_XML but the line feed, which
# an AuthenticationErrorDetail's string to sign holds, as on Azure.
NOT_XML_TEXT = re.compile("[\x00-\x09\x0b-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` escaped for XML, with what XML 1.0 cannot carry (a request's
    own bytes echoed in an error: NUL, lone surrogates...) replaced by
    U+FFFD, so that every error body parses."""
    if not names.xml_safe(text):
        text = NOT_XML_TEXT.sub("\ufffd", text)
    return escape(text)


class Bodiless(HttpResponse):
    """An answer without a body, sent as Azure sends it: without a Content-Type, where Django's
    HttpResponse would add text/html (the legacy Python SDK reads that onto a container's
    properties, which have no content settings, and fails)."""

    def __init__(self, status: int = 200):
        super().__init__(status=status)
        del self["Content-Type"]


def error_document(err: LeaseholdError, *, request_id: str, now: datetime) -> str:
    """The XML error body of ``err``, as Azure sends it: the one shape of this door's errors."""
    parts = [f"<Error><Code>{err.code}</Code><Message>{xml_text(err.message)}\n"
             f"RequestId:{request_id}\nTime:{error_time(now)}</Message>"]
    if err.field in QUERY_FIELDS or (err.field and err.detail.get("query")):
        parts.append(f"<QueryParameterName>{xml_text(err.field)}</QueryParameterName>"
                     f"<QueryParameterValue>{xml_text(err.value or '')}</QueryParameterValue>")
    elif err.field:
        parts.append(f"<HeaderName>{xml_text(HEADER_NAMES.get(err.field, err.field))}</HeaderName>")
        if err.value is not None:
            parts.append(f"<HeaderValue>{xml_text(err.value)}</HeaderValue>")
    for key, value in err.detail.items():
        if key[:1].isupper():  # Azure-shaped extra elements only
            parts.append(f"<{key}>{xml_text(str(value))}</{key}>")
    parts.append("</Error>")
    return XML_DECLARATION + "".join(parts)


def error_response(err: LeaseholdError, *, request_id: str, now: datetime, head: bool) -> HttpResponse:
    if head or err.status == 304:
        response = Bodiless(status=err.status)
    else:
        response = HttpResponse(error_document(err, request_id=request_id, now=now), status=err.status,
                                content_type="application/xml")
    response["x-ms-error-code"] = err.code
    return response


def lease_headers(response: HttpResponse, obj, now: datetime, *, legacy: bool = False,
                  noun: str = machine.BLOB) -> None:
    """x-ms-lease-status/state/duration as of ``now``, and the generation.
    ``legacy`` (x-ms-version before 2012-02-12): x-ms-lease-status only, and
    only for blobs; lease state, duration and container leases came later."""
    state = obj.effective_lease_state(now)
    if legacy:
        if noun == machine.BLOB:
            response["x-ms-lease-status"] = machine.lease_status(state)
        response["Leasehold-Generation"] = str(obj.lease_generation)
        return
    response["x-ms-lease-status"] = machine.lease_status(state)
    response["x-ms-lease-state"] = state
    kind = machine.duration_type(obj.lease_record, state)
    if kind:
        response["x-ms-lease-duration"] = kind
    response["Leasehold-Generation"] = str(obj.lease_generation)


def lease_xml(obj, now: datetime) -> str:
    state = obj.effective_lease_state(now)
    xml = f"<LeaseStatus>{machine.lease_status(state)}</LeaseStatus><LeaseState>{state}</LeaseState>"
    kind = machine.duration_type(obj.lease_record, state)
    if kind:
        xml += f"<LeaseDuration>{kind}</LeaseDuration>"
    return xml


def metadata_headers(response: HttpResponse, metadata: dict) -> None:
    for name, value in metadata.items():
        response[f"x-ms-meta-{name}"] = value


def metadata_xml(metadata: dict) -> str:
    return "<Metadata>" + "".join(f"<{k}>{escape(v)}</{k}>" for k, v in metadata.items()) + "</Metadata>"


def _opt(tag: str, value) -> str:
    return f"<{tag}>{escape(str(value))}</{tag}>" if value not in (None, "") else ""


def list_containers_xml(*, endpoint: str, containers, prefix, marker, maxresults, next_marker,
                        include_metadata: bool, now: datetime) -> str:
    out = [XML_DECLARATION, f'<EnumerationResults ServiceEndpoint="{escape(endpoint)}">',
           _opt("Prefix", prefix), _opt("Marker", marker), _opt("MaxResults", maxresults), "<Containers>"]
    for c in containers:
        out.append(f"<Container><Name>{escape(c.name)}</Name><Properties>"
                   f"<Last-Modified>{http_date(c.last_modified)}</Last-Modified><Etag>{c.etag}</Etag>"
                   f"{lease_xml(c, now)}{_opt('PublicAccess', c.public_access)}"
                   "<HasImmutabilityPolicy>false</HasImmutabilityPolicy><HasLegalHold>false</HasLegalHold>"
                   "</Properties>")
        if include_metadata:
            out.append(metadata_xml(c.metadata))
        out.append("</Container>")
    out.append(f"</Containers><NextMarker>{escape(next_marker or '')}</NextMarker></EnumerationResults>")
    return "".join(out)


def _name_xml(name: str) -> str:
    """A blob's <Name>. New names are XML-safe (leases/domain/names.py); one stored
    before that rule is sent as Azure sends such names: percent-encoded,
    marked Encoded="true" (the SDKs decode it)."""
    if names.xml_safe(name):
        return f"<Blob><Name>{escape(name)}</Name>"
    return f'<Blob><Name Encoded="true">{escape(quote(name.encode("utf-8", "surrogatepass"), safe=""))}</Name>'


def list_blobs_xml(*, endpoint: str, container: str, blobs, prefixes, prefix, marker, maxresults, delimiter,
                   next_marker, include_metadata: bool, now: datetime) -> str:
    out = [XML_DECLARATION,
           f'<EnumerationResults ServiceEndpoint="{escape(endpoint)}" ContainerName="{escape(container)}">',
           _opt("Prefix", prefix), _opt("Marker", marker), _opt("MaxResults", maxresults),
           _opt("Delimiter", delimiter), "<Blobs>"]
    for b in blobs:
        out.append(_name_xml(b.name))
        if b.snapshot:
            out.append(f"<Snapshot>{b.snapshot}</Snapshot>")
        out.append(
            f"<Properties><Creation-Time>{http_date(b.created_at)}</Creation-Time>"
            f"<Last-Modified>{http_date(b.last_modified)}</Last-Modified><Etag>{b.etag.strip(chr(34))}</Etag>"
            f"<Content-Length>{b.size}</Content-Length><Content-Type>{escape(b.content_type)}</Content-Type>"
            f"{_opt('Content-Encoding', b.content_encoding)}{_opt('Content-Language', b.content_language)}"
            f"{_opt('Content-MD5', b.content_md5)}{_opt('Cache-Control', b.cache_control)}"
            f"{_opt('Content-Disposition', b.content_disposition)}"
            f"<BlobType>{b.blob_type}</BlobType><AccessTier>Hot</AccessTier><AccessTierInferred>true</AccessTierInferred>"
            f"{lease_xml(b, now) if not b.snapshot else '<LeaseStatus>unlocked</LeaseStatus><LeaseState>available</LeaseState>'}"
            "<ServerEncrypted>false</ServerEncrypted></Properties>")
        if include_metadata:
            out.append(metadata_xml(b.metadata))
        out.append("</Blob>")
    for p in prefixes:
        out.append(f"<BlobPrefix><Name>{escape(p)}</Name></BlobPrefix>")
    out.append(f"</Blobs><NextMarker>{escape(next_marker or '')}</NextMarker></EnumerationResults>")
    return "".join(out)


# Get Blob Service Properties: a new storage account's defaults (logging and
# metrics off, no CORS rules, no soft delete, no static website). Leasehold has
# none of these features, so the answer is fixed; SDK clients read it at start.
_OFF = "<RetentionPolicy><Enabled>false</Enabled></RetentionPolicy>"
SERVICE_PROPERTIES_XML = (
    '<?xml version="1.0" encoding="utf-8"?><StorageServiceProperties>'
    f"<Logging><Version>1.0</Version><Read>false</Read><Write>false</Write><Delete>false</Delete>{_OFF}</Logging>"
    f"<HourMetrics><Version>1.0</Version><Enabled>false</Enabled>{_OFF}</HourMetrics>"
    f"<MinuteMetrics><Version>1.0</Version><Enabled>false</Enabled>{_OFF}</MinuteMetrics>"
    "<Cors /><DeleteRetentionPolicy><Enabled>false</Enabled></DeleteRetentionPolicy>"
    "<StaticWebsite><Enabled>false</Enabled></StaticWebsite></StorageServiceProperties>"
)
