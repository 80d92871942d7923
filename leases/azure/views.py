"""The Azure Blob endpoint: path-style ``/{account}/{container}[/{blob}]``,
routed by method, ``restype`` and ``comp``. It translates headers into
service calls and results into headers and XML; it holds no lease rules."""

from __future__ import annotations

import uuid

from django.http import HttpResponse, StreamingHttpResponse
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.views import APIView

from leases.storage import blob_content
from leases.domain import client_headers, clock, guids, lease_params, machine, paths
from leases.services import selectors
from leases import services
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.services import Actor, ResourceRef
from leases.auth.sharedkey import SharedKeyAuthentication
from leases.azure import acl, inputs, lease_request, user_delegation, wire
from leases.azure.auth import AccountKeyRequired, BearerAuthentication, SasAuthentication, create_only, lease_operation, permit, response_headers
from leases.azure.blocks import BlockRoutes, blob_type_headers, copy_headers
from leases.azure.exceptions import azure_exception_handler
from leases.azure.routes import ACCOUNT_ROUTES, BLOB_ROUTES, CONTAINER_ROUTES, SAS_OPERATIONS


class PassthroughRenderer(BaseRenderer):
    """Views build their own HttpResponse; this only satisfies negotiation."""

    media_type = "*/*"
    format = "azure"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data


class AzureContentNegotiation(BaseContentNegotiation):
    """Azure answers XML or nothing whatever Accept asks for, so DRF's Accept
    parsing (a measurable share of a lease request's CPU) is skipped."""

    def select_parser(self, request, parsers):
        return None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


def _header(request, name: str) -> str | None:
    # META of the Django request itself: through DRF's Request it is a
    # __getattr__ fallback each time, and a request reads a dozen headers.
    value = getattr(request, "_request", request).META.get("HTTP_" + name.upper().replace("-", "_"))
    return value if value not in (None, "") else None


def _metadata(request) -> dict:
    # Validated by the services (leases/domain/metadata.py), as the JSON API's.
    return client_headers.metadata_from_environ(getattr(request, "_request", request).META)


_int_query = inputs.int_query


