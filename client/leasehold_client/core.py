"""The client's sans-IO core: the state and decisions of every helper, with no I/O.

An auto-renewed lease (when to renew, how long to trust it, what a failed
acquire or renewal means, when it is lost), do_once (whether it is done, how
long to wait before trying again) and once_per (which period it is, whether
it is due, what to record, how long to sleep) are decided here from the times
and results the caller passes in, and answered as values: a delay, an action,
a reason. The sync (threads) and asyncio shells perform the requests and
waits these decisions ask for, so a fix to a decision lands once, for both.
"""

from __future__ import annotations

import enum
import math
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ._common import (
    INFINITE,
    SERVER_WAIT,
    ServerWait,
    Timing,
    backoff,
    is_conflict,
    is_not_found,
    is_transient,
    jittered,
    retry_after,
)

# Our own loops decide when to retry lease calls (within the lease's time),
# so the SDK's retry policy must not add its own waits to them.
NO_SDK_RETRY: dict[str, Any] = {"retry_total": 0}
MAX_CREATES = 3
DEADLINE_PASSED = "the local deadline passed without a renewal"


def describe(exc: BaseException) -> str:
    """A refusal as "status code", any other error as "type: message"."""
    code = getattr(exc, "error_code", None)
    status = getattr(exc, "status_code", None)
    return f"{status} {code}" if code else f"{type(exc).__name__}: {exc}"


def name_of(client) -> str:
    """container/blob (or container) of a blob or container client, for logs."""
    blob = getattr(client, "blob_name", None)
    return f"{client.container_name}/{blob}" if blob else client.container_name


def creates_container(client, exc: BaseException) -> bool:
    """Whether a missing lease target needs its container created (a
    container lease, or a blob whose container is missing)."""
    return not is_blob(client) or getattr(exc, "error_code", None) == "ContainerNotFound"


def is_blob(client) -> bool:
    return hasattr(client, "blob_name")


def already_there(exc: BaseException) -> bool:
    """A create lost a race harmlessly: it exists, or someone already leases it."""
    return getattr(exc, "status_code", None) in (409, 412)


class Do(enum.Enum):
    """What an acquire loop does after a failed attempt."""

    CREATE = "create the missing container or blob, then try again at once"
    WAIT = "wait the step's delay (or until cancelled), then try again"
    GIVE_UP = "someone else holds the lease and no time is left: not acquired"
    RAISE = "raise the error"


@dataclass(frozen=True)
class Step:
    do: Do
    delay: float = 0.0


class Acquiring:
    """One acquire() call: how long it may wait, what to send, and what each
    failed attempt means (create, wait and try again, give up, raise)."""

    def __init__(self, lease: LeaseCore, now: float):
        self.lease = lease
        self.until = None if lease.timeout is None else now + lease.timeout
        self.attempt = 0
        self.creates = 0

    def left(self, now: float) -> float:
        return float("inf") if self.until is None else self.until - now

    def options(self, now: float, cancelled: bool, real_now: float) -> dict:
        """The acquire request's extra keyword arguments (asking Leasehold to
        hold it until the lease is free, while time is left and not cancelled)."""
        return self.lease.server_wait.options(0.0 if cancelled else self.left(now), real_now)

    def failed(self, exc: BaseException, now: float, real_now: float) -> Step:
        lease, poll = self.lease, self.lease.poll_interval
        if is_not_found(exc) and lease.create and self.creates < MAX_CREATES:
            self.creates += 1
            return Step(Do.CREATE)
        if is_conflict(exc) and lease.server_wait.refused(exc, real_now):
            delay = 0.0  # the server held the request until its wait ran out: ask again
        elif is_conflict(exc):
            after = retry_after(exc)
            # Retry-After (when the server says when it ends), never later than
            # the next poll, plus a little jitter so that waiters do not all
            # arrive in the same instant.
            delay = backoff(self.attempt, first=0.5, cap=poll) if after is None else \
                min(after, poll) + jittered(min(1.0, poll / 4))
        elif is_transient(exc):
            delay = backoff(self.attempt, first=0.2, cap=poll)
        else:
            return Step(Do.RAISE)
        left = self.left(now)
        if left <= 0:
            return Step(Do.GIVE_UP if is_conflict(exc) else Do.RAISE)
        self.attempt += 1
        return Step(Do.WAIT, min(delay, left))


