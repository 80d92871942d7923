"""The Azure door's block and copy operations: Put Block, Put Block List,
Get Block List, Copy Blob (and Copy Blob From URL), Abort Copy. Headers in,
services called, headers and XML out; the rules live in the services."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any
from urllib.parse import unquote, urlsplit
from xml.sax.saxutils import escape

from django.conf import settings
from django.http import HttpResponse

from leases.domain import block_limits, checksums, machine
from leases import services
from leases.domain.errors import LeaseholdError
from leases.services import ResourceRef
from leases.domain.lease_params import lease_id as parse_lease_id
from leases.azure import inputs, wire, xml_input

BLOCK_LIST_TYPES = {"committed": (True, False), "uncommitted": (False, True), "all": (True, True)}


def _meta(view, name: str) -> str | None:
    value = view.request._request.META.get("HTTP_" + name.upper().replace("-", "_"))
    return value if value not in (None, "") else None


def _checksums(view) -> tuple[bytes | None, bytes | None]:
    """Content-MD5 and x-ms-content-crc64 as sent, decoded (400 if malformed)."""
    md5 = crc64 = None
    if (value := _meta(view, "Content-MD5")) is not None:
        md5 = checksums.decoded(value, 16)
        if md5 is None:
            raise LeaseholdError("InvalidMd5", field="Content-MD5", value=value[:200])
    if (value := _meta(view, "x-ms-content-crc64")) is not None:
        crc64 = checksums.decoded(value, 8)
        if crc64 is None:
            raise LeaseholdError("InvalidHeaderValue", field="x-ms-content-crc64", value=value[:200])
    return md5, crc64


def _length(view, cap: int | None = None) -> int:
    """Content-Length as announced, checked before any of the body is read:
    411 without one, 413 over ``cap`` (by default a blob's largest size: a
    block is at most that)."""
    meta = view.request._request.META
    announced = meta.get("CONTENT_LENGTH") or ""
    if meta.get("HTTP_TRANSFER_ENCODING") or announced == "":
        raise LeaseholdError("MissingContentLengthHeader", field="Content-Length")
    if not re.fullmatch(r"[0-9]{1,18}", announced):
        raise LeaseholdError("InvalidHeaderValue", field="Content-Length", value=announced[:200])
    if int(announced) > (settings.DATA_UPLOAD_MAX_MEMORY_SIZE if cap is None else cap):
        raise LeaseholdError("RequestBodyTooLarge")  # LEASEHOLD_MAX_BLOB_BYTES, as the front's cap
    return int(announced)


LIST_PIECE = 64 << 10  # bytes of a Put Block List body read (and parsed) at a time


def _read_block_list(view) -> tuple[list[tuple[str, str]] | LeaseholdError, bytes]:
    """Put Block List's body, at most MAX_LIST_BYTES (413 before any is
    read), hashed and parsed LIST_PIECE bytes at a time (no tree, no copy
    of the whole body): its entries, or the XML's refusal (raised by the
    caller after the other checks, as Azure orders them), and its MD5. A
    checksum that does not match is raised here."""
    request = view.request._request
    left = _length(view, block_limits.MAX_LIST_BYTES)
    md5, crc64 = _checksums(view)
    digest, crc = hashlib.md5(), checksums.Crc64() if crc64 is not None else None
    parser = xml_input.ChildTexts("BlockList", most=block_limits.MAX_COMMITTED,
                                  too_many=lambda: LeaseholdError("BlockListTooLong"),
                                  too_deep=lambda: LeaseholdError("InvalidBlockList"))
    refused: LeaseholdError | None = None
    while left:
        try:
            piece = request.read(min(LIST_PIECE, left))
        except OSError:  # the connection broke while the server read
            raise LeaseholdError("IncompleteBody") from None
        if not piece:
            raise LeaseholdError("IncompleteBody")
        left -= len(piece)
        digest.update(piece)
        if crc is not None:
            crc.update(piece)
        if refused is None:
            try:
                parser.feed(piece)
            except LeaseholdError as err:
                refused = err  # the rest is still hashed: a checksum refusal comes first
    if md5 is not None and digest.digest() != md5:
        raise LeaseholdError("Md5Mismatch")
    if crc is not None and crc.digest() != crc64:
        raise LeaseholdError("Crc64Mismatch")
    if refused is None:
        try:
            return parser.close(), digest.digest()
        except LeaseholdError as err:
            refused = err
    return refused, digest.digest()


class BlockRoutes:
    """Mixed into the Azure view (views.AzureBlobView), whose helpers it uses."""

    request: Any
    kwargs: dict
    sas_allows: frozenset | None
    actor: Any
    lease_id: Any
    conditions: Any
    _metadata: Any
    _properties: Any

    def put_block(self, ref: ResourceRef):
        if ref.snapshot:
            raise LeaseholdError("InvalidQueryParameterValue", field="snapshot", value=ref.snapshot)
        block_id = self.request.GET.get("blockid", "")
        length = _length(self)
        md5, crc64 = _checksums(self)
        digest = services.block_put(ref=ref, actor=self.actor(), block_id=block_id,
                                    read=self.request._request.read, length=length, md5=md5, crc64=crc64,
                                    lease_id=self.lease_id())
        response = wire.Bodiless(status=201)
        response["Content-MD5"] = base64.b64encode(digest).decode()  # computed, whether sent or not
        if crc64 is not None:
            response["x-ms-content-crc64"] = base64.b64encode(crc64).decode()
        response["x-ms-request-server-encrypted"] = "false"
        return response

    def put_block_list(self, ref: ResourceRef):
        if ref.snapshot:
            raise LeaseholdError("InvalidQueryParameterValue", field="snapshot", value=ref.snapshot)
        entries, body_md5 = _read_block_list(self)
        blob_md5 = _meta(self, "x-ms-blob-content-md5") or ""
        if blob_md5 and checksums.decoded(blob_md5, 16) is None:
            raise LeaseholdError("InvalidMd5", field="x-ms-blob-content-md5", value=blob_md5[:200])
        h = lambda name: _meta(self, name)  # noqa: E731
        metadata, conditions = self._metadata(), self.conditions()
        if isinstance(entries, LeaseholdError):
            raise entries
        blob = services.block_list_put(
            ref=ref, actor=self.actor(), entries=entries, content_type=h("x-ms-blob-content-type") or "",
            metadata=metadata, content_md5=blob_md5.strip(), lease_id=self.lease_id(), conditions=conditions,
            properties={"content_encoding": h("x-ms-blob-content-encoding"),
                        "content_language": h("x-ms-blob-content-language"),
                        "content_disposition": h("x-ms-blob-content-disposition"),
                        "cache_control": h("x-ms-blob-cache-control")})
        response = self._properties(wire.Bodiless(status=201), blob)
        response["Content-MD5"] = base64.b64encode(body_md5).decode()  # the list's, as Azure's
        response["x-ms-request-server-encrypted"] = "false"
        return response

    def get_block_list(self, ref: ResourceRef):
        kind = self.request.GET.get("blocklisttype", "committed")
        if kind.lower() not in BLOCK_LIST_TYPES:
            raise LeaseholdError("InvalidQueryParameterValue", field="blocklisttype", value=kind,
                                 detail={"query": True})
        committed, uncommitted = BLOCK_LIST_TYPES[kind.lower()]
        blob, done, pending = services.block_list_get(ref=ref, actor=self.actor(), lease_id=self.lease_id(),
                                                      committed=committed, uncommitted=uncommitted)
        parts = [wire.XML_DECLARATION, "<BlockList>"]
        for wanted, tag, blocks in ((committed, "CommittedBlocks", done), (uncommitted, "UncommittedBlocks", pending)):
            if wanted:
                parts.append(f"<{tag}>" + "".join(f"<Block><Name>{escape(name)}</Name><Size>{size}</Size></Block>"
                                                  for name, size in blocks) + f"</{tag}>")
        parts.append("</BlockList>")
        response = HttpResponse("".join(parts), content_type="application/xml")
        if blob is not None:
            self._properties(response, blob)
            response["x-ms-blob-content-length"] = str(blob.size)
        return response

    def copy_blob(self, ref: ResourceRef, source_url: str):
        if ref.snapshot:
            raise LeaseholdError("InvalidQueryParameterValue", field="snapshot", value=ref.snapshot)
        if self.sas_allows is not None:
            # A SAS names what it may reach; the copy's source is another blob, which it
            # may not read (a source's own SAS in its URL is not supported).
            err = LeaseholdError("CannotVerifyCopySource",
                                 message="Copy Blob under a shared access signature is not supported by this server.")
            err.status = 403
            raise err
        source = copy_source(source_url, self.kwargs["account"])
        metadata, conditions = self._metadata(), self.conditions()
        source_lease = parse_lease_id(_meta(self, "x-ms-source-lease-id"), noun=machine.BLOB,
                                      field="x-ms-source-lease-id")
        blob = services.blob_copy(ref=ref, actor=self.actor(), source=source, source_url=source_url,
                                  metadata=metadata or None, lease_id=self.lease_id(), source_lease_id=source_lease,
                                  conditions=conditions)
        response = self._properties(wire.Bodiless(status=202), blob)
        response["x-ms-copy-id"] = blob.copy_id
        response["x-ms-copy-status"] = "success"
        return response

    def create_append_blob(self, ref: ResourceRef):
        if inputs.read_body(self.request._request):
            raise LeaseholdError("InvalidHeaderValue", field="Content-Length", value=str(_length(self)),
                                 message="An append blob is created empty (Content-Length: 0).")
        h = lambda name: _meta(self, name)  # noqa: E731
        metadata, conditions = self._metadata(), self.conditions()
        blob = services.append_blob_create(
            ref=ref, actor=self.actor(), content_type=h("x-ms-blob-content-type") or "", metadata=metadata,
            lease_id=self.lease_id(), conditions=conditions,
            properties={"content_encoding": h("x-ms-blob-content-encoding"),
                        "content_language": h("x-ms-blob-content-language"),
                        "content_disposition": h("x-ms-blob-content-disposition"),
                        "cache_control": h("x-ms-blob-cache-control")})
        response = self._properties(wire.Bodiless(status=201), blob)
        response["x-ms-request-server-encrypted"] = "false"
        return response

    def append_block(self, ref: ResourceRef):
        if ref.snapshot:
            raise LeaseholdError("InvalidQueryParameterValue", field="snapshot", value=ref.snapshot)
        length = _length(self)
        if length == 0:
            raise LeaseholdError("InvalidHeaderValue", field="Content-Length", value="0")
        md5, crc64 = _checksums(self)
        limits = {}
        for name in ("x-ms-blob-condition-maxsize", "x-ms-blob-condition-appendpos"):
            value = _meta(self, name)
            if value is not None:
                if not re.fullmatch(r"[0-9]{1,18}", value):
                    raise LeaseholdError("InvalidHeaderValue", field=name, value=value[:200])
                limits[name] = int(value)
        conditions = self.conditions()
        blob, offset, count = services.block_append(
            ref=ref, actor=self.actor(), read=self.request._request.read, length=length, md5=md5, crc64=crc64,
            lease_id=self.lease_id(), conditions=conditions, max_size=limits.get("x-ms-blob-condition-maxsize"),
            append_position=limits.get("x-ms-blob-condition-appendpos"))
        response = self._properties(wire.Bodiless(status=201), blob)
        response["x-ms-blob-append-offset"] = str(offset)
        response["x-ms-blob-committed-block-count"] = str(count)
        if md5 is not None:
            response["Content-MD5"] = base64.b64encode(md5).decode()
        if crc64 is not None:
            response["x-ms-content-crc64"] = base64.b64encode(crc64).decode()
        response["x-ms-request-server-encrypted"] = "false"
        return response

    def abort_copy(self, ref: ResourceRef):
        action = _meta(self, "x-ms-copy-action")
        if action is None:
            raise LeaseholdError("MissingRequiredHeader", field="x-ms-copy-action")
        if action.lower() != "abort":
            raise LeaseholdError("InvalidHeaderValue", field="x-ms-copy-action", value=action[:200])
        services.copy_abort(ref=ref, actor=self.actor(), copy_id=self.request.GET.get("copyid", ""),
                            lease_id=self.lease_id())
        return wire.Bodiless(status=204)  # never reached: no copy is ever pending


def blob_type_headers(response: HttpResponse, blob) -> None:
    response["x-ms-blob-type"] = blob.blob_type
    if blob.blob_type == "AppendBlob":
        response["x-ms-blob-committed-block-count"] = str(services.committed_block_count(blob))


def copy_headers(response: HttpResponse, blob) -> None:
    """Get Blob (Properties): the last Copy Blob onto the blob, if any."""
    if blob.copy_id:
        response["x-ms-copy-id"] = blob.copy_id
        response["x-ms-copy-status"] = "success"
        response["x-ms-copy-source"] = blob.copy_source
        response["x-ms-copy-progress"] = blob.copy_progress
        response["x-ms-copy-completion-time"] = wire.http_date(blob.copy_completed_at)


def copy_source(url: str, account: str) -> ResourceRef:
    """x-ms-copy-source: a blob (or snapshot) of this server, path-style
    (/account/container/blob), in the request's own account (another's
    content needs its key, which this request did not sign with)."""
    parts = urlsplit(url.strip())
    names = unquote(parts.path).lstrip("/").split("/", 2)
    if parts.scheme not in ("http", "https") or not parts.netloc or len(names) < 3 or not all(names):
        raise LeaseholdError("InvalidHeaderValue", field="x-ms-copy-source", value=url[:200])
    snapshot = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p).get("snapshot", "")
    if names[0] != account:
        err = LeaseholdError("CannotVerifyCopySource",
                             message="Copy sources in another account are not supported by this server.")
        err.status = 403
        raise err
    return ResourceRef(names[0], names[1], names[2], unquote(snapshot))
