"""The pure state machine, cell by cell (docs/reference/azure-compatibility.md §3.2, §4.2),
then properties over random records, times and action sequences."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leases.domain import machine as m
from leases.domain.errors import LeaseholdError
from tests.machine.pinned import pinned

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
A, B, C, X = (uuid.UUID(int=i) for i in (0xA, 0xB, 0xC, 0xF))


def record(state: str) -> m.LeaseRecord:
    """A record that *is* in ``state`` at NOW (lease A, generation 7)."""
    if state == "available":
        return m.LeaseRecord(generation=7)
    if state == "leased":  # fixed, 30 s left
        return m.LeaseRecord(m.LEASED, A, 45, NOW + timedelta(seconds=30), None, 7)
    if state == "infinite":
        return m.LeaseRecord(m.LEASED, A, -1, None, None, 7)
    if state == "expired":
        return m.LeaseRecord(m.LEASED, A, 15, NOW - timedelta(seconds=1), None, 7)
    if state == "breaking":  # 20 s until broken
        return m.LeaseRecord(m.BREAKING, A, None, None, NOW + timedelta(seconds=20), 7)
    if state == "broken":  # a breaking record whose break time passed: derived, not stored
        return m.LeaseRecord(m.BREAKING, A, None, None, NOW - timedelta(seconds=1), 7)
    raise AssertionError(state)


STATES = ["available", "leased", "infinite", "breaking", "broken", "expired"]

# The outcome table, written from the reference, not from the code.
# Each cell: "409 Code" / "412 Code" / (status, state after, lease id after).
Cell = str | tuple[int, str, uuid.UUID | int | None]
OK = object()
ACQUIRE: dict[uuid.UUID | None, dict[str, Cell]] = {  # (proposed id) -> per state
    None: {"available": (201, "leased", X), "leased": "409 LeaseAlreadyPresent",
           "infinite": "409 LeaseAlreadyPresent", "breaking": "409 LeaseAlreadyPresent",
           "broken": (201, "leased", X), "expired": (201, "leased", X)},
    A: {"available": (201, "leased", A), "leased": (201, "leased", A), "infinite": (201, "leased", A),
        "breaking": "409 LeaseIsBreakingAndCannotBeAcquired", "broken": (201, "leased", A),
        "expired": (201, "leased", A)},
    B: {"available": (201, "leased", B), "leased": "409 LeaseAlreadyPresent", "infinite": "409 LeaseAlreadyPresent",
        "breaking": "409 LeaseAlreadyPresent", "broken": (201, "leased", B), "expired": (201, "leased", B)},
}
RENEW: dict[uuid.UUID, dict[str, Cell]] = {
    A: {"available": "409 LeaseIdMismatchWithLeaseOperation", "leased": (200, "leased", A),
        "infinite": (200, "leased", A), "breaking": "409 LeaseIsBrokenAndCannotBeRenewed",
        "broken": "409 LeaseIsBrokenAndCannotBeRenewed", "expired": (200, "leased", A)},
    B: {s: "409 LeaseIdMismatchWithLeaseOperation" for s in STATES},
}
CHANGE: dict[tuple[uuid.UUID, uuid.UUID], dict[str, Cell]] = {  # (lease id, proposed id)
    (A, B): {"available": "409 LeaseNotPresentWithLeaseOperation", "leased": (200, "leased", B),
             "infinite": (200, "leased", B), "breaking": "409 LeaseIsBreakingAndCannotBeChanged",
             "broken": "409 LeaseNotPresentWithLeaseOperation", "expired": "409 LeaseNotPresentWithLeaseOperation"},
    (B, A): {"available": "409 LeaseNotPresentWithLeaseOperation", "leased": (200, "leased", A),
             "infinite": (200, "leased", A), "breaking": "409 LeaseIdMismatchWithLeaseOperation",
             "broken": "409 LeaseNotPresentWithLeaseOperation", "expired": "409 LeaseNotPresentWithLeaseOperation"},
    (B, C): {"available": "409 LeaseNotPresentWithLeaseOperation", "leased": "409 LeaseIdMismatchWithLeaseOperation",
             "infinite": "409 LeaseIdMismatchWithLeaseOperation", "breaking": "409 LeaseIdMismatchWithLeaseOperation",
             "broken": "409 LeaseNotPresentWithLeaseOperation", "expired": "409 LeaseNotPresentWithLeaseOperation"},
}
RELEASE: dict[uuid.UUID, dict[str, Cell]] = {
    A: {"available": "409 LeaseIdMismatchWithLeaseOperation", **{s: (200, "available", None) for s in STATES[1:]}},
    B: {s: "409 LeaseIdMismatchWithLeaseOperation" for s in STATES},
}
# break: (period) -> per state: (202, state after, x-ms-lease-time)
BREAK: dict[int | None, dict[str, Cell]] = {
    None: {"available": "409 LeaseNotPresentWithLeaseOperation", "leased": (202, "breaking", 30),
           "infinite": (202, "broken", 0), "breaking": (202, "breaking", 20), "broken": (202, "broken", 0),
           "expired": (202, "broken", 0)},
    0: {"available": "409 LeaseNotPresentWithLeaseOperation", "leased": (202, "broken", 0),
        "infinite": (202, "broken", 0), "breaking": (202, "broken", 0), "broken": (202, "broken", 0),
        "expired": (202, "broken", 0)},
    10: {"available": "409 LeaseNotPresentWithLeaseOperation", "leased": (202, "breaking", 10),
         "infinite": (202, "breaking", 10), "breaking": (202, "breaking", 10), "broken": (202, "broken", 0),
         "expired": (202, "broken", 0)},
    60: {"available": "409 LeaseNotPresentWithLeaseOperation", "leased": (202, "breaking", 30),  # min(60, remaining)
         "infinite": (202, "breaking", 60), "breaking": (202, "breaking", 20),  # only shortens
         "broken": (202, "broken", 0), "expired": (202, "broken", 0)},
}


def run(action, state, **params):
    try:
        return m.apply(action, record(state), NOW, new_id=X, **params)
    except LeaseholdError as err:
        return f"{err.status} {err.code}"


def cells():
    for proposed, row in ACQUIRE.items():
        for state, want in row.items():
            yield "acquire", state, {"duration": 20, "proposed_id": proposed}, want
    for lease_id, row in RENEW.items():
        for state, want in row.items():
            yield "renew", state, {"lease_id": lease_id}, want
    for (lease_id, proposed), row in CHANGE.items():
        for state, want in row.items():
            yield "change", state, {"lease_id": lease_id, "proposed_id": proposed}, want
    for lease_id, row in RELEASE.items():
        for state, want in row.items():
            yield "release", state, {"lease_id": lease_id}, want
    for period, row in BREAK.items():
        for state, want in row.items():
            yield "break", state, {"break_period": period}, want


@pytest.mark.parametrize("action,state,params,want", list(cells()),
                         ids=[f"{a}-{s}-{sorted((k, str(v)[-1:]) for k, v in p.items())}" for a, s, p, _ in cells()])
def test_outcome_table(action, state, params, want):
    got = run(action, state, **params)
    if isinstance(want, str):
        assert got == want
        return
    status, state_after, third = want
    assert not isinstance(got, str), got
    assert m.effective_state(got.record, NOW) == state_after == got.state_after
    assert got.state_before == ("leased" if state == "infinite" else state)
    if action == "break":
        assert got.lease_time == third
        assert got.lease_id is None
    else:
        assert got.lease_id == third
        assert got.record.lease_id == third


def test_acquire_sets_duration_and_deadline():
    out = m.acquire(record("leased"), NOW, duration=60, proposed_id=A, new_id=X)
    assert out.record.expires_at == NOW + timedelta(seconds=60) and out.record.duration == 60
    out = m.acquire(record("available"), NOW, duration=-1, proposed_id=None, new_id=X)
    assert out.record.expires_at is None and m.duration_type(out.record, "leased") == "infinite"


def test_generation_counts_new_leases_only():
    assert m.acquire(record("available"), NOW, duration=15, proposed_id=None, new_id=X).record.generation == 8
    assert m.acquire(record("expired"), NOW, duration=15, proposed_id=B, new_id=X).record.generation == 8
    # the same lease again, renewed or changed: the same fencing token
    assert m.acquire(record("leased"), NOW, duration=15, proposed_id=A, new_id=X).record.generation == 7
    assert m.renew(record("expired"), NOW, lease_id=A).record.generation == 7
    assert m.change(record("leased"), NOW, lease_id=A, proposed_id=B).record.generation == 7
    assert m.release(record("leased"), NOW, lease_id=A).record.generation == 7


def test_renew_resets_clock_and_keeps_duration():
    out = m.renew(record("expired"), NOW, lease_id=A)
    assert out.record.expires_at == NOW + timedelta(seconds=15)
    out = m.renew(record("infinite"), NOW, lease_id=A)
    assert out.record == record("infinite")


def test_change_keeps_deadline():
    out = m.change(record("leased"), NOW, lease_id=A, proposed_id=B)
    assert out.record.expires_at == record("leased").expires_at


def test_break_without_period_breaks_fixed_lease_at_its_expiry():
    out = m.break_(record("leased"), NOW, period=None)
    assert out.record.break_at == record("leased").expires_at
    assert m.effective_state(out.record, NOW + timedelta(seconds=29)) == "breaking"
    assert m.effective_state(out.record, NOW + timedelta(seconds=30)) == "broken"


@pytest.mark.parametrize("action,params,field,code", [
    ("acquire", {"duration": None}, "duration", "MissingRequiredHeader"),
    ("acquire", {"duration": 14}, "duration", "InvalidHeaderValue"),
    ("acquire", {"duration": 61}, "duration", "InvalidHeaderValue"),
    ("acquire", {"duration": 0}, "duration", "InvalidHeaderValue"),
    ("acquire", {"duration": -2}, "duration", "InvalidHeaderValue"),
    ("renew", {}, "lease_id", "MissingRequiredHeader"),
    ("release", {}, "lease_id", "MissingRequiredHeader"),
    ("change", {"lease_id": A}, "proposed_lease_id", "MissingRequiredHeader"),
    ("change", {"proposed_id": A}, "lease_id", "MissingRequiredHeader"),
    ("break", {"break_period": -1}, "break_period", "InvalidHeaderValue"),
    ("break", {"break_period": 61}, "break_period", "InvalidHeaderValue"),
    (None, {}, "action", "MissingRequiredHeader"),
    ("steal", {}, "action", "InvalidHeaderValue"),
])
@pytest.mark.parametrize("state", STATES)
def test_bad_input_is_400_in_every_state(action, params, field, code, state):
    """Both where the doors check first (validate, before the resource is
    looked up) and in the action itself, each on its own."""
    calls: list[Callable[[], object]] = [lambda: m.apply(action, record(state), NOW, **params)]
    if action in m.ACTIONS:
        calls.append(lambda: m.validate(action, **params))
    for call in calls:
        with pytest.raises(LeaseholdError) as exc:
            call()
        assert (exc.value.status, exc.value.code, exc.value.field) == (400, code, field)


@pytest.mark.parametrize("text", [
    "ca761232ed4211cebacd00aa0057b223", "CA761232-ED42-11CE-BACD-00AA0057B223",
    "{ca761232-ed42-11ce-bacd-00aa0057b223}", "(ca761232-ed42-11ce-bacd-00aa0057b223)",
])
def test_guids_in_any_format_compare_equal_and_normalise(text):
    assert str(m.parse_guid(text, "lease_id")) == "ca761232-ed42-11ce-bacd-00aa0057b223"


@pytest.mark.parametrize("text", ["abcdefg", "", "ca761232-ed42-11ce-bacd-00aa0057b22", "urn:uuid:" + "0" * 32,
                                  "{ca761232ed4211cebacd00aa0057b223", "g" * 32])
def test_non_guids_are_400(text):
    with pytest.raises(LeaseholdError) as exc:
        m.parse_guid(text, "lease_id")
    assert (exc.value.status, exc.value.code) == (400, "InvalidHeaderValue")


# ---------------------------------------------------------------- use attempts (§4.2)

ACCESS: dict[uuid.UUID | None, dict[str, tuple[object, ...]]] = {  # (presented id) -> state -> (write, read)
    None: {"available": (OK, OK), "leased": ("412 LeaseIdMissing", OK), "infinite": ("412 LeaseIdMissing", OK),
           "breaking": ("412 LeaseIdMissing", OK), "broken": (OK, OK), "expired": (OK, OK)},
    A: {"available": ("412 LeaseNotPresentWith{K}Operation",) * 2, "leased": (OK, OK), "infinite": (OK, OK),
        "breaking": (OK, OK), "broken": ("412 LeaseLost",) * 2, "expired": ("412 LeaseLost",) * 2},
    B: {"available": ("412 LeaseNotPresentWith{K}Operation",) * 2,
        "leased": ("412 LeaseIdMismatchWith{K}Operation",) * 2,
        "infinite": ("412 LeaseIdMismatchWith{K}Operation",) * 2,
        "breaking": ("412 LeaseIdMismatchWith{K}Operation",) * 2,
        "broken": ("412 LeaseLost",) * 2, "expired": ("412 LeaseLost",) * 2},
}


@pytest.mark.parametrize("noun", ["blob", "container"])
@pytest.mark.parametrize("presented", [None, A, B], ids=["no-id", "id-A", "id-B"])
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("write", [True, False], ids=["write", "read"])
def test_use_attempts(noun, presented, state, write):
    want = ACCESS[presented][state][0 if write else 1]
    try:
        m.check_access(record(state), NOW, lease_id=presented, write=write, noun=noun)
        got = OK
    except LeaseholdError as err:
        got = f"{err.status} {err.code}"
    if isinstance(want, str):  # a refusal, not OK
        want = want.format(K=noun.capitalize())
    assert got == want


@pytest.mark.parametrize("state", STATES)
def test_writes_end_expired_and_broken_blob_leases_but_not_container_leases(state):
    rec = record(state)
    after_blob = m.after_write(rec, NOW, noun="blob")
    assert m.after_write(rec, NOW, noun="container") == rec
    if state in ("expired", "broken"):
        assert after_blob == m.LeaseRecord(generation=7)
        # so renewing the expired lease now fails for a blob, while a container renews
        with pytest.raises(LeaseholdError) as exc:
            m.renew(after_blob, NOW, lease_id=A)
        assert exc.value.code == "LeaseIdMismatchWithLeaseOperation"
    else:
        assert after_blob == rec


# ---------------------------------------------------------------- properties

ids = st.sampled_from([A, B, C])
records = st.one_of(
    st.just(m.LeaseRecord()),
    st.builds(lambda i, d, off, g: m.LeaseRecord(m.LEASED, i, d, None if d == -1 else NOW + timedelta(seconds=off),
                                                 None, g),
              ids, st.sampled_from([-1, 15, 37, 60]), st.integers(-120, 60), st.integers(0, 10**6)),
    st.builds(lambda i, off, g: m.LeaseRecord(m.BREAKING, i, None, None, NOW + timedelta(seconds=off), g),
              ids, st.integers(-120, 60), st.integers(0, 10**6)),
    st.builds(lambda i, g: m.LeaseRecord(m.BROKEN, i, None, None, None, g), ids, st.integers(0, 10**6)),
)
actions = st.one_of(
    st.tuples(st.just("acquire"), st.fixed_dictionaries({"duration": st.sampled_from([-1, 15, 60]),
                                                         "proposed_id": st.one_of(st.none(), ids)})),
    st.tuples(st.just("renew"), st.fixed_dictionaries({"lease_id": ids})),
    st.tuples(st.just("change"), st.fixed_dictionaries({"lease_id": ids, "proposed_id": ids})),
    st.tuples(st.just("release"), st.fixed_dictionaries({"lease_id": ids})),
    st.tuples(st.just("break"), st.fixed_dictionaries({"break_period": st.one_of(st.none(), st.integers(0, 60))})),
)


@settings(max_examples=2000, deadline=None)
@pinned("every_outcome_is_consistent")
@given(records, actions, st.floats(0, 200))
def test_every_outcome_is_consistent(rec, action_params, elapsed):
    check_outcome(rec, action_params, elapsed)


def check_outcome(rec, action_params, elapsed) -> None:
    """The outcome of one action on any record at any time agrees with
    itself: states before and after, fencing token, lease times, headers
    (tests/machine/test_machine_mutants.py plants the bugs it must catch)."""
    action, params = action_params
    now = NOW + timedelta(seconds=elapsed)
    before = m.effective_state(rec, now)
    try:
        out = m.apply(action, rec, now, new_id=X, **params)
    except LeaseholdError as err:
        assert err.status == 409 and err.code.startswith("Lease")
        return
    after = m.effective_state(out.record, now)
    assert out.state_before == before and out.state_after == after
    # a granted acquire leaves exactly the granted id leased; a new lease gets a new fencing token
    if action == "acquire":
        assert after == m.LEASED and out.record.lease_id == out.lease_id
        assert out.record.generation == rec.generation + (before != m.LEASED)
    else:
        assert out.record.generation == rec.generation
    if action in ("renew", "change"):
        assert after == m.LEASED
    if action == "release":
        assert after == m.AVAILABLE and out.record.lease_id is None
    if action == "break":
        assert after in (m.BREAKING, m.BROKEN)
        assert out.lease_time is not None and 0 <= out.lease_time <= 60
        assert (out.lease_time == 0) == (after == m.BROKEN)
        if before == m.BREAKING:  # re-breaking never lengthens
            assert out.record.state == m.BROKEN or out.record.break_at <= rec.break_at
        if before == m.LEASED and rec.expires_at is not None:  # never beyond the lease's own end
            assert out.record.state == m.BROKEN or out.record.break_at <= rec.expires_at
    # status and duration headers follow the state
    assert m.lease_status(after) == ("locked" if after in (m.LEASED, m.BREAKING) else "unlocked")
    assert (m.duration_type(out.record, after) is not None) == (after == m.LEASED)


client_steps = st.lists(st.tuples(st.sampled_from(["p", "q"]), actions, st.integers(0, 40)), max_size=40)


@settings(max_examples=300, deadline=None)
@pinned("two_clients_never_both_hold")
@given(client_steps)
def test_two_clients_never_both_hold_the_lease(steps):
    """Two clients act in turn over time; each believes it holds the lease
    as the reference promises (``never_two_holders``). The machine must never
    let both believe at once."""
    two_clients(steps)


def two_clients(steps) -> None:
    never_two_holders((who, action, {**params, "proposed_id": OWN[who]}
                       if action == "acquire" and "proposed_id" in params else params, False, wait)
                      for who, (action, params), wait in steps)


OWN = {"p": A, "q": B}


def never_two_holders(steps) -> None:
    """Play ``steps`` -- (client, action, params, legacy, seconds waited
    before it) -- against one lease record. Each client believes what the
    reference promises it, whatever the record now says: from a granted
    acquire or renew it holds the lease for the duration it asked (60 s for
    a legacy request; an infinite one until released or broken), a change
    keeps that deadline, its own release ends it, and a break by anyone
    ends it when the break period asked for runs out (at once for an
    infinite lease without one). Fails if two clients' beliefs are live at
    once, or if a client is granted a renew of a lease it never held. Lease
    ids are the clients' own (``OWN``); a change proposes the changer's."""
    rec, now = m.LeaseRecord(), NOW
    holds: dict[str, tuple[uuid.UUID | None, datetime | None]] = {}  # client -> (lease id, deadline or None)
    durations: dict[str, int] = {}  # the duration each client last asked for
    for who, action, params, legacy, wait in steps:
        now += timedelta(seconds=wait)
        holds = {w: (i, d) for w, (i, d) in holds.items() if d is None or now < d}
        params = dict(params)
        if "lease_id" in params:
            params["lease_id"] = holds.get(who, (OWN[who], None))[0]
        if action == "change":
            params["proposed_id"] = OWN[who]
        try:
            out = m.apply(action, rec, now, new_id=OWN[who], legacy=legacy, **params)
        except LeaseholdError:
            continue
        rec = out.record
        if action == "acquire":
            durations[who] = m.LEGACY_DURATION if legacy else params["duration"]
        if action in ("acquire", "renew"):
            assert who in durations, f"{who} was granted a renew of a lease it never acquired"
            asked = durations[who]
            holds[who] = (out.lease_id, None if asked == m.INFINITE else now + timedelta(seconds=asked))
        elif action == "change":
            holds[who] = (out.lease_id, holds.get(who, (None, now))[1])
        elif action == "release":
            holds.pop(who, None)
        elif action == "break":
            period = None if legacy else params.get("break_period")
            for w, (i, d) in list(holds.items()):
                end = d if period is None else now + timedelta(seconds=period)
                if d is not None and end is not None:
                    end = min(d, end)
                holds[w] = (i, now if end is None else end)
        live = [w for w, (i, d) in holds.items() if d is None or now < d]
        assert len(live) <= 1, f"{live} both hold the lease at {now:%H:%M:%S} after {who}'s {action}"
