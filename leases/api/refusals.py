"""The JSON API's answers to requests the server refused before the door handled them
(leases/domain/refusals.py): its error body (exceptions.error_body), built without Django's
response, since a flood past its address's bound is answered with these on the event loop; a
refused credential carries the door's challenge, as its authentication classes send it."""

from __future__ import annotations

import json

from leases.api.authentication import CHALLENGE
from leases.api.exceptions import SEPARATORS, error_body
from leases.domain import guids
from leases.domain.errors import MESSAGES
from leases.domain.refusals import Refusal

CREDENTIALS = (401, 403)


def refusal(refused: Refusal, environ: dict | None) -> tuple[int, list[tuple[str, str]], bytes]:
    """The whole answer to ``refused``: status, headers, body. ``environ``:
    the request's, or None before it was routed (the front's limits)."""
    request_id = guids.request_id()
    extra = {"reason": refused.reason} if refused.reason else {}
    message = refused.message or MESSAGES.get(refused.code, refused.code)
    body = json.dumps(error_body(refused.code, message, request_id, **extra), separators=SEPARATORS).encode()
    headers = [("Content-Type", "application/json"), ("X-Request-Id", request_id)]
    if refused.retry_after is not None:
        headers.append(("Retry-After", str(refused.retry_after)))
    if refused.status in CREDENTIALS:
        headers.append(("WWW-Authenticate", CHALLENGE))
    return refused.status, headers, body
