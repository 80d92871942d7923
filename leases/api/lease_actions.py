"""Lease actions on a container or a blob, ``POST
/api/v1/leases/{action}/{account}/{container}[/{blob}]``: the action comes before the resource
because a blob name may contain '/', so ``.../{blob}/acquire`` could not tell an action on blob "x"
from blob "x/acquire". Success codes are the Azure endpoint's (201 acquire, 200 renew, change and
release, 202 break), as are the refusals."""

from __future__ import annotations

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework.response import Response

from leases import services
from leases.api import lease_request, schema
from leases.api.base import ApiView, validated
from leases.api.resources import validator_headers
from leases.api.serializers import AcquireInput, BreakInput, ChangeInput, LeaseActionResultSerializer, ReleaseInput, RenewInput


class LeaseActionSchema(AutoSchema):
    def get_operation_id(self):
        # One view serves a container and a blob route; name them apart.
        kind = "blob" if "{blob}" in self.path else "container"
        return f"{self.view.action_name}_{kind}_lease"


class LeaseActionView(ApiView):
    action_name: str
    input_serializer: type
    schema = LeaseActionSchema()

    def permissions_for(self, request) -> tuple[str, ...]:
        return lease_request.action_permissions(self.action_name, blob="blob" in self.kwargs)

    def post(self, request, account, container, blob=None):
        meta = request.META
        checked = lease_request.conditions(meta)  # header errors first, as on the Azure endpoint
        data = validated(self.input_serializer, request.data)
        asked = lease_request.lease_request(meta, self.action_name, lease_request.resource(account, container, blob),
                                            self.actor(), checked, data)
        result = lease_request.answered(meta, asked)
        return Response(lease_request.result_body(self.action_name, result),
                        status=services.SUCCESS_STATUS[self.action_name], headers=validator_headers(result.resource))


def documented(summary: str, description: str = ""):
    """Describe a LeaseActionView subclass's POST from its action and input."""
    def decorate(view):
        success = services.SUCCESS_STATUS[view.action_name]
        headers = [OpenApiParameter(name, OpenApiTypes.STR, OpenApiParameter.HEADER, response=[success])
                   for name in ("ETag", "Last-Modified")]
        return extend_schema_view(post=extend_schema(
            tags=["leases"], summary=summary, description=description, request=view.input_serializer,
            parameters=[*schema.path_parameters(blob=False), *schema.CONDITION_HEADERS,
                        schema.CLIENT_REQUEST_ID_HEADER, *headers],
            responses={success: OpenApiResponse(LeaseActionResultSerializer, description=f"{view.action_name}: done."),
                       **schema.errors(404, 409, 412, 413, 415)}))(view)
    return decorate


@documented("Acquire a lease", (
    "201 with the lease id. Refused with 409 LeaseAlreadyPresent (or LeaseIsBreakingAndCannotBeAcquired) "
    "while someone else holds it; the body then says why: `lease_state`, `retry_after` (seconds until it "
    "can be acquired, null while an infinite lease is held) and `generation`, and a Retry-After header "
    "carries `retry_after`. Acquiring again with the current lease id changes its duration. With `wait` "
    "(seconds, 0-60; a Leasehold extension) a held lease is waited for: the answer comes as soon as the lease "
    "is granted, or with the 409 when the wait runs out; 429 TooManyRequests past the bound of waiting "
    "requests per principal."))
class AcquireView(LeaseActionView):
    action_name = "acquire"
    input_serializer = AcquireInput


@documented("Renew a lease", "Restarts the lease's clock; an expired lease resumes if nobody took it since.")
class RenewView(LeaseActionView):
    action_name = "renew"
    input_serializer = RenewInput


@documented("Change a lease's id")
class ChangeView(LeaseActionView):
    action_name = "change"
    input_serializer = ChangeInput


@documented("Release a lease")
class ReleaseView(LeaseActionView):
    action_name = "release"
    input_serializer = ReleaseInput


@documented("Break a lease", (
    "202 with `lease_time`, the seconds until the lease is broken. Needs the leases.break_blob_lease "
    "(a container: leases.break_container_lease) permission "
    "(or the account's SharedKey)."))
class BreakView(LeaseActionView):
    action_name = "break"
    input_serializer = BreakInput


ACTION_VIEWS = (AcquireView, RenewView, ChangeView, ReleaseView, BreakView)
