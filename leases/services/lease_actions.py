"""Lease actions: acquire, renew, change, release, break."""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from django.db import transaction

from leases.domain import machine
from leases.operations import metrics
from leases.services import tenures, wakeups
from leases.domain.conditions import Conditions
from leases.domain.errors import LeaseholdError
from leases.models import Blob, Container
from leases.storage import dbclock, statements
from leases.storage.transactions import write_together, write_transaction
from leases.services.common import NO_CONDITIONS, Actor, ResourceRef
from leases.services.lease_rows import KeyGone, lease_saved, load_for_lease, next_generation, key_still_valid
from leases.services.history import EVENTS, event_finish, event_start, record_refusal


@dataclass(frozen=True)
class LeaseResult:
    """What a lease action answers: the resource as saved and the outcome."""

    resource: Container | Blob
    outcome: machine.Outcome

    @property
    def lease_id(self) -> uuid.UUID | None:
        return self.outcome.lease_id

    @property
    def lease_time(self) -> int | None:
        return self.outcome.lease_time

    @property
    def generation(self) -> int:
        return self.outcome.record.generation


def _with_generation(outcome: machine.Outcome, generation: int) -> machine.Outcome:
    if generation == outcome.record.generation:
        return outcome
    return dataclasses.replace(outcome, record=dataclasses.replace(outcome.record, generation=generation))


# ------------------------------------------------------------------ lease actions

SUCCESS_STATUS = {"acquire": 201, "renew": 200, "change": 200, "release": 200, "break": 202}


def _lease_action(action: str | None, *, ref: ResourceRef, actor: Actor, conditions: Conditions,
                  reason: str = "", legacy: bool = False, lease_id: uuid.UUID | None = None,
                  proposed_id: uuid.UUID | None = None, duration: int | None = None,
                  break_period: int | None = None, unparsed: LeaseholdError | None = None,
                  wait: bool = False) -> LeaseResult:
    """One transaction: read the row (locked), decide, write it, append the
    event; a refusal appends its event and commits, then is raised. Checks
    that need no database run before the write lock is taken. ``legacy``:
    the semantics of x-ms-version before 2012-02-12 (machine.py).
    ``unparsed``: the 400 of a parameter the door could not parse
    (leases.domain.lease_params), refused and recorded like any other refusal.
    ``wait``: an acquire that will wait and try again (serving/waiting.py):
    refused because someone holds the lease, it records no event (its
    request's final answer will) and says so (``refusal.waiting``)."""
    write = _lease_write(action, ref=ref, actor=actor, conditions=conditions, reason=reason, legacy=legacy,
                         lease_id=lease_id, proposed_id=proposed_id, duration=duration,
                         break_period=break_period, unparsed=unparsed, wait=wait)
    return _committed(write_transaction(write, skips_rows=True), action, ref)


def _committed(written: tuple, action: str | None, ref: ResourceRef) -> LeaseResult:
    """After the commit of a lease action's write (which returned ``written``:
    resource, outcome, refusal, the lease id the row had before): count it
    (leases/operations/metrics.py); after a release or break, wake the acquires waiting
    for it (leases/services/wakeups.py); then the result, or the refusal raised."""
    obj, outcome, refusal, previous_id = written
    metrics.lease_committed(action, ref.noun, outcome, refusal, previous_id)
    if refusal is not None:
        raise refusal
    if action in wakeups.FREEING:
        wakeups.after_commit(wakeups.key(ref.account, ref.container, ref.blob))
    return LeaseResult(resource=obj, outcome=outcome)


@dataclass
class _Plan:
    """A lease action as far as it is checked before the database: its
    parameters, what its event records so far, or the refusal those checks
    made (which the write records)."""

    action: str | None
    params: dict
    conditions: Conditions
    new_id: uuid.UUID
    facts: dict = dataclasses.field(default_factory=dict)  # what the event records, filled in as it becomes known
    refusal: LeaseholdError | None = None


@dataclass
class _Attempt:
    """What the write learns under the lock: the row, the time of the
    decision, the machine's outcome or the refusal."""

    refusal: LeaseholdError | None
    obj: Container | Blob | None = None
    now: datetime | None = None
    outcome: machine.Outcome | None = None
    previous_id: uuid.UUID | None = None