class LeaseCore:
    """The state of one auto-renewed lease and its decisions; every time is
    the caller's monotonic clock reading (``now``).

    Its local deadline is the time the last successful acquire or renew
    request was *sent*, plus the duration, minus the safety margin: the
    server started its own countdown no earlier, so the lease counts as lost
    strictly before the server could grant it to anyone else.
    """

    def __init__(self, duration: int = 60, *, timeout: float | None = 0.0, renew_interval: float | None = None,
                 safety_margin: float | None = None, poll_interval: float | None = None, create: bool = True,
                 lease_id: str | None = None):
        self.timing = Timing.for_duration(duration, renew_interval, safety_margin)
        self.timeout = timeout
        # Longest wait between two acquire attempts while someone else holds it.
        self.poll_interval = float(poll_interval) if poll_interval is not None else (
            5.0 if duration == INFINITE else max(1.0, min(5.0, duration / 4)))
        self.create = create
        self.lease_id = lease_id or str(uuid.uuid4())
        self.generation: int | None = None
        self.has_lease = False
        self.renewals = 0
        self.acquired_at: float | None = None
        self.lost_reason: str | None = None
        self.lost_at: float | None = None
        self.server_wait = ServerWait()
        self.released = False
        self.deadline = float("-inf")
        self.next_renewal = float("inf")
        self.renew_attempt = 0

    # -- acquiring

    def start_acquire(self, now: float) -> Acquiring | None:
        """The decisions of an acquire() starting now; None if already held."""
        if self.released:
            raise RuntimeError("this lease was released: use a new AutoRenewLease to acquire again")
        return None if self.has_lease else Acquiring(self, now)

    def granted(self, sent: float, generation: int | None) -> bool:
        """Acquired by a request sent at ``sent``; whether it must be renewed."""
        self.has_lease = True
        self.acquired_at = sent
        self.deadline = self.timing.deadline(sent)
        self.generation = generation
        self.next_renewal = sent + self.timing.renew_interval
        return self.timing.duration != INFINITE

    # -- holding

    @property
    def is_lost(self) -> bool:
        return self.lost_reason is not None

    @property
    def over(self) -> bool:
        """Lost or released: renewing and watching end."""
        return self.is_lost or self.released

    def remaining_at(self, now: float) -> float:
        return self.deadline - now if self.has_lease else 0.0

    def expired(self, now: float) -> bool:
        """Held, not yet counted lost, and the local deadline has passed."""
        return self.has_lease and not self.over and now >= self.deadline

    def why_not_held(self) -> str | None:
        """Why check() raises (after ``expired`` was acted on), or None."""
        if not self.has_lease:
            return "the lease was not acquired"
        if self.released:
            return "the lease was released"
        return self.lost_reason

    def lose(self, reason: str, now: float) -> bool:
        """Count the lease lost; whether this call did (the shell then tells its user)."""
        if self.over:
            return False
        self.lost_reason, self.lost_at = reason, now
        return True

    def watch(self, now: float) -> float | None:
        """Seconds the deadline watcher sleeps, or None: the deadline passed."""
        left = self.deadline - now
        return left if left > 0 else None

    # -- renewing

    def renewal_timeout(self, now: float) -> float:
        """Longest a renew request may take: a hung request must not outlive
        the lease by much."""
        return max(1.0, min(self.timing.renew_interval, self.deadline - now))

    def renewed(self, sent: float) -> bool:
        """A renew request sent at ``sent`` succeeded; False if the lease was lost meanwhile."""
        if self.is_lost:
            return False
        self.deadline = max(self.deadline, self.timing.deadline(sent))
        self.renewals += 1
        self.renew_attempt = 0
        self.next_renewal = sent + self.timing.renew_interval
        return True

    def renewal_failed(self, exc: BaseException, now: float, transient: bool | None = None) -> float | str:
        """After a failed renew request: seconds to wait before trying again
        (a transient failure while the deadline is ahead), or the reason the
        lease is lost (refused, or transient failures until the deadline)."""
        transient = is_transient(exc) if transient is None else transient
        if transient and now < self.deadline:
            delay = backoff(self.renew_attempt, first=0.25, cap=self.timing.renew_interval / 4)
            self.renew_attempt += 1
            return min(delay, self.deadline - now)
        if transient:
            return f"{DEADLINE_PASSED} (last error: {describe(exc)})"
        return f"renewal refused: {describe(exc)}"

    # -- releasing

    def releasing(self) -> bool:
        """Stop renewing; whether a release request is to be sent."""
        if not self.has_lease or self.released:
            return False
        self.released = True
        return True

    def state(self) -> str:
        return "lost" if self.is_lost else "held" if self.has_lease and not self.released else "not held"


