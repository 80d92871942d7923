"""The Azure lease operation (``comp=lease``) and the headers every Azure
answer carries, from a request's WSGI environ: shared by the general view
(views.AzureBlobView) and the lean path (lean.py), so that both read the
same headers in the same order and answer the very same bytes. No lease
rules here: the services decide, this only translates."""

from __future__ import annotations

from django.http import HttpResponse

from leases.domain import client_headers, clock, lease_params, waiting
from leases import services
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.services import Actor, ResourceRef
from leases.azure import wire

CONDITION_KEYS = ("HTTP_IF_MATCH", "HTTP_IF_NONE_MATCH", "HTTP_IF_MODIFIED_SINCE", "HTTP_IF_UNMODIFIED_SINCE")
SERVER = "Leasehold Windows-Azure-Blob/1.0"


def header(meta: dict, name: str) -> str | None:
    """A request header by its HTTP name; "" counts as absent."""
    value = meta.get("HTTP_" + name.upper().replace("-", "_"))
    return value if value not in (None, "") else None


def check_version(meta: dict) -> bool:
    """x-ms-version, checked: whether it asks for the lease semantics before
    2012-02-12 (``legacy``); 400 InvalidHeaderValue if it is no version."""
    version = meta.get("HTTP_X_MS_VERSION") or None
    legacy = version in wire.LEGACY_VERSIONS
    if version is not None and not legacy and (not wire.VERSION_RE.match(version) or version < wire.OLDEST_VERSION):
        raise LeaseholdError("InvalidHeaderValue", field="version", value=version)
    return legacy


def conditions(meta: dict) -> Conditions:
    if not any(meta.get(key) for key in CONDITION_KEYS):
        return services.NO_CONDITIONS  # == Conditions.parse of no headers
    return Conditions.parse(lambda name: header(meta, name))


def actor(meta: dict, account: str, request_id: str, *, name: str | None = None) -> Actor:
    """Who asks: ``name`` ("account:<account>" for SharedKey, "sas:..." for a SAS)."""
    return Actor(name=name or f"account:{account}", via="azure", request_id=request_id,
                 client_request_id=client_headers.client_request_id(meta),
                 remote_addr=meta.get("REMOTE_ADDR", ""), user_agent=client_headers.user_agent(meta))


def properties(response: HttpResponse, obj) -> HttpResponse:
    response["ETag"] = obj.etag
    response["Last-Modified"] = wire.http_date(obj.last_modified)
    return response


def lease(meta: dict, ref: ResourceRef, who: Actor, *, legacy: bool,
          refused: LeaseholdError | None = None) -> HttpResponse:
    """Lease Container / Lease Blob: the headers parsed (a parameter that
    does not parse is refused, and recorded, by the service; so is
    ``refused``, the door's own objection), the service called, its result
    as Azure's headers."""
    arguments = lease_arguments(meta, ref, who, legacy=legacy)
    if refused is not None:
        arguments.update(unparsed=refused, wait=False)
    try:
        result = services.lease_action(**arguments)
    except LeaseholdError as err:
        waiting.note(meta, err)  # a quiet refusal: the server waits, then asks again (leases/domain/waiting.py)
        raise
    return lease_response(meta, result, legacy=legacy)


def lease_arguments(meta: dict, ref: ResourceRef, who: Actor, *, legacy: bool) -> dict:
    """The service's arguments for a lease request (services.lease_action's
    keywords), its headers parsed. Parsing reads no database, so the lean
    path's batches (lean.answer_together) do it before they take the
    writer lock."""
    h = lambda key: meta.get(key) or None  # noqa: E731  (as header(): "" is absent)
    checked = conditions(meta)
    params, unparsed = lease_params.parse_for_action(
        noun=ref.noun, lease_id=h("HTTP_X_MS_LEASE_ID"), proposed_lease_id=h("HTTP_X_MS_PROPOSED_LEASE_ID"),
        duration=h("HTTP_X_MS_LEASE_DURATION"), break_period=h("HTTP_X_MS_LEASE_BREAK_PERIOD"))
    action, wait = h("HTTP_X_MS_LEASE_ACTION"), False
    if (action or "").lower() == "acquire" and meta.get(waiting.HEADER_KEY):  # x-leasehold-wait
        try:
            seconds = waiting.seconds_from_header(meta)
        except LeaseholdError as err:  # refused and recorded by the service, as any bad lease header
            unparsed = unparsed or err
        else:
            # Waiters are bounded per signing account, whichever of its keys or SASes signed (decision 0031).
            wait = unparsed is None and waiting.may_wait(meta, seconds, f"account:{ref.account}",
                                                         waiting.too_many("ServerBusy"))
    return {"action": action, "ref": ref, "actor": who, "conditions": checked,
            "legacy": legacy, "unparsed": unparsed, "wait": wait, **params.as_kwargs()}


def lease_response(meta: dict, result, *, legacy: bool) -> HttpResponse:
    """A lease action's result (services.LeaseResult) as Azure's answer."""
    action = meta["HTTP_X_MS_LEASE_ACTION"].lower()  # the service refused a missing or unknown one
    response = wire.Bodiless(status=services.SUCCESS_STATUS[action])
    if not legacy:  # ETag and Last-Modified on lease responses came later (2013-08-15)
        properties(response, result.resource)
    if result.lease_id is not None and action != "release":
        response["x-ms-lease-id"] = str(result.lease_id)
    if action == "break":
        response["x-ms-lease-time"] = str(result.lease_time)
    if action == "acquire":
        response["Leasehold-Generation"] = str(result.generation)
    return response


def finish(response: HttpResponse, meta: dict, *, request_id: str, method: str) -> HttpResponse:
    """What every Azure answer carries, errors included: request id, version,
    date, server, the client's request id; a length for empty answers."""
    response["x-ms-request-id"] = request_id
    version = header(meta, "x-ms-version")
    response["x-ms-version"] = version if version and wire.VERSION_RE.match(version) else wire.DEFAULT_VERSION
    response["Date"] = wire.http_date(clock.now())
    response["Server"] = SERVER
    client_id = client_headers.client_request_id(meta)
    if client_id:
        response["x-ms-client-request-id"] = client_id
    if method == "HEAD" or response.status_code in (201, 202, 204) and not response.content:
        response["Content-Length"] = response.get("Content-Length", "0")
    return response

