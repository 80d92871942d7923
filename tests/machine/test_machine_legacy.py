"""The pure state machine for x-ms-version before 2012-02-12 (``legacy=True``),
cell by cell, then properties: where the references say legacy and current
semantics agree, they agree; what a legacy release leaves behind is invisible
to current-version actions.

References: the Lease Blob page (seeds/001, "Changes to Lease Blob introduced
in version 2012-02-12"), the 2012-02-12 announcement (seeds/000) and
docs/reference/azure-compatibility.md §3.2, §10. Legacy leases are a fixed 60 s under an
id the service draws; there is no change, no break period, no proposed id and
no container lease; a released lease can still be renewed or broken; breaking
a breaking or broken lease is 409 LeaseAlreadyBroken.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leases.domain import machine as m
from leases.domain.errors import LeaseholdError
from tests.machine import test_machine as machine_tests
from tests.machine.pinned import pinned

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
A, B, C, X = (uuid.UUID(int=i) for i in (0xA, 0xB, 0xC, 0xF))


def record(state: str) -> m.LeaseRecord:
    """A record that *is* in ``state`` at NOW (lease A, generation 7).
    ``released``: what a legacy release of lease A leaves (available, id kept)."""
    if state == "available":
        return m.LeaseRecord(generation=7)
    if state == "released":
        return m.LeaseRecord(m.AVAILABLE, A, 60, None, None, 7)
    if state == "leased":  # fixed, 30 s left
        return m.LeaseRecord(m.LEASED, A, 60, NOW + timedelta(seconds=30), None, 7)
    if state == "infinite":  # taken by a current-version client
        return m.LeaseRecord(m.LEASED, A, -1, None, None, 7)
    if state == "expired":
        return m.LeaseRecord(m.LEASED, A, 60, NOW - timedelta(seconds=1), None, 7)
    if state == "breaking":  # 20 s until broken
        return m.LeaseRecord(m.BREAKING, A, None, None, NOW + timedelta(seconds=20), 7)
    if state == "broken":
        return m.LeaseRecord(m.BREAKING, A, None, None, NOW - timedelta(seconds=1), 7)
    raise AssertionError(state)


STATES = ["available", "released", "leased", "infinite", "breaking", "broken", "expired"]
SEEN_AS = {"released": "available", "infinite": "leased"}  # the state a client is told

# The legacy outcome table, written from the references, not from the code.
# Each cell: "4xx Code" / (status, state after, lease id answered | x-ms-lease-time for break).
MISMATCH = "409 LeaseIdMismatchWithLeaseOperation"
ACQUIRE: dict[str, machine_tests.Cell] = {  # no proposed id, no duration: always a new 60 s lease under X, or 409
    "available": (201, "leased", X), "released": (201, "leased", X), "leased": "409 LeaseAlreadyPresent",
    "infinite": "409 LeaseAlreadyPresent", "breaking": "409 LeaseAlreadyPresent", "broken": (201, "leased", X),
    "expired": (201, "leased", X),
}
RENEW: dict[uuid.UUID, dict[str, machine_tests.Cell]] = {
    A: {"available": MISMATCH, "released": (200, "leased", A),  # renew after release succeeds
        "leased": (200, "leased", A), "infinite": (200, "leased", A),
        "breaking": "409 LeaseIsBrokenAndCannotBeRenewed", "broken": "409 LeaseIsBrokenAndCannotBeRenewed",
        "expired": (200, "leased", A)},
    B: {s: MISMATCH for s in STATES},
}
RELEASE: dict[uuid.UUID, dict[str, machine_tests.Cell]] = {
    A: {"available": MISMATCH, **{s: (200, "available", None) for s in STATES[1:]}},
    B: {s: MISMATCH for s in STATES},
}
BREAK: dict[str, machine_tests.Cell] = {  # no x-ms-lease-break-period in these versions
    "available": "409 LeaseNotPresentWithLeaseOperation",
    "released": (202, "broken", 0),  # break after release succeeds
    "leased": (202, "breaking", 30),  # over the lease's remaining time
    "infinite": (202, "broken", 0),
    "breaking": "409 LeaseAlreadyBroken", "broken": "409 LeaseAlreadyBroken",
    "expired": (202, "broken", 0),
}


def run(action, state, *, legacy=True, **params):
    try:
        return m.apply(action, record(state), NOW, new_id=X, legacy=legacy, **params)
    except LeaseholdError as err:
        return f"{err.status} {err.code}"


def cells():
    for state, want in ACQUIRE.items():
        yield "acquire", state, {}, want
    for lease_id, row in RENEW.items():
        for state, want in row.items():
            yield "renew", state, {"lease_id": lease_id}, want
    for lease_id, row in RELEASE.items():
        for state, want in row.items():
            yield "release", state, {"lease_id": lease_id}, want
    for state, want in BREAK.items():
        yield "break", state, {}, want
    for state in STATES:  # change came with 2012-02-12: 400 whatever the state
        for lease_id, proposed in ((A, B), (B, A), (B, C)):
            yield "change", state, {"lease_id": lease_id, "proposed_id": proposed}, "400 InvalidHeaderValue"


def _id(action, state, params):
    return f"{action}-{state}-" + "-".join(f"{k}={str(v)[-1:]}" for k, v in sorted(params.items()))


@pytest.mark.parametrize("action,state,params,want", list(cells()), ids=[_id(a, s, p) for a, s, p, _ in cells()])
def test_legacy_outcome_table(action, state, params, want):
    got = run(action, state, **params)
    if isinstance(want, str):
        assert got == want
        return
    status, state_after, third = want
    assert not isinstance(got, str), got
    assert m.effective_state(got.record, NOW) == state_after == got.state_after
    assert got.state_before == SEEN_AS.get(state, state)
    if action == "break":
        assert got.lease_time == third and got.lease_id is None
        assert got.record.lease_id == A  # the broken lease keeps its id, as on current versions
    elif action == "release":
        assert got.lease_id is None
        assert got.record.lease_id == A  # remembered, for a later renew or break
    else:
        assert got.lease_id == third == got.record.lease_id


def test_legacy_acquire_is_sixty_seconds_and_a_new_fencing_token():
    for state in ("available", "released", "broken", "expired"):
        out = m.acquire(record(state), NOW, duration=None, proposed_id=None, new_id=X, legacy=True)
        assert out.record == m.LeaseRecord(m.LEASED, X, 60, NOW + timedelta(seconds=60), None, 8)
        assert m.duration_type(out.record, m.LEASED) == "fixed"


def test_legacy_renew_keeps_the_generation_and_resets_the_clock():
    out = m.renew(record("released"), NOW, lease_id=A, legacy=True)
    assert out.record == m.LeaseRecord(m.LEASED, A, 60, NOW + timedelta(seconds=60), None, 7)
    # a lease a current client took keeps its own duration when an old client renews it
    out = m.renew(record("infinite"), NOW, lease_id=A, legacy=True)
    assert out.record == record("infinite")
    # released when broken or breaking: the break ended its time and the release gives none back (a
    # holder that took an infinite lease would otherwise believe it renewed that, and hold a minute)
    for state in ("broken", "breaking"):
        released = m.release(record(state), NOW, lease_id=A, legacy=True).record
        with pytest.raises(LeaseholdError) as exc:
            m.renew(released, NOW, lease_id=A, legacy=True)
        assert exc.value.code == "LeaseIsBrokenAndCannotBeRenewed"


def test_legacy_release_remembers_the_id_and_a_second_release_changes_nothing():
    first = m.release(record("leased"), NOW, lease_id=A, legacy=True)
    assert first.record == m.LeaseRecord(m.AVAILABLE, A, 60, None, None, 7)
    again = m.release(first.record, NOW + timedelta(seconds=5), lease_id=A, legacy=True)
    assert again.record == first.record and again.state_after == m.AVAILABLE


def test_legacy_break_runs_out_the_remaining_time_then_refuses_to_break_again():
    out = m.break_(record("leased"), NOW, period=None, legacy=True)
    assert out.record.break_at == record("leased").expires_at and out.lease_time == 30
    later = NOW + timedelta(seconds=30)
    assert m.effective_state(out.record, later) == m.BROKEN
    with pytest.raises(LeaseholdError) as exc:
        m.break_(out.record, NOW + timedelta(seconds=10), period=None, legacy=True)
    assert (exc.value.status, exc.value.code) == (409, "LeaseAlreadyBroken")
    assert exc.value.message == "The lease has already been broken and cannot be broken again."
    # the broken lease can be acquired by anyone, and not renewed by its holder
    assert m.acquire(out.record, later, duration=None, proposed_id=None, new_id=X, legacy=True).lease_id == X
    with pytest.raises(LeaseholdError) as exc:
        m.renew(out.record, later, lease_id=A, legacy=True)
    assert exc.value.code == "LeaseIsBrokenAndCannotBeRenewed"


@pytest.mark.parametrize("state", STATES)
def test_a_write_forgets_a_released_blob_lease_so_renew_fails(state):
    """"Renew ... as long as the blob has not been modified": a blob write
    ends a released lease as it ends an expired or broken one."""
    after = m.after_write(record(state), NOW, noun="blob")
    if state in ("released", "expired", "broken"):
        assert after == m.LeaseRecord(generation=7)
        with pytest.raises(LeaseholdError) as exc:
            m.renew(after, NOW, lease_id=A, legacy=True)
        assert exc.value.code == "LeaseIdMismatchWithLeaseOperation"
        with pytest.raises(LeaseholdError) as exc:
            m.break_(after, NOW, period=None, legacy=True)
        assert exc.value.code == "LeaseNotPresentWithLeaseOperation"
    else:
        assert after == record(state)


# ---------------------------------------------------------------- 400s of the legacy versions

REASON = {"Reason": "This operation or header requires x-ms-version 2012-02-12 or later."}


@pytest.mark.parametrize("action,params,code,field", [
    # the headers 2012-02-12 introduced are refused, not silently ignored
    ("acquire", {"duration": 60}, "UnsupportedHeader", "duration"),
    ("acquire", {"duration": -1}, "UnsupportedHeader", "duration"),
    ("acquire", {"duration": 15}, "UnsupportedHeader", "duration"),
    ("acquire", {"proposed_id": A}, "UnsupportedHeader", "proposed_lease_id"),
    ("renew", {"lease_id": A, "proposed_id": B}, "UnsupportedHeader", "proposed_lease_id"),
    ("release", {"lease_id": A, "duration": 60}, "UnsupportedHeader", "duration"),
    ("break", {"break_period": 0}, "UnsupportedHeader", "break_period"),
    ("break", {"break_period": 60}, "UnsupportedHeader", "break_period"),
    ("change", {"lease_id": A, "proposed_id": B}, "InvalidHeaderValue", "action"),
    ("change", {}, "InvalidHeaderValue", "action"),
    # the rest as on current versions
    ("renew", {}, "MissingRequiredHeader", "lease_id"),
    ("release", {}, "MissingRequiredHeader", "lease_id"),
    (None, {}, "MissingRequiredHeader", "action"),
    ("steal", {}, "InvalidHeaderValue", "action"),
])
@pytest.mark.parametrize("state", STATES)
def test_legacy_bad_input_is_400_in_every_state(action, params, code, field, state):
    with pytest.raises(LeaseholdError) as validated:
        m.check_action(action, legacy=True)
        m.validate(action, legacy=True, **params)
    with pytest.raises(LeaseholdError) as applied:
        m.apply(action, record(state), NOW, new_id=X, legacy=True, **params)
    for exc in (validated, applied):
        assert (exc.value.status, exc.value.code, exc.value.field) == (400, code, field)
        if code == "UnsupportedHeader" or action == "change":
            assert exc.value.detail == REASON


@pytest.mark.parametrize("action", [*m.ACTIONS, None, "steal"])
@pytest.mark.parametrize("state", STATES)
def test_no_container_leases_before_2012_02_12(action, state):
    """Lease Container is 2012-02-12 and newer: its comp=lease is an unknown
    query value for an older version, whatever the action and state."""
    for step in (lambda: m.check_action(action, noun="container", legacy=True),
                 lambda: m.validate(action, noun="container", legacy=True),
                 lambda: m.apply(action, record(state), NOW, new_id=X, noun="container", legacy=True)):
        with pytest.raises(LeaseholdError) as exc:
            step()
        assert (exc.value.status, exc.value.code, exc.value.field, exc.value.value) == (
            400, "InvalidQueryParameterValue", "comp", "lease")
        assert exc.value.message == "Value for one of the query parameters specified in the request URI is invalid."


@pytest.mark.parametrize("noun", ["blob", "container"])
def test_current_versions_still_lease_containers_and_change(noun):
    out = m.apply("change", record("leased"), NOW, lease_id=A, proposed_id=B, noun=noun)
    assert out.lease_id == B
    out = m.apply("acquire", record("available"), NOW, duration=15, proposed_id=C, noun=noun)
    assert out.lease_id == C


# ---------------------------------------------------------------- properties

ids = st.sampled_from([A, B, C])
current_records = st.one_of(  # what current-version actions can leave (no remembered id)
    st.builds(lambda g: m.LeaseRecord(generation=g), st.integers(0, 10**6)),
    st.builds(lambda i, d, off, g: m.LeaseRecord(m.LEASED, i, d, None if d == -1 else NOW + timedelta(seconds=off),
                                                 None, g),
              ids, st.sampled_from([-1, 15, 37, 60]), st.integers(-120, 60), st.integers(0, 10**6)),
    st.builds(lambda i, off, g: m.LeaseRecord(m.BREAKING, i, None, None, NOW + timedelta(seconds=off), g),
              ids, st.integers(-120, 60), st.integers(0, 10**6)),
    st.builds(lambda i, g: m.LeaseRecord(m.BROKEN, i, None, None, None, g), ids, st.integers(0, 10**6)),
)
released_records = st.builds(lambda i, d, g: m.LeaseRecord(m.AVAILABLE, i, d, None, None, g),
                             ids, st.sampled_from([None, -1, 15, 60]), st.integers(0, 10**6))
legacy_actions: st.SearchStrategy[tuple[str, dict[str, uuid.UUID]]] = st.one_of(
    st.tuples(st.just("acquire"), st.just({})),
    st.tuples(st.just("renew"), st.fixed_dictionaries({"lease_id": ids})),
    st.tuples(st.just("release"), st.fixed_dictionaries({"lease_id": ids})),
    st.tuples(st.just("break"), st.just({})),
)
current_actions = st.one_of(
    st.tuples(st.just("acquire"), st.fixed_dictionaries({"duration": st.sampled_from([-1, 15, 60]),
                                                         "proposed_id": st.one_of(st.none(), ids)})),
    st.tuples(st.just("renew"), st.fixed_dictionaries({"lease_id": ids})),
    st.tuples(st.just("change"), st.fixed_dictionaries({"lease_id": ids, "proposed_id": ids})),
    st.tuples(st.just("release"), st.fixed_dictionaries({"lease_id": ids})),
    st.tuples(st.just("break"), st.fixed_dictionaries({"break_period": st.one_of(st.none(), st.integers(0, 60))})),
)


def outcome(action, rec, now, *, legacy, **params):
    """What a client can observe of one action: the refusal, or the state,
    answered id and lease time, plus the record as stored."""
    try:
        out = m.apply(action, rec, now, new_id=X, legacy=legacy, **params)
    except LeaseholdError as err:
        return (err.status, err.code), None
    return (out.state_before, out.state_after, out.lease_id, out.lease_time), out.record


def forget(rec: m.LeaseRecord) -> m.LeaseRecord:
    """A record without what a legacy release remembers."""
    return replace(rec, lease_id=None, duration=None) if rec.state == m.AVAILABLE else rec


@settings(max_examples=1000, deadline=None)
@pinned("legacy_and_current_agree")
@given(current_records, legacy_actions, st.floats(0, 200))
def test_legacy_and_current_agree_where_the_references_say_they_agree(rec, action_params, elapsed):
    check_agreement(rec, action_params, elapsed)


def check_agreement(rec, action_params, elapsed) -> None:
    """A legacy request is the current request with a 60 s duration, no
    proposed id and no break period, with exactly the documented
    differences: breaking a breaking or broken lease is 409
    LeaseAlreadyBroken (current: idempotent 202), and a release remembers
    the id (invisible to current clients, see the next property)."""
    action, params = action_params
    now = NOW + timedelta(seconds=elapsed)
    current_params = {"duration": 60, "proposed_id": None} if action == "acquire" else dict(params)
    seen_legacy, legacy_record = outcome(action, rec, now, legacy=True, **params)
    seen_current, current_record = outcome(action, rec, now, legacy=False, **current_params)
    if action == "break" and m.effective_state(rec, now) in (m.BREAKING, m.BROKEN):
        assert seen_legacy == (409, "LeaseAlreadyBroken")
        assert seen_current[0] in (m.BREAKING, m.BROKEN)  # current: 202, idempotent
        return
    assert seen_legacy == seen_current
    if legacy_record is not None:
        assert forget(legacy_record) == current_record
        if action == "release":
            assert legacy_record.lease_id == rec.lease_id


@settings(max_examples=1000, deadline=None)
@pinned("legacy_release_invisible")
@given(released_records, current_actions, st.floats(0, 200), st.sampled_from(["blob", "container"]))
def test_current_clients_cannot_tell_a_legacy_release_from_no_lease(rec, action_params, elapsed, noun):
    check_release_invisible(rec, action_params, elapsed, noun)


def check_release_invisible(rec, action_params, elapsed, noun) -> None:
    """Every current-version action, read and write on a released record
    gives what it gives on the same record without the remembered id."""
    action, params = action_params
    now = NOW + timedelta(seconds=elapsed)
    with_id = outcome(action, rec, now, legacy=False, noun=noun, **params)
    without = outcome(action, forget(rec), now, legacy=False, noun=noun, **params)
    assert with_id[0] == without[0]
    if with_id[1] is not None and with_id[0][1] != m.AVAILABLE:
        assert with_id[1] == without[1]  # a new lease, renewed or broken: nothing remembered leaks in
    for presented in (None, A, B, C):
        for write in (True, False):
            results = []
            for r in (rec, forget(rec)):
                try:
                    m.check_access(r, now, lease_id=presented, write=write, noun=noun)
                    results.append("ok")
                except LeaseholdError as err:
                    results.append(err.code)
            assert results[0] == results[1]
    assert m.after_write(rec, now, noun="blob") == forget(rec)


old_and_new_steps = st.lists(st.tuples(st.sampled_from(["p", "q"]), st.booleans(), legacy_actions, current_actions,
                                       st.integers(0, 40)), max_size=40)


@settings(max_examples=500, deadline=None)
@pinned("old_and_new_never_both_hold")
@given(old_and_new_steps)
def test_old_and_new_clients_never_both_hold_the_lease(steps):
    old_and_new_clients(steps)


def old_and_new_clients(steps) -> None:
    """Two clients, each speaking an old or a current version at each step,
    act in turn over time. Each believes it holds the lease as the reference
    promises (``test_machine.never_two_holders``). A legacy
    renew after release re-grants the lease, so it must never re-grant it
    while someone else holds it."""
    machine_tests.never_two_holders(
        (who, action, {**params, "proposed_id": machine_tests.OWN[who]} if action == "acquire" and not legacy
         else params, legacy, wait)  # a legacy acquire gets the id new_id draws
        for who, legacy, old_step, new_step, wait in steps
        for action, params in [old_step if legacy else new_step])