# -- do_once

PROGRESS_KEY = "progress"  # lower case: metadata names lose their case on some servers
DONE = "done"


class Once:
    """The decisions of one do_once call, from the blob's metadata (None:
    no blob yet) and whether the server held the last acquire."""

    def __init__(self, *, key: str, poll_interval: float, lease_options: dict):
        self.key = key
        self.poll_interval = poll_interval
        self.lease_options = lease_options
        self.attempt = 0
        self.server_waits = False

    def done(self, metadata: dict | None) -> bool:
        return metadata is not None and metadata.get(self.key) == DONE

    def options(self) -> dict:
        """The lease's options: once the server was seen to hold an acquire
        until the runner releases, wait on it there instead of polling."""
        if self.server_waits:
            return {"timeout": SERVER_WAIT, "poll_interval": self.poll_interval, **self.lease_options}
        return self.lease_options

    def finished(self, metadata: dict) -> dict:
        """The metadata that marks the blob done."""
        return {**metadata, self.key: DONE}

    def not_acquired(self, server_waits: bool) -> float:
        """Seconds to sleep before looking again (0: the server waits, no sleep)."""
        self.server_waits = server_waits
        if server_waits:
            return 0.0
        delay = backoff(self.attempt, first=0.5, cap=self.poll_interval)
        self.attempt += 1
        return delay


# -- once_per

LAST_RUN_KEY = "lastrun"


class Periods:
    """once_per's decisions: periods are numbered slots of wall-clock time,
    ``floor(time / period)``; the blob's metadata keeps the last slot run."""

    def __init__(self, period: float, *, key: str = LAST_RUN_KEY, poll_interval: float | None = None):
        if period <= 0:
            raise ValueError("period must be positive")
        self.period = float(period)
        self.key = key
        # How often instances look whether this period's run happened yet
        # (someone else may be running it, or may have crashed).
        self.poll_interval = poll_interval if poll_interval is not None else min(self.period / 4, 15.0)

    def slot_at(self, wall: float) -> int:
        return math.floor(wall / self.period)

    def recorded(self, metadata: dict | None) -> int | None:
        """The last slot run, from the blob's metadata."""
        try:
            return int(metadata[self.key]) if metadata and self.key in metadata else None
        except ValueError:
            return None

    def is_due(self, metadata: dict | None, slot: int) -> bool:
        last = self.recorded(metadata)
        return last is None or last < slot

    def record(self, metadata: dict, slot: int, wall: float) -> dict:
        """The metadata that records ``slot`` as run (and when, for people)."""
        at = datetime.fromtimestamp(wall, timezone.utc).isoformat()
        return {**metadata, self.key: str(slot), self.key + "at": at}

    def pause(self, pending: bool, wall: float) -> float:
        """Seconds until the next tick: the next period's start, a little
        past and spread so instances do not all arrive at once; sooner, every
        poll interval, while this period's run is not recorded."""
        to_next = (self.slot_at(wall) + 1) * self.period - wall
        if pending:
            return max(0.0, min(to_next, jittered(self.poll_interval)))
        return max(0.0, to_next) + jittered(min(1.0, self.period / 20))


# -- leader election

class Election:
    """What an election says about this process: ``term`` (the current
    lease, None between terms), ``transitions`` (elections plus terms ended)
    and ``elected_at`` (when the term began, Unix time)."""

    def __init__(self) -> None:
        self.term: LeaseCore | None = None
        self.transitions = 0
        self.elected_at: float | None = None

    def elected(self, term: LeaseCore, wall: float) -> None:
        self.term, self.elected_at = term, wall
        self.transitions += 1

    def deposed(self) -> None:
        self.term, self.elected_at = None, None
        self.transitions += 1
