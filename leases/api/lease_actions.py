"""Lease actions on a container or a blob, ``POST
/api/v1/leases/{action}/{account}/{container}[/{blob}]``: the action comes before the resource
because a blob name may contain '/', so ``.../{blob}/acquire`` could not tell an action on blob "x"
from blob "x/acquire". Success codes are the Azure endpoint's (201 acquire, 200 renew, change and
release, 202 break), as are the refusals."""

from __future__ import annotations

import functools

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework.response import Response

from leases.domain import clock, lease_params, waiting
from leases import services
from leases.domain.errors import LeaseholdError
from leases.services import ResourceRef
from leases.api import schema
from leases.api.base import ApiView, validated
from leases.api.resources import blob_ref, validator_headers
from leases.api.serializers import (AcquireInput, BreakInput, ChangeInput, LeaseActionResultSerializer, ReleaseInput,
                          RenewInput, lease_action_result)

# services.lease_action for each action: one entry point for both doors, which
# also records a refusal for a parameter the view could not parse.
SERVICES = {name: functools.partial(services.lease_action, name) for name in services.SUCCESS_STATUS}


def action_permissions(action: str, *, blob: bool) -> tuple[str, ...]:
    """The model permissions a lease action on a blob or a container needs
    (the view's and the lean path's, leases/api/fastpath.py)."""
    if action == "break":  # per model: a blob breaker may not break containers
        return ("leases.break_blob_lease",) if blob else ("leases.break_container_lease",)
    return ("leases.change_blob",) if blob else ("leases.change_container",)

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
        return action_permissions(self.action_name, blob="blob" in self.kwargs)

    def post(self, request, account, container, blob=None):
        conditions = self.conditions()  # header errors first, as on the Azure endpoint
        data = validated(self.input_serializer, request.data)
        ref = blob_ref(account, container, blob) if blob is not None else ResourceRef(account, container)
        params, unparsed = lease_params.parse_for_action(
            noun=ref.noun, **{name: data.get(name) for name in lease_params.NAMES})
        actor, wait = self.actor(), False
        if data.get("wait"):  # acquire only: leases/domain/waiting.py
            wait = unparsed is None and waiting.may_wait(request.META, data["wait"], actor.name,
                                                         waiting.too_many("TooManyRequests"))
        try:
            result = SERVICES[self.action_name](ref=ref, actor=actor, conditions=conditions, wait=wait,
                                                reason=data.get("reason", ""), unparsed=unparsed,
                                                **params.as_kwargs())
        except LeaseholdError as err:
            waiting.note(request.META, err)  # a quiet refusal: the server waits, then asks again
            raise
        obj = result.resource
        body = lease_action_result(
            action=self.action_name,
            # The id only to the acquire or change that made it (and a renew, which sent it): a capability.
            lease_id=result.lease_id if self.action_name in ("acquire", "renew", "change") else None,
            lease_time=result.lease_time, generation=result.generation, obj=obj, now=clock.now())
        return Response(body, status=services.SUCCESS_STATUS[self.action_name], headers=validator_headers(obj))


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
