"""The JSON API's lease request (``POST /api/v1/leases/{action}/...``) and the rules every JSON answer
shares, from a request's META (its WSGI environ): used by the DRF view (lease_actions.py, base.py)
and the lean path (lean.py) alike, as the Azure door's leases/azure/lease_request.py is by both of
its paths, so that both read a request the same way and answer the same bytes: who may (the
capability rule), who asks (the actor), the conditions, the client's request id, the answer's ids
and ``Allow``, the resource, the parameters, the service's arguments and the answer's body. No
lease rules here: the services decide, this only translates."""

from __future__ import annotations

from dataclasses import dataclass

from leases import services
from leases.api.serializers import lease_action_result
from leases.domain import client_headers, clock, lease_params, waiting
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.domain.lease_params import LeaseParams
from leases.services import Actor, ResourceRef

ALLOW = "POST, OPTIONS"  # DRF's Allow of a view with post() only: a lease action's
CAPABILITY_ACTIONS = ("acquire", "renew", "change")  # the answers that carry the lease id


def action_permissions(action: str, *, blob: bool) -> tuple[str, ...]:
    """The model permissions a lease action on a blob or a container needs."""
    if action == "break":  # per model: a blob breaker may not break containers
        return ("leases.break_blob_lease",) if blob else ("leases.break_container_lease",)
    return ("leases.change_blob",) if blob else ("leases.change_container",)


def client_request_id(meta: dict) -> str:
    return client_headers.client_request_id(
        meta, (client_headers.API_CLIENT_REQUEST_ID, client_headers.AZURE_CLIENT_REQUEST_ID))


def actor(meta: dict, name: str, request_id: str) -> Actor:
    """Who asks, as the lease history records it: ``name`` is the principal's."""
    return Actor(name=name, via="api", request_id=request_id, client_request_id=client_request_id(meta),
                 remote_addr=meta.get("REMOTE_ADDR", ""), user_agent=client_headers.user_agent(meta))


def conditions(meta: dict) -> Conditions:
    return Conditions.parse(lambda name: meta.get("HTTP_" + name.upper().replace("-", "_")) or None)


def response_ids(meta: dict, request_id: str) -> list[tuple[str, str]]:
    """The ids every JSON answer carries: this request's, and the client's own if it sent one."""
    client_id = client_request_id(meta)
    return [("X-Request-Id", request_id), *([("X-Client-Request-Id", client_id)] if client_id else [])]


def resource(account: str, container: str, blob: str | None) -> ResourceRef:
    # Azure reads '\' in a blob name as '/'; so does the JSON API.
    return ResourceRef(account, container, blob.replace("\\", "/") if blob is not None else None)


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """One JSON lease request, parsed: what the service is asked."""

    action: str
    ref: ResourceRef
    actor: Actor
    conditions: Conditions
    params: LeaseParams
    unparsed: LeaseholdError | None  # a parameter that did not parse: refused and recorded by the service
    reason: str = ""
    wait: bool = False

    def arguments(self) -> dict:
        """services.lease_action's keyword arguments (the lean path's batches write them together)."""
        return {"action": self.action, "ref": self.ref, "actor": self.actor, "conditions": self.conditions,
                "wait": self.wait, "reason": self.reason, "unparsed": self.unparsed, **self.params.as_kwargs()}


def lease_request(meta: dict, action: str, ref: ResourceRef, who: Actor, checked: Conditions,
                  data: dict) -> LeaseRequest:
    """The request from its input (the view's validated data, or the lean path's plain JSON of the
    same types): its parameters parsed, and an acquire's ``wait`` granted or refused."""
    params, unparsed = lease_params.parse_for_action(
        noun=ref.noun, **{name: data.get(name) for name in lease_params.NAMES})
    wait = False
    if data.get("wait"):  # acquire only: leases/domain/waiting.py
        wait = unparsed is None and waiting.may_wait(meta, data["wait"], who.name, waiting.too_many("TooManyRequests"))
    reason = data.get("reason")
    return LeaseRequest(action=action, ref=ref, actor=who, conditions=checked, params=params, unparsed=unparsed,
                        reason=reason.strip() if isinstance(reason, str) else "", wait=wait)


def answered(meta: dict, request: LeaseRequest) -> services.LeaseResult:
    """The service's answer to ``request``; a refusal raised, after telling
    the server what a quiet one waits for."""
    try:
        return services.lease_action(**request.arguments())
    except LeaseholdError as err:
        waiting.note(meta, err)  # a quiet refusal: the server waits, then asks again
        raise


def result_body(action: str, result: services.LeaseResult) -> dict:
    """The answer's body: the lease id only to the acquire or change that made it (and a renew,
    which sent it), a capability."""
    return lease_action_result(
        action=action, lease_id=result.lease_id if action in CAPABILITY_ACTIONS else None,
        lease_time=result.lease_time, generation=result.generation, obj=result.resource, now=clock.now())