class AzureBlobView(BlockRoutes, APIView):
    authentication_classes = [BearerAuthentication, SharedKeyAuthentication, SasAuthentication]
    permission_classes = [AccountKeyRequired]
    renderer_classes = [PassthroughRenderer]
    content_negotiation_class = AzureContentNegotiation
    parser_classes: list[type] = []
    throttle_classes: list[type] = []

    def get_exception_handler(self):
        return azure_exception_handler

    @property
    def default_response_headers(self):
        # DRF adds Allow (and Vary: Accept) to every response; Azure sends neither.
        return {}

    # -- request plumbing

    def _check_version(self, request) -> None:
        self.request_id = guids.request_id()
        self.now = clock.now()
        inputs.check_header_values(request._request.META)
        self.legacy = lease_request.check_version(request._request.META)  # lease semantics before 2012-02-12

    def initial(self, request, *args, **kwargs):
        self._check_version(request)
        inputs.check_query(request._request)
        super().initial(request, *args, **kwargs)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        return lease_request.finish(response, getattr(request, "_request", request).META,
                                    request_id=getattr(self, "request_id", "") or guids.request_id(),
                                    method=request.method)

    def actor(self) -> Actor:
        return lease_request.actor(self.request._request.META, self.kwargs["account"], self.request_id,
                                   name=self.request.user.username)

    def _permit(self, handler: str, noun: str) -> None:
        """A SAS's permissions for this operation (SharedKey: everything)."""
        operation = (lease_operation(noun, _header(self.request, "x-ms-lease-action")) if handler == "lease"
                     else SAS_OPERATIONS.get(handler, handler))
        self.sas_allows = permit(getattr(self.request.user, "grant", None), operation)

    def get(self, request, **kw):
        return self.route("GET")

    def head(self, request, **kw):
        return self.route("HEAD")

    def put(self, request, **kw):
        return self.route("PUT")

    def delete(self, request, **kw):
        return self.route("DELETE")

    def post(self, request, **kw):
        # Get User Delegation Key, on the account's URL, is the only POST: elsewhere the verb is refused.
        if self.kwargs.get("rest"):
            return self.http_method_not_allowed(request)
        return self.route("POST")

    def options(self, request, *args, **kwargs):
        # A CORS preflight, which Azure answers 403 without CORS rules (Leasehold has none),
        # not DRF's metadata page.
        raise LeaseholdError("CorsPreflightFailure")

    def http_method_not_allowed(self, request, *args, **kwargs):
        raise LeaseholdError("UnsupportedHttpVerb")

    def route(self, method: str) -> HttpResponse:
        rest = self.kwargs.get("rest") or ""
        container, _, blob = rest.partition("/")
        if blob and not container:
            # '/account//blob': a blob in no container, which no route can serve
            raise LeaseholdError("InvalidUri")
        query = self.request.GET
        restype = query.get("restype")
        comp = paths.query_value(self.request.META.get("QUERY_STRING", ""), "comp")  # as the server's lanes read it
        if not container:
            handler = ACCOUNT_ROUTES.get((method, restype, comp))
            args: tuple[ResourceRef, ...] = ()
        elif not blob:
            handler = CONTAINER_ROUTES.get((method, restype, comp))
            args = (ResourceRef(self.kwargs["account"], container),)
        else:
            blob = blob.replace("\\", "/")
            # restype names a container or the service: on a blob's URL it is a mistake, not ignored
            handler = BLOB_ROUTES.get((method, comp)) if restype is None else None
            args = (ResourceRef(self.kwargs["account"], container, blob, query.get("snapshot", "")),)
        self.sas_allows = None
        if handler is None and blob and restype is not None and (method, comp) == ("PUT", "lease"):
            self._permit("lease", machine.BLOB)
            # A lease attempt on a blob's URL with a container's restype: refused, and recorded, by the service.
            return self.lease(args[0], refused=LeaseholdError("InvalidQueryParameterValue", field="restype",
                                                               value=restype))
        if handler is None:
            if comp is not None and not (blob and restype is not None):
                raise LeaseholdError("InvalidQueryParameterValue", field="comp", value=comp)
            raise LeaseholdError("InvalidQueryParameterValue", field="restype", value=restype or "")
        self._permit(handler, machine.BLOB if blob else machine.CONTAINER)
        return getattr(self, handler)(*args)

    def conditions(self) -> Conditions:
        return lease_request.conditions(self.request._request.META)

    def lease_id(self, noun: str = machine.BLOB) -> uuid.UUID | None:
        """x-ms-lease-id, parsed: 400 InvalidHeaderValue if it is no GUID."""
        return lease_params.lease_id(_header(self.request, "x-ms-lease-id"), noun=noun)

    def _metadata(self) -> dict:
        return _metadata(self.request)

    def _properties(self, response: HttpResponse, obj) -> HttpResponse:
        response["ETag"] = obj.etag
        response["Last-Modified"] = wire.http_date(obj.last_modified)
        return response

    # -- account

    def list_containers(self):
        account = self.kwargs["account"]
        include = inputs.include_set(self.request._request, inputs.LIST_CONTAINERS_INCLUDE)
        prefix = self.request.GET.get("prefix", "")
        marker = self.request.GET.get("marker", "")
        maxresults = _int_query(self.request, "maxresults", selectors.MAX_RESULTS, low=1, high=selectors.MAX_RESULTS)
        page, next_marker = selectors.list_containers(account=account, prefix=prefix, marker=marker,
                                                      maxresults=maxresults)
        body = wire.list_containers_xml(
            endpoint=inputs.endpoint(self.request._request, account), containers=page, prefix=prefix,
            marker=marker, maxresults=self.request.GET.get("maxresults"), next_marker=next_marker,
            include_metadata="metadata" in include, now=self.now)
        return HttpResponse(body, content_type="application/xml")

    def account_info(self):
        response = wire.Bodiless()
        response["x-ms-sku-name"] = "Standard_LRS"
        response["x-ms-account-kind"] = "StorageV2"
        response["x-ms-is-hns-enabled"] = "false"
        return response

    def service_properties(self):
        return HttpResponse(wire.SERVICE_PROPERTIES_XML, content_type="application/xml")

    def user_delegation_key(self):
        return user_delegation.get_key(self)

    # -- containers

    def create_container(self, ref: ResourceRef):
        container = services.container_create(
            account=ref.account, name=ref.container, metadata=_metadata(self.request),
            public_access=_header(self.request, "x-ms-blob-public-access") or "", actor=self.actor())
        return self._properties(wire.Bodiless(status=201), container)

    def delete_container(self, ref: ResourceRef):
        conditions = self.conditions()
        services.container_delete(ref=ref, actor=self.actor(), lease_id=self.lease_id(machine.CONTAINER),
                                  conditions=conditions)
        return wire.Bodiless(status=202)

    def container_properties(self, ref: ResourceRef):
        container = services.container_read(ref=ref, actor=self.actor(), lease_id=self.lease_id(machine.CONTAINER))
        response = self._properties(wire.Bodiless(), container)
        wire.metadata_headers(response, container.metadata)
        wire.lease_headers(response, container, self.now, legacy=self.legacy, noun=machine.CONTAINER)
        if container.public_access:
            response["x-ms-blob-public-access"] = container.public_access
        response["x-ms-has-immutability-policy"] = "false"
        response["x-ms-has-legal-hold"] = "false"
        return response

    def set_container_metadata(self, ref: ResourceRef):
        metadata, conditions = _metadata(self.request), self.conditions()
        container = services.container_set_metadata(
            ref=ref, actor=self.actor(), metadata=metadata, lease_id=self.lease_id(machine.CONTAINER),
            conditions=conditions)
        return self._properties(wire.Bodiless(), container)

    def get_container_acl(self, ref: ResourceRef):
        return acl.get_acl(self, ref)

    def set_container_acl(self, ref: ResourceRef):
        return acl.set_acl(self, ref)

    def list_blobs(self, ref: ResourceRef):
        container = services.container_read(ref=ref, actor=self.actor())
        get = self.request.GET
        include = inputs.include_set(self.request._request, inputs.LIST_BLOBS_INCLUDE)
        maxresults = _int_query(self.request, "maxresults", selectors.MAX_RESULTS, low=1, high=selectors.MAX_RESULTS)
        blobs, prefixes, next_marker = selectors.list_blobs(
            container=container, prefix=get.get("prefix", ""), delimiter=get.get("delimiter", ""),
            marker=get.get("marker", ""), maxresults=maxresults, snapshots="snapshots" in include)
        body = wire.list_blobs_xml(
            endpoint=inputs.endpoint(self.request._request, ref.account), container=ref.container, blobs=blobs,
            prefixes=prefixes, prefix=get.get("prefix"), marker=get.get("marker"),
            maxresults=get.get("maxresults"), delimiter=get.get("delimiter"), next_marker=next_marker,
            include_metadata="metadata" in include, now=self.now)
        return HttpResponse(body, content_type="application/xml")

    # -- leases (containers and blobs)

    def lease(self, ref: ResourceRef, refused: LeaseholdError | None = None):
        # The lean path (lean.py) answers most lease requests with the same function.
        return lease_request.lease(self.request._request.META, ref, self.actor(), legacy=self.legacy,
                                   refused=refused)

    # -- blobs

    def put_blob(self, ref: ResourceRef):
        if ref.snapshot:
            raise LeaseholdError("InvalidQueryParameterValue", field="snapshot", value=ref.snapshot)
        if self.sas_allows is not None and "w" not in self.sas_allows:
            create_only(ref, self.actor())
        source = _header(self.request, "x-ms-copy-source")
        if source is not None:  # Copy Blob (blocks.py)
            return self.copy_blob(ref, source)
        blob_type = _header(self.request, "x-ms-blob-type")
        if blob_type is None:
            raise LeaseholdError("MissingRequiredHeader", field="blob_type")
        if blob_type == "AppendBlob":  # blocks.py
            return self.create_append_blob(ref)
        if blob_type != "BlockBlob":
            raise LeaseholdError("InvalidHeaderValue", field="blob_type", value=blob_type)
        content = inputs.read_body(self.request._request)
        inputs.check_md5(content, self.request._request.META)
        h = lambda name: _header(self.request, name)  # noqa: E731
        metadata, conditions = _metadata(self.request), self.conditions()
        blob = services.blob_put(
            ref=ref, actor=self.actor(), content=content,
            content_type=h("x-ms-blob-content-type") or self.request.META.get("CONTENT_TYPE", ""),
            metadata=metadata, lease_id=self.lease_id(), conditions=conditions,
            properties={"content_encoding": h("x-ms-blob-content-encoding"),
                        "content_language": h("x-ms-blob-content-language"),
                        "content_disposition": h("x-ms-blob-content-disposition"),
                        "cache_control": h("x-ms-blob-cache-control")})
        response = self._properties(wire.Bodiless(status=201), blob)
        response["Content-MD5"] = blob.content_md5
        response["x-ms-request-server-encrypted"] = "false"
        return response

    def get_blob(self, ref: ResourceRef):
        head = self.request.method == "HEAD"
        properties_only = head or self.request.GET.get("comp") == "metadata"
        blob = services.blob_read(ref=ref, actor=self.actor(), lease_id=self.lease_id(), content=not properties_only)
        if not self.conditions().check_read(blob.etag, blob.last_modified):
            response = wire.Bodiless(status=304)
            return self._properties(response, blob)
        content = blob.content if not head else b""
        status, content_range = 200, None
        start, end = 0, blob.size - 1
        rng = _header(self.request, "x-ms-range") or _header(self.request, "Range")
        if rng and not head and self.request.GET.get("comp") != "metadata":
            start, end = inputs.parse_range(rng, blob.size)
            content = bytes(blob.content[start:end + 1])
            status, content_range = 206, f"bytes {start}-{end}/{blob.size}"
        if self.request.GET.get("comp") == "metadata":
            content = b""
        if blob.content_version is not None and not head and self.request.GET.get("comp") != "metadata":
            # Chunked content (leases.storage.blob_content): streamed a chunk (one short read) at a time.
            response = StreamingHttpResponse(blob_content.stream(blob.content_version, start, end),
                                             status=status, content_type=blob.content_type)
            content = range(end - start + 1)  # only its length is used below
        else:
            response = HttpResponse(bytes(content), status=status, content_type=blob.content_type)
        self._properties(response, blob)
        if content_range:
            response["Content-Range"] = content_range
        response["Content-Length"] = str(blob.size if head else len(content))
        response["Accept-Ranges"] = "bytes"
        blob_type_headers(response, blob)
        response["x-ms-creation-time"] = wire.http_date(blob.created_at)
        response["x-ms-server-encrypted"] = "false"
        if blob.content_md5 and (status == 200):
            response["Content-MD5"] = blob.content_md5
        for header, value in (("Content-Encoding", blob.content_encoding),
                              ("Content-Language", blob.content_language),
                              ("Content-Disposition", blob.content_disposition),
                              ("Cache-Control", blob.cache_control)):
            if value:
                response[header] = value
        wire.metadata_headers(response, blob.metadata)
        copy_headers(response, blob)
        if blob.snapshot:
            response["x-ms-lease-status"], response["x-ms-lease-state"] = "unlocked", "available"
        else:
            wire.lease_headers(response, blob, self.now, legacy=self.legacy)
        if head:
            response["x-ms-access-tier"] = "Hot"
            response["x-ms-access-tier-inferred"] = "true"
        response_headers(response, getattr(self.request.user, "grant", None))
        return response

    def set_blob_metadata(self, ref: ResourceRef):
        metadata, conditions = _metadata(self.request), self.conditions()
        blob = services.blob_set_metadata(ref=ref, actor=self.actor(), metadata=metadata, lease_id=self.lease_id(),
                                          conditions=conditions)
        response = self._properties(wire.Bodiless(), blob)
        response["x-ms-request-server-encrypted"] = "false"
        return response

    def delete_blob(self, ref: ResourceRef):
        conditions = self.conditions()
        services.blob_delete(ref=ref, actor=self.actor(), lease_id=self.lease_id(),
                             delete_snapshots=_header(self.request, "x-ms-delete-snapshots"), conditions=conditions)
        response = wire.Bodiless(status=202)
        response["x-ms-delete-type-permanent"] = "true"
        return response

    def snapshot_blob(self, ref: ResourceRef):
        meta = _metadata(self.request)
        conditions = self.conditions()
        snap = services.blob_snapshot(ref=ref, actor=self.actor(), metadata=meta or None, lease_id=self.lease_id(),
                                      conditions=conditions)
        response = self._properties(wire.Bodiless(status=201), snap)
        response["x-ms-snapshot"] = snap.snapshot
        return response

