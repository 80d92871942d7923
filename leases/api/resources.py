"""Containers and blobs: list, read, create, delete. Reads and writes go
through the same services as the Azure endpoint, so leases guard them the
same way (a leased resource is deleted only with its lease id, a wrong id on
a read is 412, ...), with the same status codes (PUT 201, DELETE 202)."""

from __future__ import annotations

import uuid

from django.utils.http import http_date
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response

from leases.domain import clock, lease_params, machine
from leases import services
from leases.services import ResourceRef
from leases.api import lease_request, schema
from leases.api.base import ApiListView, ApiView, query_value, validated
from leases.api.filters import BlobFilter, ContainerFilter, QueryFilterBackend
from leases.api.pagination import NameCursor
from leases.api.selectors import blobs_for, containers_for
from leases.api.serializers import BlobInput, BlobSerializer, ContainerInput, ContainerSerializer

VALIDATORS = [
    OpenApiParameter("ETag", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[200, 201]),
    OpenApiParameter("Last-Modified", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[200, 201]),
]
DELETED = OpenApiResponse(description="Deleted (202, as on the Azure endpoint).")


def blob_ref(account: str, container: str, blob: str) -> ResourceRef:
    return lease_request.resource(account, container, blob)


def lease_id_query(request, noun: str) -> uuid.UUID | None:
    """The optional ``lease_id`` query parameter, parsed as the Azure door
    parses x-ms-lease-id (400 InvalidHeaderValue if it is no GUID)."""
    return lease_params.lease_id(query_value(request, "lease_id"), noun=noun)


class ResourceView(ApiView):
    serializer_class: type

    def answer(self, obj, *, status: int = 200) -> Response:
        data = self.serializer_class(obj, context={"now": clock.now()}).data
        return Response(data, status=status, headers=validator_headers(obj))


def validator_headers(obj) -> dict[str, str]:
    return {"ETag": obj.etag, "Last-Modified": http_date(obj.last_modified.timestamp())}


class LeaseListView(ApiListView):
    filter_backends = [QueryFilterBackend]
    pagination_class = NameCursor

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "now": clock.now()}


@extend_schema(tags=["containers"])
class ContainerListView(LeaseListView):
    required_permissions = {"GET": ("leases.view_container",)}
    serializer_class = ContainerSerializer
    filterset_class = ContainerFilter

    def get_queryset(self):
        return containers_for(self.request.user)

    @extend_schema(summary="List containers", responses={
        200: OpenApiResponse(ContainerSerializer(many=True), description="Name order; leases as of now."),
        **schema.errors()})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


@extend_schema(tags=["containers"], parameters=[*schema.path_parameters(blob=False), schema.CLIENT_REQUEST_ID_HEADER])
class ContainerView(ResourceView):
    serializer_class = ContainerSerializer
    required_permissions = {"GET": ("leases.view_container",), "PUT": ("leases.add_container",),
                            "DELETE": ("leases.delete_container",)}

    @extend_schema(summary="Read a container and its lease", parameters=[schema.LEASE_ID_QUERY, *VALIDATORS],
                   responses={200: OpenApiResponse(ContainerSerializer, description="Its lease as of now."),
                              **schema.errors(404, 412)})
    def get(self, request, account, container):
        obj = services.container_read(ref=ResourceRef(account, container), actor=self.actor(),
                                      lease_id=lease_id_query(request, machine.CONTAINER))
        return self.answer(obj)

    @extend_schema(summary="Create a container", request=ContainerInput, parameters=VALIDATORS,
                   responses={201: OpenApiResponse(ContainerSerializer, description="Created."),
                              **schema.errors(404, 409, 413, 415)})
    def put(self, request, account, container):
        data = validated(ContainerInput, request.data)
        obj = services.container_create(account=account, name=container, metadata=data["metadata"],
                                        public_access=data["public_access"], actor=self.actor())
        return self.answer(obj, status=201)

    @extend_schema(summary="Delete a container (and its blobs)",
                   parameters=[schema.LEASE_ID_QUERY, *schema.CONDITION_HEADERS],
                   responses={202: DELETED, **schema.errors(404, 412)})
    def delete(self, request, account, container):
        conditions = self.conditions()
        services.container_delete(ref=ResourceRef(account, container), actor=self.actor(),
                                  lease_id=lease_id_query(request, machine.CONTAINER), conditions=conditions)
        return Response(status=202)


@extend_schema(tags=["blobs"])
class BlobListView(LeaseListView):
    required_permissions = {"GET": ("leases.view_blob",)}
    serializer_class = BlobSerializer
    filterset_class = BlobFilter

    def get_queryset(self):
        return blobs_for(self.request.user)

    @extend_schema(summary="List blobs", responses={
        200: OpenApiResponse(BlobSerializer(many=True), description="Name order, without snapshots; leases as of now."),
        **schema.errors()})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


@extend_schema(tags=["blobs"], parameters=[*schema.path_parameters(blob=True), schema.CLIENT_REQUEST_ID_HEADER])
class BlobView(ResourceView):
    serializer_class = BlobSerializer
    # Put Blob creates or replaces, so it needs both.
    required_permissions = {"GET": ("leases.view_blob",), "PUT": ("leases.add_blob", "leases.change_blob"),
                            "DELETE": ("leases.delete_blob",)}

    @extend_schema(summary="Read a blob's properties and lease", parameters=[schema.LEASE_ID_QUERY, *VALIDATORS],
                   responses={200: OpenApiResponse(BlobSerializer, description="Its lease as of now."),
                              **schema.errors(404, 412)})
    def get(self, request, account, container, blob):
        obj = services.blob_read(ref=blob_ref(account, container, blob), actor=self.actor(),
                                 lease_id=lease_id_query(request, machine.BLOB), content=False)
        return self.answer(obj)

    @extend_schema(summary="Create or replace a blob", request=BlobInput,
                   parameters=[*schema.CONDITION_HEADERS, *VALIDATORS],
                   responses={201: OpenApiResponse(BlobSerializer, description="Created or replaced."),
                              **schema.errors(404, 409, 412, 413, 415)})
    def put(self, request, account, container, blob):
        data = validated(BlobInput, request.data)
        ref, conditions = blob_ref(account, container, blob), self.conditions()
        obj = services.blob_put(ref=ref, actor=self.actor(),
                                content=data.get("content", b""), content_type=data["content_type"],
                                metadata=data["metadata"], conditions=conditions,
                                lease_id=lease_params.lease_id(data.get("lease_id"), noun=machine.BLOB))
        return self.answer(obj, status=201)

    @extend_schema(summary="Delete a blob",
                   parameters=[schema.LEASE_ID_QUERY, *schema.CONDITION_HEADERS,
                               OpenApiParameter("delete_snapshots", OpenApiTypes.STR, enum=["include", "only"],
                                                description="Required if the blob has snapshots.")],
                   responses={202: DELETED, **schema.errors(404, 409, 412)})
    def delete(self, request, account, container, blob):
        ref, conditions = blob_ref(account, container, blob), self.conditions()
        services.blob_delete(ref=ref, actor=self.actor(), lease_id=lease_id_query(request, machine.BLOB),
                             delete_snapshots=query_value(request, "delete_snapshots"), conditions=conditions)
        return Response(status=202)
