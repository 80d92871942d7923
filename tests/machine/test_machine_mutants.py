"""The properties of test_machine.py and test_machine_legacy.py can fail:
each is run against the machine with one bug planted (a mutant), and must
find an example that fails it. A property no mutant fails could pass
whatever the machine did. docs/development/tests.md lists them, property by
property, with the bug each kills.

Every mutant is a small change to one function of leases/domain/machine.py, put in
place with monkeypatch (``m.apply`` looks its functions up when called), and
hypothesis's ``find`` searches the property's own strategy, derandomized, so
the check shows the property's inputs reach the bug, not only that a
hand-written example would."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import Phase, find, settings
from hypothesis import strategies as st

from leases.domain import machine as m
from tests.machine import test_machine as current
from tests.machine import test_machine_legacy as legacy
from tests.machine.pinned import PINNED

_acquire, _renew, _change, _release, _break = m.acquire, m.renew, m.change, m.release, m.break_


def acquire_grants_a_second_holder(record, now, **kw):
    """Acquire ignores a live lease held under another id."""
    if m.effective_state(record, now) == m.LEASED:
        record = m.LeaseRecord(generation=record.generation)
    return _acquire(record, now, **kw)


def acquire_keeps_the_fencing_token(record, now, **kw):
    """A new lease keeps the generation of the one before."""
    out = _acquire(record, now, **kw)
    return replace(out, record=replace(out.record, generation=record.generation))


def acquire_forgets_the_duration(record, now, *, duration=None, legacy=False, **kw):
    """A legacy acquire is a 30-s lease, not a 60-s one."""
    out = _acquire(record, now, duration=duration, legacy=legacy, **kw)
    if legacy:
        return replace(out, record=replace(out.record, expires_at=now + timedelta(seconds=30), duration=30))
    return out


def lease_expires_early(record, now, **kw):
    """A lease runs one second short of what the client asked."""
    out = _acquire(record, now, **kw)
    if out.record.expires_at is None:
        return out
    return replace(out, record=replace(out.record, expires_at=out.record.expires_at - timedelta(seconds=1)))


def renew_keeps_the_deadline(record, now, **kw):
    """Renewing a held fixed lease leaves its deadline where it was."""
    out = _renew(record, now, **kw)
    if m.effective_state(record, now) == m.LEASED and record.expires_at is not None:
        return replace(out, record=replace(out.record, expires_at=record.expires_at))
    return out


def change_ignores_the_lease_id(record, now, *, lease_id=None, **kw):
    """Change takes the lease whatever id the caller presents."""
    return _change(record, now, lease_id=record.lease_id if lease_id is not None else None, **kw)


def release_ignores_the_lease_id(record, now, *, lease_id=None, **kw):
    """Release frees the lease whatever id the caller presents."""
    return _release(record, now, lease_id=record.lease_id or lease_id, **kw)


def break_ignores_the_period(record, now, *, period=None, **kw):
    """Break with a period breaks at once."""
    return _break(record, now, period=0 if period else period, **kw)


def rebreak_lengthens(record, now, *, period=None, **kw):
    """Breaking a breaking lease restarts its period."""
    if m.effective_state(record, now) == m.BREAKING and period:
        record = replace(record, state=m.LEASED, break_at=None, duration=m.INFINITE)
        out = _break(record, now, period=period, **kw)
        return replace(out, state_before=m.BREAKING)
    return _break(record, now, period=period, **kw)


def current_renew_sees_a_released_id(record, now, *, lease_id=None, legacy=False, **kw):
    """A current-version renew re-grants a lease a legacy release left."""
    if not legacy and m.released(record, now) and lease_id == record.lease_id:
        return _renew(record, now, lease_id=lease_id, legacy=True, **kw)
    return _renew(record, now, lease_id=lease_id, legacy=legacy, **kw)


def legacy_renew_ignores_the_id(record, now, *, lease_id=None, legacy=False, **kw):
    """A legacy renew of a released lease re-grants it to any id presented."""
    if legacy and m.released(record, now):
        lease_id = record.lease_id
    return _renew(record, now, lease_id=lease_id, legacy=legacy, **kw)


def legacy_rebreak_is_idempotent(record, now, *, legacy=False, **kw):
    """A legacy break of a breaking or broken lease answers 202 as current versions do."""
    if legacy and m.effective_state(record, now) in (m.BREAKING, m.BROKEN):
        return _break(record, now, legacy=False, **kw)
    return _break(record, now, legacy=legacy, **kw)


PROPERTIES = {  # name: (the property's check, its strategy)
    "every_outcome_is_consistent": (current.check_outcome,
                                    st.tuples(current.records, current.actions, st.floats(0, 200))),
    "two_clients_never_both_hold": (current.two_clients, st.tuples(current.client_steps)),
    "legacy_and_current_agree": (legacy.check_agreement,
                                 st.tuples(legacy.current_records, legacy.legacy_actions, st.floats(0, 200))),
    "legacy_release_invisible": (legacy.check_release_invisible,
                                 st.tuples(legacy.released_records, legacy.current_actions, st.floats(0, 200),
                                           st.sampled_from(["blob", "container"]))),
    "old_and_new_never_both_hold": (legacy.old_and_new_clients, st.tuples(legacy.old_and_new_steps)),
}

KILLS = [  # (property, machine function replaced, mutant)
    ("every_outcome_is_consistent", "acquire", acquire_keeps_the_fencing_token),
    ("every_outcome_is_consistent", "break_", rebreak_lengthens),
    ("two_clients_never_both_hold", "acquire", acquire_grants_a_second_holder),
    ("two_clients_never_both_hold", "acquire", lease_expires_early),
    ("two_clients_never_both_hold", "change", change_ignores_the_lease_id),
    ("two_clients_never_both_hold", "release", release_ignores_the_lease_id),
    ("two_clients_never_both_hold", "break_", break_ignores_the_period),
    ("legacy_and_current_agree", "acquire", acquire_forgets_the_duration),
    ("legacy_and_current_agree", "break_", legacy_rebreak_is_idempotent),
    ("legacy_release_invisible", "renew", current_renew_sees_a_released_id),
    ("old_and_new_never_both_hold", "acquire", acquire_grants_a_second_holder),
    ("old_and_new_never_both_hold", "renew", legacy_renew_ignores_the_id),
]


def violated(check, example) -> bool:
    try:
        check(*example)
    except AssertionError:
        return True
    return False


@pytest.mark.parametrize("prop,function,mutant", KILLS, ids=[f"{p}-{f.__name__}" for p, _, f in KILLS])
def test_the_property_fails_on_its_planted_bug(monkeypatch, prop, function, mutant):
    check, strategy = PROPERTIES[prop]
    monkeypatch.setattr(m, function, mutant)
    found = find(strategy, lambda example: violated(check, example),
                 settings=settings(max_examples=3000, database=None, derandomize=True, phases=[Phase.generate]))
    assert violated(check, found)


# Caught by a pinned example; hypothesis's search of the strategy finds it too, in 20 s at 3,000 examples.
PINNED_ONLY = [("two_clients_never_both_hold", "renew", renew_keeps_the_deadline)]
TESTS = {  # name: the property's test as the suite runs it (its budget, its pinned examples)
    "every_outcome_is_consistent": current.test_every_outcome_is_consistent,
    "two_clients_never_both_hold": current.test_two_clients_never_both_hold_the_lease,
    "legacy_and_current_agree": legacy.test_legacy_and_current_agree_where_the_references_say_they_agree,
    "legacy_release_invisible": legacy.test_current_clients_cannot_tell_a_legacy_release_from_no_lease,
    "old_and_new_never_both_hold": legacy.test_old_and_new_clients_never_both_hold_the_lease,
}


@pytest.mark.parametrize("prop,function,mutant", KILLS + PINNED_ONLY,
                         ids=[f"{p}-{f.__name__}" for p, _, f in KILLS + PINNED_ONLY])
def test_the_property_test_fails_on_its_planted_bug_in_every_run(monkeypatch, prop, function, mutant):
    """The property's own test, at its own budget, fails on the mutant: one
    of its pinned examples (tests/machine/pinned.py) shows the bug, whatever
    the random examples of this run."""
    check, _ = PROPERTIES[prop]
    monkeypatch.setattr(m, function, mutant)
    assert any(violated(check, example) for example in PINNED[prop]), f"no pinned example of {prop} shows it"
    with pytest.raises(AssertionError):
        TESTS[prop]()


def test_every_property_has_a_mutant():
    assert {p for p, _, _ in KILLS} == set(PROPERTIES)
