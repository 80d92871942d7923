"""The lease state machine, pure functions with no Django and no I/O: a stored record, an action,
its parameters and ``now`` give an ``Outcome`` (the new record and the response) or a
``LeaseholdError`` carrying the Azure code, cell by cell as docs/reference/azure-compatibility.md
§3.2 (lease operations) and §4.2 (reads and writes under a lease) say. A record stores absolute
deadlines and the state a client sees is derived from them and ``now`` (``effective_state``), so
nothing depends on a background thread; docs/development/architecture.md ("The state machine") tells
what differs between blobs and containers and what ``legacy=True`` (x-ms-version before 2012-02-12)
changes."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from leases.domain.errors import LeaseholdError

AVAILABLE, LEASED, EXPIRED, BREAKING, BROKEN = "available", "leased", "expired", "breaking", "broken"
STATES = (AVAILABLE, LEASED, EXPIRED, BREAKING, BROKEN)
LOCKED_STATES = (LEASED, BREAKING)
ACTIONS = ("acquire", "renew", "change", "release", "break")

INFINITE = -1
MIN_DURATION, MAX_DURATION = 15, 60
MIN_BREAK_PERIOD, MAX_BREAK_PERIOD = 0, 60
LEGACY_DURATION = 60  # every lease before 2012-02-12 was one minute
LEGACY_ACTIONS = ("acquire", "renew", "release", "break")  # change came with 2012-02-12
LEGACY_REASON = "This operation or header requires x-ms-version 2012-02-12 or later."

BLOB, CONTAINER = "blob", "container"


@dataclass(frozen=True)
class LeaseRecord:
    """What is stored for one resource's lease.

    ``state`` is the stored state: ``available``, ``leased``, ``breaking`` or
    ``broken`` (``expired`` is never stored; it is a leased record past its
    deadline). ``lease_id`` is kept after expiry and breaking, as Azure keeps
    it, until a release, a blob write or a new lease replaces it.
    """

    state: str = AVAILABLE
    lease_id: uuid.UUID | None = None
    duration: int | None = None  # seconds, or INFINITE; kept after expiry for renew
    expires_at: datetime | None = None  # fixed leases only
    break_at: datetime | None = None  # breaking leases only
    generation: int = 0  # fencing token: +1 for every new lease


@dataclass(frozen=True)
class Outcome:
    record: LeaseRecord  # what to store
    state_before: str
    state_after: str
    lease_id: uuid.UUID | None = None  # the x-ms-lease-id to answer with
    lease_time: int | None = None  # break only: seconds until broken


# ---------------------------------------------------------------- reading

def effective_state(record: LeaseRecord, now: datetime) -> str:
    if record.state == LEASED:
        if record.duration == INFINITE or (record.expires_at is not None and now < record.expires_at):
            return LEASED
        return EXPIRED
    if record.state == BREAKING:
        if record.break_at is not None and now < record.break_at:
            return BREAKING
        return BROKEN
    return record.state


def lease_status(state: str) -> str:
    return "locked" if state in LOCKED_STATES else "unlocked"


def duration_type(record: LeaseRecord, state: str) -> str | None:
    """``infinite`` or ``fixed`` while leased; absent in every other state."""
    if state != LEASED:
        return None
    return "infinite" if record.duration == INFINITE else "fixed"


def seconds_left(deadline: datetime | None, now: datetime) -> int:
    """Whole seconds until ``deadline``, rounded up so a client that waits
    that long never arrives early."""
    if deadline is None:
        return 0
    return max(0, math.ceil((deadline - now).total_seconds()))


def deadline(record: LeaseRecord, now: datetime) -> datetime | None:
    """When the state at ``now`` ends by itself: a fixed lease's expiry while
    leased, the break period's end while breaking; None for an infinite lease
    or an unlocked one. Every door asks here (admin.common.DeadlineOrder is
    the same rule in SQL, for sorting)."""
    state = effective_state(record, now)
    if state == LEASED:
        return record.expires_at
    if state == BREAKING:
        return record.break_at
    return None


def seconds_remaining(record: LeaseRecord, now: datetime) -> int | None:
    """Whole seconds (rounded up) until the lease stops locking the resource:
    0 if it does not lock it now, None for an infinite lease."""
    if effective_state(record, now) not in LOCKED_STATES:
        return 0
    end = deadline(record, now)
    return None if end is None else seconds_left(end, now)


# ---------------------------------------------------------------- parsing

def parse_guid(value: str | None, field: str, *, noun: str = BLOB) -> uuid.UUID | None:
    """Lease ids are GUIDs in any .NET format (32 digits, hyphenated, braces,
    parentheses), compared by value and answered lower-case hyphenated."""
    if value is None:
        return None
    text = value.strip()
    if text[:1] + text[-1:] in ("{}", "()"):
        text = text[1:-1]
    if len(text) not in (32, 36):
        raise LeaseholdError("InvalidHeaderValue", noun=noun, field=field, value=value)
    try:
        return uuid.UUID(text)
    except ValueError:
        raise LeaseholdError("InvalidHeaderValue", noun=noun, field=field, value=value) from None


def check_duration(duration: int | None, *, noun: str) -> int:
    if duration is None:
        raise LeaseholdError("MissingRequiredHeader", noun=noun, field="duration")
    if duration != INFINITE and not MIN_DURATION <= duration <= MAX_DURATION:
        raise LeaseholdError("InvalidHeaderValue", noun=noun, field="duration", value=str(duration))
    return duration


def check_break_period(period: int | None, *, noun: str) -> int | None:
    if period is not None and not MIN_BREAK_PERIOD <= period <= MAX_BREAK_PERIOD:
        raise LeaseholdError("InvalidHeaderValue", noun=noun, field="break_period", value=str(period))
    return period


def require(value, field: str, *, noun: str):
    if value is None:
        raise LeaseholdError("MissingRequiredHeader", noun=noun, field=field)
    return value


# ---------------------------------------------------------------- lease operations

def _outcome(before: str, record: LeaseRecord, now: datetime, **kw) -> Outcome:
    return Outcome(record=record, state_before=before, state_after=effective_state(record, now), **kw)


def _leased(lease_id: uuid.UUID, duration: int, now: datetime, generation: int) -> LeaseRecord:
    expires = None if duration == INFINITE else now + timedelta(seconds=duration)
    return LeaseRecord(LEASED, lease_id, duration, expires, None, generation)


def acquire(record: LeaseRecord, now: datetime, *, duration: int | None,
            proposed_id: uuid.UUID | None, new_id: uuid.UUID, noun: str = BLOB,
            legacy: bool = False) -> Outcome:
    """``new_id`` is the id to use when none is proposed (the caller draws it,
    keeping this function deterministic). Legacy: a 60 s lease under an id
    the service draws, exactly the current acquire(60, no proposed id)."""
    if legacy:
        check_legacy("acquire", noun=noun, duration=duration, proposed_id=proposed_id)
        duration = LEGACY_DURATION
    duration = check_duration(duration, noun=noun)
    state = effective_state(record, now)
    if state == LEASED:
        if proposed_id is None or proposed_id != record.lease_id:
            raise LeaseholdError("LeaseAlreadyPresent", noun=noun)
        # Same id again: the same lease with a new duration, not a new lease.
        new = _leased(record.lease_id, duration, now, record.generation)
        return _outcome(state, new, now, lease_id=new.lease_id)
    if state == BREAKING:
        code = "LeaseIsBreakingAndCannotBeAcquired" if proposed_id == record.lease_id else "LeaseAlreadyPresent"
        raise LeaseholdError(code, noun=noun)
    new = _leased(proposed_id or new_id, duration, now, record.generation + 1)
    return _outcome(state, new, now, lease_id=new.lease_id)


def renew(record: LeaseRecord, now: datetime, *, lease_id: uuid.UUID | None, noun: str = BLOB,
          legacy: bool = False) -> Outcome:
    """Legacy: a released lease renews too, as an expired one does, until a
    write or another lease makes the blob forget its id; not one broken before
    its release: the break ended its time, and a release does not give it back."""
    if legacy:
        check_legacy("renew", noun=noun)
    lease_id = require(lease_id, "lease_id", noun=noun)
    state = effective_state(record, now)
    if legacy and released(record, now) and lease_id == record.lease_id:
        if record.duration is None:  # broken (or breaking) when it was released
            raise LeaseholdError("LeaseIsBrokenAndCannotBeRenewed", noun=noun)
        new = _leased(record.lease_id, record.duration, now, record.generation)
        return _outcome(state, new, now, lease_id=new.lease_id)
    if state == AVAILABLE or lease_id != record.lease_id:
        raise LeaseholdError("LeaseIdMismatchWithLeaseOperation", noun=noun)
    if state in (BREAKING, BROKEN):
        raise LeaseholdError("LeaseIsBrokenAndCannotBeRenewed", noun=noun)
    # leased (clock reset; infinite: no-op) or expired (the same lease resumes)
    assert record.duration is not None  # a lease held or expired has its duration
    new = _leased(record.lease_id, record.duration, now, record.generation)
    return _outcome(state, new, now, lease_id=new.lease_id)


def change(record: LeaseRecord, now: datetime, *, lease_id: uuid.UUID | None,
           proposed_id: uuid.UUID | None, noun: str = BLOB, legacy: bool = False) -> Outcome:
    if legacy:
        check_legacy("change", noun=noun)  # raises: no change before 2012-02-12
    lease_id = require(lease_id, "lease_id", noun=noun)
    proposed_id = require(proposed_id, "proposed_lease_id", noun=noun)
    state = effective_state(record, now)
    if state in (AVAILABLE, BROKEN, EXPIRED):
        raise LeaseholdError("LeaseNotPresentWithLeaseOperation", noun=noun)
    if state == BREAKING:
        code = "LeaseIsBreakingAndCannotBeChanged" if lease_id == record.lease_id else "LeaseIdMismatchWithLeaseOperation"
        raise LeaseholdError(code, noun=noun)
    # Idempotent: proposing the current id succeeds whatever id is presented.
    if lease_id != record.lease_id and proposed_id != record.lease_id:
        raise LeaseholdError("LeaseIdMismatchWithLeaseOperation", noun=noun)
    new = replace(record, lease_id=proposed_id)  # the deadline is kept
    return _outcome(state, new, now, lease_id=proposed_id)


def release(record: LeaseRecord, now: datetime, *, lease_id: uuid.UUID | None, noun: str = BLOB,
            legacy: bool = False) -> Outcome:
    """Legacy: the blob is available at once, but remembers the id (and its
    duration) so that the holder may still renew or break it. Releasing a
    released lease again succeeds and changes nothing, as for an expired
    lease, whose id old versions kept the same way."""
    if legacy:
        check_legacy("release", noun=noun)
    lease_id = require(lease_id, "lease_id", noun=noun)
    state = effective_state(record, now)
    if legacy and released(record, now) and lease_id == record.lease_id:
        return _outcome(state, record, now)
    if state == AVAILABLE or lease_id != record.lease_id:
        raise LeaseholdError("LeaseIdMismatchWithLeaseOperation", noun=noun)
    if legacy:
        return _outcome(state, LeaseRecord(AVAILABLE, record.lease_id, record.duration, None, None,
                                           record.generation), now)
    return _outcome(state, _available(record), now)


def break_(record: LeaseRecord, now: datetime, *, period: int | None, noun: str = BLOB,
           legacy: bool = False) -> Outcome:
    """``period`` None means "no x-ms-lease-break-period": a fixed lease
    breaks at its expiry, an infinite one at once. An explicit 0 is not None.

    Legacy: no period (the lease runs out its own time); a released lease
    breaks at once; a breaking or broken one is 409 LeaseAlreadyBroken."""
    if legacy:
        check_legacy("break", noun=noun, break_period=period)
    period = check_break_period(period, noun=noun)
    state = effective_state(record, now)
    if legacy and released(record, now):
        return _outcome(state, _broken(record), now, lease_time=0)
    if legacy and state in (BREAKING, BROKEN):
        raise LeaseholdError("LeaseAlreadyBroken", noun=noun)
    if state == AVAILABLE:
        raise LeaseholdError("LeaseNotPresentWithLeaseOperation", noun=noun)
    if state == LEASED:
        if period is None:
            break_at = record.expires_at  # None for an infinite lease: at once
        else:
            break_at = now + timedelta(seconds=period)
            if record.expires_at is not None:
                break_at = min(break_at, record.expires_at)
    elif state == BREAKING:
        break_at = record.break_at
        assert break_at is not None  # a breaking lease has its moment
        if period is not None:
            break_at = min(break_at, now + timedelta(seconds=period))  # only shortens
    else:  # broken or expired: broken now, idempotently
        break_at = None
    if break_at is None or break_at <= now:
        new = _broken(record)
    else:
        new = LeaseRecord(BREAKING, record.lease_id, None, None, break_at, record.generation)
    return _outcome(state, new, now, lease_time=seconds_left(new.break_at, now))


def _available(record: LeaseRecord) -> LeaseRecord:
    return LeaseRecord(generation=record.generation)


def _broken(record: LeaseRecord) -> LeaseRecord:
    return LeaseRecord(BROKEN, record.lease_id, None, None, None, record.generation)


def released(record: LeaseRecord, now: datetime) -> bool:
    """Released by a legacy request: available, but the id is remembered."""
    return record.lease_id is not None and effective_state(record, now) == AVAILABLE


def check_legacy(action: str | None, *, noun: str = BLOB, proposed_id=None, duration=None,
                 break_period=None) -> None:
    """The 400s of a request made with a version before 2012-02-12: no Lease
    Container (its ``comp=lease`` did not exist), no change action, and none
    of the headers 2012-02-12 introduced. Refusing those headers, rather than
    ignoring them, keeps a client that asked for an infinite lease or its own
    lease id from believing it got one."""
    reason = {"Reason": LEGACY_REASON}
    if noun == CONTAINER:
        raise LeaseholdError("InvalidQueryParameterValue", noun=noun, field="comp", value="lease", detail=reason)
    if action == "change":
        raise LeaseholdError("InvalidHeaderValue", noun=noun, field="action", value=action, detail=reason)
    for field, value in (("duration", duration), ("proposed_lease_id", proposed_id),
                         ("break_period", break_period)):
        if value is not None:
            raise LeaseholdError("UnsupportedHeader", noun=noun, field=field, value=str(value), detail=reason)


def check_action(action: str | None, *, noun: str = BLOB, legacy: bool = False) -> str:
    """A known action, or the 400 an absent or unknown one gets."""
    if legacy and noun == CONTAINER:
        check_legacy(action, noun=noun)  # raises: the operation itself is unknown
    if action is not None and action in (LEGACY_ACTIONS if legacy else ACTIONS):
        return action
    if action is None:
        raise LeaseholdError("MissingRequiredHeader", noun=noun, field="action")
    if legacy and action in ACTIONS:
        check_legacy(action, noun=noun)  # raises, saying why
    raise LeaseholdError("InvalidHeaderValue", noun=noun, field="action", value=action)


def validate(action: str, *, noun: str = BLOB, lease_id=None, proposed_id=None,
             duration=None, break_period=None, legacy: bool = False) -> None:
    """The 400s of an action, checked before the resource is looked up."""
    if legacy:
        check_legacy(action, noun=noun, proposed_id=proposed_id, duration=duration, break_period=break_period)
        if action == "acquire":
            duration = LEGACY_DURATION
    if action == "acquire":
        check_duration(duration, noun=noun)
    elif action in ("renew", "release"):
        require(lease_id, "lease_id", noun=noun)
    elif action == "change":
        require(lease_id, "lease_id", noun=noun)
        require(proposed_id, "proposed_lease_id", noun=noun)
    elif action == "break":
        check_break_period(break_period, noun=noun)


def apply(action: str, record: LeaseRecord, now: datetime, *, duration=None, break_period=None,
          lease_id=None, proposed_id=None, new_id=None, noun: str = BLOB, legacy: bool = False) -> Outcome:
    """One entry point for every lease action, as the adapters call it.
    ``legacy``: the request's x-ms-version is before 2012-02-12."""
    if legacy:
        check_action(action, noun=noun, legacy=True)
        check_legacy(action, noun=noun, proposed_id=proposed_id, duration=duration, break_period=break_period)
    if action == "acquire":
        return acquire(record, now, duration=duration, proposed_id=proposed_id,
                       new_id=new_id or uuid.uuid4(), noun=noun, legacy=legacy)
    if action == "renew":
        return renew(record, now, lease_id=lease_id, noun=noun, legacy=legacy)
    if action == "change":
        return change(record, now, lease_id=lease_id, proposed_id=proposed_id, noun=noun, legacy=legacy)
    if action == "release":
        return release(record, now, lease_id=lease_id, noun=noun, legacy=legacy)
    if action == "break":
        return break_(record, now, period=break_period, noun=noun, legacy=legacy)
    check_action(action, noun=noun)  # raises: no other action exists
    raise AssertionError(f"check_action let {action!r} through")


