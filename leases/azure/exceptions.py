"""The one exception handler of the Azure endpoint: every refusal becomes the
Azure XML error body plus ``x-ms-error-code`` (header only for HEAD)."""

from __future__ import annotations

import logging

from rest_framework import exceptions as drf

from leases.domain import clock, guids
from leases.operations import faults
from leases.operations.logformat import mark_fault_logged
from leases.domain.errors import LeaseholdError
from leases.storage.write_refusals import outcome_unknown, server_busy
from leases.azure import wire

log = logging.getLogger("leasehold.azure")

DRF_CODES = {
    drf.MethodNotAllowed: "UnsupportedHttpVerb",
    drf.NotAuthenticated: "NoAuthenticationInformation",
    drf.AuthenticationFailed: "AuthenticationFailed",
    drf.PermissionDenied: "AuthorizationPermissionMismatch",
}


def azure_exception_handler(exc, context):
    view = context.get("view")
    request = context.get("request")
    unknown = outcome_unknown(exc)
    if unknown is not None:
        # Committed or not, nobody can say (docs/decisions/0045): not success, not "nothing was written".
        log.error("commit outcome unknown on %s %s: %s", getattr(request, "method", "?"),
                  getattr(request, "path", "?"), unknown[1])
        mark_fault_logged(request)
        return wire.error_response(
            unknown[0], request_id=getattr(view, "request_id", None) or guids.request_id(), now=clock.now(),
            head=getattr(request, "method", "") == "HEAD")
    busy = server_busy(exc)
    if busy is not None:
        response = wire.error_response(
            busy, request_id=getattr(view, "request_id", None) or guids.request_id(), now=clock.now(),
            head=getattr(request, "method", "") == "HEAD")
        response["Retry-After"] = str(busy.detail["retry_after"])
        return response
    fault = None if isinstance(exc, LeaseholdError) else faults.classify(exc)
    if fault is not None:
        # The storage, not the request: 503 ServerBusy, the cause in one line.
        log.error("storage fault on %s %s: %s", getattr(request, "method", "?"), getattr(request, "path", "?"),
                  fault.cause)
        exc = fault.error()
    elif not isinstance(exc, LeaseholdError):
        code = next((c for cls, c in DRF_CODES.items() if isinstance(exc, cls)), None)
        if code is None:
            # A bug: answer like the service would, and keep the traceback.
            log.exception("unhandled error on %s %s", getattr(request, "method", "?"),
                          getattr(request, "path", "?"), exc_info=exc)
            code = "InternalError"
        exc = LeaseholdError(code)
    response = wire.error_response(
        exc, request_id=getattr(view, "request_id", None) or guids.request_id(), now=clock.now(),
        head=getattr(request, "method", "") == "HEAD")
    if exc.detail.get("www_authenticate"):  # a bearer token refused: the challenge, as Azure sends it
        response["WWW-Authenticate"] = exc.detail["www_authenticate"]
    if exc.status == 503 and exc.detail.get("retry_after") is not None:  # e.g. too many waiting acquires
        response["Retry-After"] = str(exc.detail["retry_after"])
        # A throttle (the JSON API's 429), not a failure: no ERROR line per refused request.
        mark_fault_logged(request)
    if fault is not None:
        response["Retry-After"] = str(fault.retry_after)
        mark_fault_logged(request)  # logged above with its cause; not again by django.request
    return response