def _plan(action: str | None, *, ref: ResourceRef, conditions: Conditions, legacy: bool, unparsed,
          **params) -> _Plan:
    """The checks that need no database, in Azure's order: the action before
    its parameters, then the parameters, then a snapshot (never leased)."""
    noun = ref.noun
    plan = _Plan(action, params, conditions.dates_only() if noun == machine.CONTAINER else conditions, uuid.uuid4())
    try:
        plan.action = machine.check_action(action, noun=noun, legacy=legacy)
        if unparsed is not None:
            raise unparsed
        plan.facts.update(params)
        machine.validate(plan.action, noun=noun, legacy=legacy, **params)
        if ref.snapshot:
            raise LeaseholdError("InvalidOperation", noun=noun)
    except LeaseholdError as err:
        plan.refusal = err
    return plan


def _decide(plan: _Plan, attempt: _Attempt, *, ref: ResourceRef, legacy: bool, conn, cursor,
            signed_with: str | None = None) -> None:
    """Read the row locked and the time of the decision, check the
    conditions, apply the machine; a new lease takes the next fencing
    token. Raises the refusal; ``attempt`` keeps what was read before it.
    The time is read once the row is locked (SQLite: the writer lock, taken
    at BEGIN; PostgreSQL: FOR UPDATE), not when the request arrived, so a
    request that waited for the lock does not decide with a stale clock.
    ``signed_with``: the key checked first (lease_rows.KeyGone)."""
    assert plan.action is not None  # the checks before the write passed
    attempt.obj, attempt.now = obj, now = load_for_lease(ref, conn, cursor, signed_with)
    plan.facts.update(state_before=obj.effective_lease_state(now), generation=obj.lease_generation)
    plan.conditions.check_write(obj.etag, obj.last_modified, noun=ref.noun)
    outcome = machine.apply(plan.action, obj.lease_record, now, noun=ref.noun, new_id=plan.new_id, legacy=legacy,
                            **plan.params)
    if outcome.record.generation != obj.lease_generation:  # a new lease: a new token
        outcome = _with_generation(outcome, next_generation(ref, outcome.record.generation, conn=conn, cursor=cursor))
    attempt.outcome = outcome


def _refused(plan: _Plan, attempt: _Attempt, event: list, *, ref: ResourceRef, wait: bool, conn, cursor) -> None:
    """Record the refusal (not a waiting acquire's: its last attempt records
    it); a refusal because the lease is held says why and, for a waiting
    acquire, what it waits for and when that state ends by itself."""
    refusal, obj, now = attempt.refusal, attempt.obj, attempt.now
    assert refusal is not None and now is not None
    held = refusal.code in REFUSAL_DETAIL_CODES and obj is not None
    if not (held and wait):
        record_refusal(refusal, event, state_after=plan.facts.get("state_before", ""), cursor=cursor, conn=conn,
                       **plan.facts)
    if held:
        assert obj is not None  # held says so
        refusal.detail.update(_refusal_detail(obj, now))
        refusal.waiting = wait
        refusal.wait_key = wakeups.key(ref.account, ref.container, ref.blob)
        refusal.ends_at = machine.deadline(obj.lease_record, now)


def _granted(plan: _Plan, attempt: _Attempt, event: list, *, ref: ResourceRef, actor: Actor, conn, cursor) -> None:
    """Save the row and append the event in one statement; a new lease
    records its holder; a release or break tells the acquires waiting."""
    action, obj, now, outcome = plan.action, attempt.obj, attempt.now, attempt.outcome
    assert action is not None and obj is not None and now is not None and outcome is not None
    attempt.previous_id = obj.lease_id
    before = obj.lease_record
    holder: tuple[str, ...] = ()
    if action == "acquire" and outcome.state_before != machine.LEASED:  # a new lease
        obj.lease_acquired_at = now
        obj.lease_holder = actor.name[:200]
        obj.lease_holder_address = actor.remote_addr[:64]
        obj.lease_holder_request_id = actor.client_request_id[:1024]
        holder = obj.HOLDER_COLUMNS
    plan.facts.update(state_after=outcome.state_after, generation=outcome.record.generation,
                      lease_time=outcome.lease_time, expires_at=machine.deadline(outcome.record, now),
                      lease_id=plan.params["lease_id"] or outcome.lease_id or attempt.previous_id,
                      duration=outcome.record.duration if action != "break" else None)
    event_finish(event, status=SUCCESS_STATUS[action], cursor=cursor, conn=conn,
                  saving=lease_saved(obj, outcome.record, *holder), **plan.facts)
    tenures.after_write(ref=ref, actor=actor, action=action, state_before=outcome.state_before, before=before,
                        after=outcome.record, now=now, conn=conn, cursor=cursor)
    if action in wakeups.FREEING:
        wakeups.in_transaction(wakeups.key(ref.account, ref.container, ref.blob), conn, cursor)


