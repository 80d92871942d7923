"""What every JSON API view shares: authentication, permissions, the rate
limit, JSON in and out, the one exception handler, the request id, and the
Actor the services record in the lease history."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework import generics
from rest_framework.authentication import SessionAuthentication
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from leases.domain import guids
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.services import Actor
from leases.api import lease_request
from leases.api.authentication import ApiSharedKeyAuthentication, BearerTokenAuthentication, principal_name
from leases.api.exceptions import api_exception_handler
from leases.api.parsers import BoundedJSONParser
from leases.api.permissions import LeaseholdPermission
from leases.api.throttling import PrincipalRateThrottle

if TYPE_CHECKING:  # the view ApiMixin is mixed into, for the checker (request, kwargs, super())
    from rest_framework.views import APIView as _View
else:
    _View = object


class JsonNegotiation(DefaultContentNegotiation):
    """DRF's negotiation, with its answer for the usual case given at once:
    a view that renders only JSON, asked for JSON or anything (or with no
    Accept header) and no ?format=, gets JSON -- what DRF would choose, after
    parsing the header. Every other request is negotiated by DRF."""

    def select_renderer(self, request, renderers, format_suffix=None):
        meta = request.META
        if (len(renderers) == 1 and renderers[0].media_type == "application/json" and format_suffix is None
                and not meta.get("QUERY_STRING") and meta.get("HTTP_ACCEPT", "*/*") in ("*/*", "application/json")):
            return renderers[0], "application/json"
        return super().select_renderer(request, renderers, format_suffix)


class ApiMixin(_View):
    authentication_classes = [BearerTokenAuthentication, ApiSharedKeyAuthentication, SessionAuthentication]
    permission_classes = [LeaseholdPermission]
    throttle_classes = [PrincipalRateThrottle]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = JsonNegotiation
    parser_classes = [BoundedJSONParser]
    # Model permissions a user needs, by HTTP method.
    required_permissions: dict[str, tuple[str, ...]] = {}

    def get_exception_handler(self):
        return api_exception_handler

    def initial(self, request, *args, **kwargs):
        self.request_id = guids.request_id()
        super().initial(request, *args, **kwargs)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        for name, value in lease_request.response_ids(self.request.META, getattr(self, "request_id", "")):
            response[name] = value
        return response

    def permissions_for(self, request) -> tuple[str, ...]:
        method = "GET" if request.method == "HEAD" else request.method
        return self.required_permissions.get(method, ())

    def target_account(self) -> str | None:
        """The account this request acts on, if it names one."""
        return self.kwargs.get("account")

    def actor(self) -> Actor:
        return lease_request.actor(self.request.META, principal_name(self.request), self.request_id)

    def conditions(self) -> Conditions:
        return lease_request.conditions(self.request.META)


class ApiView(ApiMixin, APIView):
    pass


class ApiGenericView(ApiMixin, generics.GenericAPIView):
    pass


class ApiListView(ApiMixin, generics.ListAPIView):
    pass


def validated(serializer_class, data) -> dict:
    """A request body, validated; DRF's ValidationError is 400 InvalidInput."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def validated_query(serializer_class, request) -> dict:
    """Query parameters, validated; refusals are 400 InvalidQueryParameterValue."""
    serializer = serializer_class(data=request.query_params)
    if not serializer.is_valid():
        name = next(iter(serializer.errors))
        raise LeaseholdError("InvalidQueryParameterValue", field=name, value=request.query_params.get(name),
                             detail={"errors": serializer.errors})
    return serializer.validated_data


def query_value(request, name: str) -> str | None:
    """An optional query parameter; empty counts as absent, as an empty
    header does on the Azure endpoint."""
    return request.query_params.get(name) or None
