"""An acquire that waits, the doors' part (the server holds the waiting requests:
serving/waiting.py): a Leasehold extension that leaves Azure's semantics untouched, in which the
JSON API's acquire takes ``"wait": seconds`` and the Azure door's the ``x-leasehold-wait`` header
(0-60 seconds, integer or decimal; not ``x-ms-*``, which SharedKey signs, so a client adds it
without touching its signature, and Azure and Azurite ignore it). docs/development/architecture.md
("Waiting acquires") tells how the server and the doors share the work; one request, however long it
waited, is one history event."""

from __future__ import annotations

import math
import re
import time

from leases.domain.errors import LeaseholdError
from leases.domain.paths import API_LEASES

ENVIRON = "leasehold.wait"
HEADER_KEY = "HTTP_X_LEASEHOLD_WAIT"  # x-leasehold-wait
MAX_WAIT = 60
_NUMBER = re.compile(r"\d{1,2}(\.\d{1,6})?\Z")
MESSAGE = f"wait must be a number of seconds from 0 to {MAX_WAIT}."
ACQUIRE_PATH = API_LEASES + "acquire/"  # the JSON API's one lease action that may wait


def too_many(code: str) -> LeaseholdError:
    """The refusal past the bound of waiters per principal: the JSON API's
    429 TooManyRequests, the Azure door's 503 ServerBusy (what Azure answers
    when throttling, and the SDKs retry); both with Retry-After: 1."""
    return LeaseholdError(code, message="Too many requests of this principal are waiting for a lease; "
                                        "retry, or wait less.", detail={"retry_after": 1})


class Wait:
    """One request's wait, across its attempts. The server sets
    ``registry`` (what bounds waiters per principal: ``reserve(principal)``
    -> bool) and ``final``; the door sets the rest."""

    __slots__ = ("registry", "final", "until", "principal", "key", "ends_at", "seq", "woken", "queued")

    def __init__(self, registry):
        self.registry = registry
        self.final = False  # the last attempt: its refusal is recorded
        self.until: float | None = None  # time.monotonic() when the wait runs out
        self.principal: str | None = None  # set once a waiter's place is reserved
        self.key: str | None = None  # set by a quiet refusal: the resource it waits for
        self.ends_at = None  # ... and when the state that blocks it ends by itself (None: never)
        self.seq = 0  # the server's signal count before the attempt
        self.woken = None  # the server's future
        self.queued: str | None = None  # the key of the queue it waits in


def asked_by_header(environ: dict, body: bytes) -> bool:
    """Whether an Azure lease request asks to wait: it sends ``x-leasehold-wait``
    (its value checked by the door). The server's question before the door's."""
    return bool(environ.get(HEADER_KEY))


def asked_in_json(environ: dict, body: bytes) -> bool:
    """Whether a JSON lease request asks to wait: an acquire whose body is an
    object with a ``"wait"`` key, however the key is written (``"\\u0077ait"``
    too: decoded, as the door decodes it; a body it cannot decode the door
    answers 400). The server's question before the door's."""
    if not environ.get("PATH_INFO", "").startswith(ACQUIRE_PATH):
        return False
    import json

    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(data, dict) and "wait" in data


def seconds_from_header(meta: dict) -> float | None:
    """``x-leasehold-wait`` as seconds; None if absent; 400 InvalidHeaderValue if not 0-60."""
    value = meta.get(HEADER_KEY)
    if value in (None, ""):
        return None
    text = value.strip()
    if not _NUMBER.match(text) or float(text) > MAX_WAIT:
        raise LeaseholdError("InvalidHeaderValue", field="wait", value=value, message=MESSAGE)
    return float(text)


def seconds_from_json(value) -> float | None:
    """``"wait"`` of a JSON acquire as seconds: a JSON number 0-60 (not a
    string, boolean, NaN or infinity); None if absent or null."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= MAX_WAIT:
        import json

        raise LeaseholdError("InvalidHeaderValue", field="wait", value=json.dumps(value), message=MESSAGE)
    return float(value)


def may_wait(meta: dict, seconds: float | None, principal: str, too_many: LeaseholdError) -> bool:
    """Whether this attempt may wait (its refusal for a held lease is then
    quiet). The first attempt that may reserves the principal's waiter
    place, or is refused with ``too_many`` (nothing else is done or recorded,
    like a rate limit)."""
    wait = meta.get(ENVIRON)
    if not seconds or wait is None or wait.final:
        return False
    if wait.until is None:
        wait.until = meta.get("leasehold.received_at", time.monotonic()) + seconds
    if wait.principal is None:
        if not wait.registry.reserve(principal):
            raise too_many
        wait.principal = principal
    return time.monotonic() < wait.until


def note(meta: dict, error: BaseException | None) -> None:
    """After the service: a quiet refusal tells the server what to wait for."""
    wait = meta.get(ENVIRON)
    if wait is not None and isinstance(error, LeaseholdError) and error.waiting:
        wait.key, wait.ends_at = error.wait_key, error.ends_at