def _lease_write(action: str | None, *, ref: ResourceRef, actor: Actor, conditions: Conditions, reason: str,
                 legacy: bool, lease_id, proposed_id, duration, break_period, unparsed, wait: bool = False,
                 signed_with: str | None = None):
    """A lease action up to its write: the checks that need no database and
    the event's known values, before the write lock; returned is the write,
    to run in a write transaction, which returns (resource, outcome,
    refusal, previous lease id) and raises only on a storage fault, or
    KeyGone: ``signed_with``, the key that signed the request (checked by
    the door against the keys it last read), is no longer one of the
    account's in the write's snapshot, checked before anything is decided
    or recorded."""
    plan = _plan(action, ref=ref, conditions=conditions, legacy=legacy, unparsed=unparsed, lease_id=lease_id,
                 proposed_id=proposed_id, duration=duration, break_period=break_period)
    event = event_start(ref=ref, actor=actor, action=plan.action, now=None, reason=reason,
                         conn=transaction.get_connection())

    def write():
        # Made again when its batch was undone: each attempt decides afresh,
        # from what was known before the database, and records only its own outcome.
        attempt = _Attempt(refusal=plan.refusal)
        this = dataclasses.replace(plan, facts=dict(plan.facts))
        conn = transaction.get_connection()
        with statements.driver_cursor(conn) as cursor:
            if attempt.refusal is None:
                try:
                    _decide(this, attempt, ref=ref, legacy=legacy, conn=conn, cursor=cursor, signed_with=signed_with)
                except LeaseholdError as err:
                    attempt.refusal = err
            elif signed_with is not None:
                key_still_valid(ref.account, signed_with, conn=conn)
            if attempt.now is None:  # refused before the row was read
                attempt.now = dbclock.transaction_now(conn, cursor)
            EVENTS.set(event, conn, occurred_at=attempt.now)
            if attempt.refusal is not None:
                _refused(this, attempt, event, ref=ref, wait=wait, conn=conn, cursor=cursor)
            else:
                _granted(this, attempt, event, ref=ref, actor=actor, conn=conn, cursor=cursor)
        return attempt.obj, attempt.outcome, attempt.refusal, attempt.previous_id

    return write


_lease_action = metrics.timed_lease_action(_lease_action)  # requests by action, door, outcome; latency


REFUSAL_DETAIL_CODES = {"LeaseAlreadyPresent", "LeaseIsBreakingAndCannotBeAcquired"}


def _refusal_detail(obj, now) -> dict:
    """Why an acquire was refused: the state, when it can next be acquired
    (None: only after a release or break), and the generation."""
    record = obj.lease_record
    return {"lease_state": machine.effective_state(record, now), "retry_after": machine.seconds_remaining(record, now),
            "generation": obj.lease_generation}


def lease_acquire(*, ref: ResourceRef, actor: Actor, duration: int | None,
                  proposed_lease_id: uuid.UUID | None = None, conditions: Conditions = NO_CONDITIONS) -> LeaseResult:
    """``duration``: seconds (15-60) or machine.INFINITE; the machine checks the range."""
    return _lease_action("acquire", ref=ref, actor=actor, conditions=conditions,
                         duration=duration, proposed_id=proposed_lease_id)


def lease_renew(*, ref: ResourceRef, actor: Actor, lease_id: uuid.UUID | None,
                conditions: Conditions = NO_CONDITIONS) -> LeaseResult:
    return _lease_action("renew", ref=ref, actor=actor, conditions=conditions, lease_id=lease_id)


def lease_change(*, ref: ResourceRef, actor: Actor, lease_id: uuid.UUID | None,
                 proposed_lease_id: uuid.UUID | None, conditions: Conditions = NO_CONDITIONS) -> LeaseResult:
    return _lease_action("change", ref=ref, actor=actor, conditions=conditions,
                         lease_id=lease_id, proposed_id=proposed_lease_id)


def lease_release(*, ref: ResourceRef, actor: Actor, lease_id: uuid.UUID | None,
                  conditions: Conditions = NO_CONDITIONS, reason: str = "") -> LeaseResult:
    return _lease_action("release", ref=ref, actor=actor, conditions=conditions, lease_id=lease_id, reason=reason)


def lease_break(*, ref: ResourceRef, actor: Actor, break_period: int | None = None,
                conditions: Conditions = NO_CONDITIONS, reason: str = "") -> LeaseResult:
    """``break_period``: seconds (0-60); None: a fixed lease breaks when it
    would expire, an infinite one at once."""
    return _lease_action("break", ref=ref, actor=actor, conditions=conditions, break_period=break_period,
                         reason=reason)