# ---------------------------------------------------------------- reads and writes under a lease

def check_access(record: LeaseRecord, now: datetime, *, lease_id: uuid.UUID | None,
                 write: bool, noun: str = BLOB) -> None:
    """May a read or write (including delete) presenting ``lease_id`` proceed?

    Writes need the id while the lease is locked; reads only check an id when
    one is given. Wrong ids are 412, not the 409 of the documented table."""
    state = effective_state(record, now)
    kind = "Blob" if noun == BLOB else "Container"
    if state in LOCKED_STATES:
        if lease_id is None:
            if write:
                raise LeaseholdError("LeaseIdMissing", noun=noun)
            return
        if lease_id != record.lease_id:
            raise LeaseholdError(f"LeaseIdMismatchWith{kind}Operation", noun=noun)
        return
    if lease_id is None:
        return
    if state == AVAILABLE:
        raise LeaseholdError(f"LeaseNotPresentWith{kind}Operation", noun=noun)
    # expired or broken: a lease existed but no longer protects the resource.
    raise LeaseholdError("LeaseLost", noun=noun)


def after_write(record: LeaseRecord, now: datetime, *, noun: str = BLOB) -> LeaseRecord:
    """The record after a successful write. A blob write ends an expired or
    broken lease (the id is forgotten, so renew then fails), and so the id a
    legacy release left; container writes leave the lease alone (container
    renew-after-write succeeds)."""
    if noun == BLOB and (effective_state(record, now) in (EXPIRED, BROKEN) or released(record, now)):
        return _available(record)
    return record
