"""The Azure door's answers to requests the server refused before the door handled them
(leases/domain/refusals.py), in Azure's shape: a flood past its address's bound, or a head too
large, is answered by the error body of wire.py without Django's response (on the event loop, many
a second); a refused credential by the door's one exception handler, as the door answers it."""

from __future__ import annotations

import functools
from datetime import datetime, timezone

from django.core.handlers.wsgi import get_path_info

from leases.azure import lease_request, wire
from leases.azure.exceptions import azure_exception_handler
from leases.domain import guids
from leases.domain.errors import LeaseholdError
from leases.domain.refusals import Refusal
from leases.operations.handling import LeanRequest

CREDENTIALS = (401, 403)
# Azure has no 429: a request throttled is 503 ServerBusy with Retry-After (as its account limits answer).
THROTTLED = (503, "ServerBusy")


def refusal(refused: Refusal, environ: dict | None) -> tuple[int, list[tuple[str, str]], bytes]:
    """The whole answer to ``refused``: status, headers, body. ``environ``:
    the request's, or None before it was routed (the front's limits)."""
    if refused.status in CREDENTIALS and environ is not None:
        response = _refused(environ, refused.error or LeaseholdError(refused.code))
        return response.status_code, list(response.items()), response.content
    status, code = THROTTLED if refused.status == 429 else (refused.status, refused.code)
    request_id = guids.request_id()
    body = wire.error_document(_error(code, refused.message), request_id=request_id,
                               now=datetime.now(timezone.utc)).encode()
    headers = [("Content-Type", "application/xml"), ("x-ms-error-code", code), ("x-ms-request-id", request_id),
               ("x-ms-version", wire.DEFAULT_VERSION)]
    if refused.retry_after is not None:
        headers.append(("Retry-After", str(refused.retry_after)))
    return status, headers, body


@functools.lru_cache(maxsize=64)
def _error(code: str, message: str) -> LeaseholdError:
    """The error of serving's refusals, made once per code and words (they are serving's constants)."""
    return LeaseholdError(code, message=message or None)


def _refused(environ: dict, error: Exception):
    """The door's answer (an HttpResponse) to a request whose credentials the
    server refused before it queued (leases/auth/principals.py), by the one
    exception handler. Not logged here: the server logs such refusals once in
    a while per address."""
    request = LeanRequest(environ.get("REQUEST_METHOD", "PUT"), get_path_info(environ), environ)
    request.request_id = guids.request_id()
    response = azure_exception_handler(error, {"view": request, "request": request})
    return lease_request.finish(response, environ, request_id=request.request_id, method=request.method)