def lease_action(action: str | None, *, ref: ResourceRef, actor: Actor, conditions: Conditions = NO_CONDITIONS,
                 lease_id: uuid.UUID | None = None, proposed_lease_id: uuid.UUID | None = None,
                 duration: int | None = None, break_period: int | None = None, reason: str = "",
                 legacy: bool = False, unparsed: LeaseholdError | None = None, wait: bool = False) -> LeaseResult:
    """Dispatch on an action name taken from the wire (may be unknown).
    ``legacy``: the request's x-ms-version is before 2012-02-12.
    ``unparsed``: the door could not parse a parameter (leases.domain.lease_params.
    parse_for_action): the action is checked, then refused with this error,
    and the refusal recorded, as Azure orders its checks. ``wait``: see _lease_action."""
    return _lease_action(**_arguments(action, ref=ref, actor=actor, conditions=conditions, lease_id=lease_id,
                                      proposed_lease_id=proposed_lease_id, duration=duration,
                                      break_period=break_period, reason=reason, legacy=legacy, unparsed=unparsed,
                                      wait=wait))


def _arguments(action: str | None, *, ref: ResourceRef, actor: Actor, conditions: Conditions = NO_CONDITIONS,
               lease_id: uuid.UUID | None = None, proposed_lease_id: uuid.UUID | None = None,
               duration: int | None = None, break_period: int | None = None, reason: str = "",
               legacy: bool = False, unparsed: LeaseholdError | None = None, wait: bool = False,
               signed_with: str | None = None) -> dict:
    """lease_action's arguments (an action name from the wire) as _lease_action takes them;
    ``signed_with`` (a door's lean call only): see _lease_write."""
    arguments = {"action": (action or "").lower() or None, "ref": ref, "actor": actor, "conditions": conditions,
                 "lease_id": lease_id, "proposed_id": proposed_lease_id, "duration": duration,
                 "break_period": break_period, "reason": reason, "legacy": legacy, "unparsed": unparsed,
                 "wait": wait}
    if signed_with is not None:
        arguments["signed_with"] = signed_with
    return arguments


def _own_failure(prepare, arguments: dict):
    """``prepare(**arguments)``, the write it returns; if preparing failed
    (a bug), a write that raises that failure, so that only this request of
    a batch fails (in its own savepoint) and the others are written."""
    try:
        return prepare(**arguments)
    except Exception as exc:  # noqa: BLE001
        error = exc  # the except clause unbinds ``exc`` when it ends; the write raises it later

        def fail():
            raise error
        return fail


class LeaseWrite:
    """One lease action, given as ``lease_action``'s keyword arguments, made
    ready to be written with others: ``write`` (its checks that need no
    database done) to run in a write transaction, then ``outcome`` of what
    it returned or raised, after the commit that covers it: the result, or
    the error the action would have raised (its refusal, recorded; a storage
    fault; the shared transaction's failure). Counted there."""

    __slots__ = ("arguments", "write", "started")

    def __init__(self, request: dict):
        self.started = time.perf_counter()
        self.arguments = _arguments(**request)
        self.write = _own_failure(_lease_write, self.arguments)

    def outcome(self, written, error: BaseException | None) -> LeaseResult | BaseException:
        arguments = self.arguments
        answer: LeaseResult | BaseException
        if isinstance(error, KeyGone):
            return error  # refused before the lease was looked at, as the door's own check refuses: not counted
        if error is None:
            try:  # ``written``: what the write returned, the tuple _committed takes
                answer, outcome = _committed(cast(tuple, written), arguments["action"], arguments["ref"]), "success"
            except LeaseholdError as refusal:
                answer, outcome = refusal, "refused"
            except Exception as exc:  # noqa: BLE001  (a bug: this request's answer only)
                answer, outcome = exc, "error"
        else:
            answer, outcome = error, "error"
        metrics.lease_request(arguments["action"], arguments["actor"].via, outcome, time.perf_counter() - self.started)
        return answer


def lease_actions_together(requests: list[dict]) -> list[LeaseResult | BaseException]:
    """Several lease actions (``LeaseWrite``) written in one write
    transaction with one commit where the engine commits together
    (storage.transactions.write_together), each in a savepoint of its own,
    else one transaction each; each one's result or error, in order, after
    the commit that covers them. Every action's checks run before the
    writer lock is taken."""
    writes = [LeaseWrite(request) for request in requests]
    outcomes = write_together([lease.write for lease in writes], skips_rows=True)
    return [lease.outcome(written, error) for lease, (written, error) in zip(writes, outcomes)]
