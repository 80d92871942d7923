"""The one exception handler of the JSON API. Every refusal becomes ``{"code", "message",
"request_id", ...}`` with the Azure error code and status of the domain error, so a client handles
both doors alike. DRF's own exceptions are given codes from the same vocabulary. Unlike DRF's
default handler this never calls ``set_rollback()``: services commit the history event of a refused
action before raising, and nothing here may undo it."""

from __future__ import annotations

import logging
import math

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf

from leases.operations import faults
from leases.operations.logformat import mark_fault_logged
from leases.domain import guids
from leases.domain.errors import MESSAGES, LeaseholdError
from leases.storage.write_refusals import outcome_unknown, server_busy

log = logging.getLogger("leasehold.api")

# DRF exception -> error code; the status stays DRF's (401 vs 403 is decided
# by APIView.handle_exception from the authenticators).
DRF_CODES = (
    (drf.NotAuthenticated, "NoAuthenticationInformation"),
    (drf.AuthenticationFailed, "AuthenticationFailed"),
    (drf.PermissionDenied, "AuthorizationPermissionMismatch"),
    (drf.NotFound, "ResourceNotFound"),
    (drf.MethodNotAllowed, "UnsupportedHttpVerb"),
    (drf.NotAcceptable, "NotAcceptable"),
    (drf.UnsupportedMediaType, "UnsupportedMediaType"),
    (drf.Throttled, "TooManyRequests"),
    (drf.ParseError, "InvalidInput"),
    (drf.ValidationError, "InvalidInput"),
)

# Adapter-neutral input names (LeaseholdError.field) that are HTTP headers
# here; every other field keeps its name, which is the JSON or query name.
HEADER_FIELDS = {"if_modified_since": "If-Modified-Since", "if_unmodified_since": "If-Unmodified-Since"}


def api_exception_handler(exc, context) -> JsonResponse:
    view = context.get("view")
    request_id = getattr(view, "request_id", None) or guids.request_id()
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, RequestDataTooBig):  # DRF >= 3.16 reads JSON bodies through request.body
        exc = LeaseholdError("RequestBodyTooLarge")
    elif (unknown := outcome_unknown(exc)) is not None:  # committed or not, nobody can say (decision 0045)
        request = context.get("request")
        log.error("commit outcome unknown on %s %s: %s", getattr(request, "method", "?"),
                  getattr(request, "path", "?"), unknown[1])
        mark_fault_logged(request)
        exc = unknown[0]
    elif (busy := server_busy(exc)) is not None:  # the writer was busy past the wait: retry
        exc = busy
    fault = None if isinstance(exc, (LeaseholdError, drf.APIException)) else faults.classify(exc)
    if fault is not None:
        # The storage, not the request: 503 ServerBusy, the cause in one line.
        request = context.get("request")
        log.error("storage fault on %s %s: %s", getattr(request, "method", "?"), getattr(request, "path", "?"),
                  fault.cause)
        response = _domain_error(fault.error(), request_id)
        mark_fault_logged(request)  # not again by django.request
    elif isinstance(exc, LeaseholdError):
        response = _domain_error(exc, request_id)
    elif isinstance(exc, drf.APIException):
        response = _drf_error(exc, request_id)
    else:
        # A bug: keep the traceback, answer like the service would.
        request = context.get("request")
        log.exception("unhandled error on %s %s", getattr(request, "method", "?"),
                      getattr(request, "path", "?"), exc_info=exc)
        response = _response(500, "InternalError", MESSAGES["InternalError"], request_id)
    return response


def error_body(code: str, message: str, request_id: str, **extra) -> dict:
    """The JSON API's error body: the one shape of this door's errors."""
    return {"code": code, "message": message, "request_id": request_id, **extra}


SEPARATORS = (",", ":")  # compact, as DRF's JSONRenderer


def _response(status: int, code: str, message: str, request_id: str, **extra) -> JsonResponse:
    return JsonResponse(error_body(code, message, request_id, **extra), status=status, json_dumps_params={"separators": SEPARATORS})


def _domain_error(err: LeaseholdError, request_id: str) -> JsonResponse:
    extra = dict(err.detail)  # e.g. lease_state, retry_after, generation of a refused acquire
    if err.field:
        extra["field"] = HEADER_FIELDS.get(err.field, err.field)
    if err.value is not None:
        extra["value"] = err.value
    response = _response(err.status, err.code, err.message, request_id, **extra)
    if extra.get("retry_after") is not None:
        response["Retry-After"] = str(extra["retry_after"])
    return response


def _drf_error(exc: drf.APIException, request_id: str) -> JsonResponse:
    code = next(c for cls, c in (*DRF_CODES, (drf.APIException, "InvalidInput")) if isinstance(exc, cls))
    extra = {}
    message = MESSAGES.get(code)
    if isinstance(exc, drf.ValidationError):
        extra["errors"] = exc.detail
    elif message is None:  # DRF's own words, formatted (its default_detail may hold a {media_type})
        message = str(exc.detail)
    elif str(exc.detail) != str(exc.default_detail):
        extra["reason"] = str(exc.detail)  # e.g. why a CSRF check or a token failed
    response = _response(exc.status_code, code, message or str(exc.default_detail), request_id, **extra)
    if getattr(exc, "auth_header", None):
        response["WWW-Authenticate"] = exc.auth_header
    if isinstance(exc, drf.Throttled) and exc.wait is not None:
        response["Retry-After"] = str(max(1, math.ceil(exc.wait)))
    return response
