"""What the sync and asyncio forms share: error classes, which failures are
worth retrying, back-off with jitter, and reading Leasehold's response
headers. No I/O here."""

from __future__ import annotations

import random
from dataclasses import dataclass

from azure.core.exceptions import (
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)

GENERATION_HEADER = "Leasehold-Generation"
# Leasehold's extension: an acquire waits on the server for a held lease
# (up to 60 s) instead of being polled; Azure and Azurite ignore the header.
WAIT_HEADER = "x-leasehold-wait"
# Longest wait asked per request: also how late a stop() (cancel) can be
# noticed by a helper waiting for a lease.
SERVER_WAIT = 20.0

# Lease durations Azure accepts; -1 is infinite.
MIN_DURATION, MAX_DURATION, INFINITE = 15, 60, -1

# Acquire refused because someone else holds (or is breaking) the lease.
CONFLICT_CODES = {"LeaseAlreadyPresent", "LeaseIsBreakingAndCannotBeAcquired"}
# Statuses that say nothing about the lease: try again while time remains.
TRANSIENT_STATUSES = {408, 429, 500, 502, 503, 504}


class LeaseLostError(RuntimeError):
    """The lease is not (or may no longer be) held: stop the work it guards."""


def validate_duration(duration: int) -> int:
    if duration != INFINITE and not MIN_DURATION <= duration <= MAX_DURATION:
        raise ValueError(f"lease duration must be {MIN_DURATION}-{MAX_DURATION} seconds or -1, not {duration}")
    return duration


@dataclass(frozen=True)
class Timing:
    """When to renew and how long to trust a lease locally.

    renew_interval: seconds between renewals (default: a third of the
        duration, so two further attempts fit before the lease runs out;
        the seed renews a 60 s lease every 40 s, which leaves only one).
    safety_margin: seconds the local deadline keeps before the server's
        expiry, for the time between check() and the work it allows.
    """

    duration: int
    renew_interval: float
    safety_margin: float

    @classmethod
    def for_duration(cls, duration: int, renew_interval: float | None = None,
                     safety_margin: float | None = None) -> "Timing":
        validate_duration(duration)
        if duration == INFINITE:
            return cls(duration, float("inf"), 0.0)
        margin = min(2.0, duration / 10) if safety_margin is None else float(safety_margin)
        interval = duration / 3 if renew_interval is None else float(renew_interval)
        if not 0 <= margin < duration:
            raise ValueError("safety_margin must be at least 0 and below the duration")
        if not 0 < interval < duration - margin:
            raise ValueError("renew_interval must be positive and leave time before the local deadline")
        return cls(duration, interval, margin)

    def deadline(self, sent_at: float) -> float:
        """Local deadline of a lease granted or renewed by a request sent at
        ``sent_at`` (monotonic): the server started its duration no earlier."""
        if self.duration == INFINITE:
            return float("inf")
        return sent_at + self.duration - self.safety_margin


def is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, HttpResponseError) and getattr(exc, "error_code", None) in CONFLICT_CODES


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ResourceNotFoundError)


def is_transient(exc: BaseException) -> bool:
    """Network trouble or a server-side failure: says nothing about the lease."""
    if isinstance(exc, (ServiceRequestError, ServiceResponseError)):
        return True
    if isinstance(exc, HttpResponseError):
        return exc.status_code in TRANSIENT_STATUSES or exc.status_code is None
    return isinstance(exc, (ConnectionError, TimeoutError, OSError))


def retry_after(exc: BaseException) -> float | None:
    """Seconds from a Retry-After header on the refusal, if the server sent
    one (Leasehold's JSON API does on a refused acquire)."""
    response = getattr(exc, "response", None)
    value = response.headers.get("Retry-After") if response is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def generation_of(http_response) -> int | None:
    """Leasehold's fencing generation from a response; None elsewhere."""
    value = http_response.headers.get(GENERATION_HEADER)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def is_leasehold(exc: BaseException) -> bool:
    """Whether a refusal came from Leasehold (its Server header), which can
    hold an acquire until the lease is free (WAIT_HEADER)."""
    response = getattr(exc, "response", None)
    return response is not None and (response.headers.get("Server") or "").startswith("Leasehold")


class ServerWait:
    """Whether an acquire loop asks the server to hold the request until the
    lease is free, and whether it may then try again at once. Asked until
    the answers show a server that does not hold it (Azure and Azurite ignore
    the header and answer at once): from then on it polls, as it would against Azure."""

    def __init__(self):
        self.leasehold: bool | None = None  # a refusal's Server header said so
        self.holds: bool | None = None  # an acquire that asked was held (not answered at once)
        self.asked = 0.0
        self.sent = 0.0

    def options(self, left: float, now: float) -> dict:
        """The acquire call's extra keyword arguments, ``left`` seconds to wait."""
        self.sent, self.asked = now, 0.0
        if self.leasehold is False or self.holds is False or left < 0.5:
            return {}
        self.asked = min(left, SERVER_WAIT)
        return {"headers": {WAIT_HEADER: f"{self.asked:.1f}"}, "read_timeout": self.asked + 30}

    def refused(self, exc: BaseException, now: float) -> bool:
        """After a conflict: whether to ask again at once (the server held this one)."""
        self.leasehold = is_leasehold(exc)
        if self.asked:
            self.holds = self.leasehold and now - self.sent >= 0.9 * self.asked
        return bool(self.asked and self.holds)

    @property
    def worth_asking(self) -> bool:
        return bool(self.leasehold) and self.holds is not False


def jittered(seconds: float, rng: random.Random | None = None) -> float:
    """seconds, spread over [0.5, 1.0] x seconds so that waiters do not move
    in lockstep (and never later than asked)."""
    return seconds * (0.5 + 0.5 * (rng or random).random())


def backoff(attempt: int, *, first: float, cap: float) -> float:
    """Exponential back-off for attempt 0, 1, 2, ... capped, with jitter."""
    return jittered(min(cap, first * 2 ** attempt))
