"""machine.deadline and machine.seconds_remaining: the one home of "when does
the current lease state end by itself", which the history, the JSON API, the
admin and the CLI all use."""

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from leases.domain import machine as m

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
ID = uuid.uuid4()
LATER = NOW + timedelta(seconds=14, microseconds=1)
EARLIER = NOW - timedelta(seconds=1)


@pytest.mark.parametrize("record, deadline, remaining", [
    (m.LeaseRecord(), None, 0),                                                     # available
    (m.LeaseRecord(m.LEASED, ID, 15, LATER), LATER, 15),                            # leased: its expiry, rounded up
    (m.LeaseRecord(m.LEASED, ID, m.INFINITE), None, None),                          # infinite: never
    (m.LeaseRecord(m.LEASED, ID, 15, EARLIER), None, 0),                            # expired: unlocked
    (m.LeaseRecord(m.BREAKING, ID, None, None, LATER), LATER, 15),                  # breaking: the break's end
    (m.LeaseRecord(m.BREAKING, ID, None, None, EARLIER), None, 0),                  # broken by now
    (m.LeaseRecord(m.BROKEN, ID), None, 0),
    (m.LeaseRecord(m.AVAILABLE, ID, 60), None, 0),                                  # a legacy release
])
def test_deadline_and_seconds_remaining(record, deadline, remaining):
    assert m.deadline(record, NOW) == deadline
    assert m.seconds_remaining(record, NOW) == remaining


def test_the_deadline_after_each_action_is_what_the_history_records():
    acquired = m.acquire(m.LeaseRecord(), NOW, duration=30, proposed_id=None, new_id=ID).record
    assert m.deadline(acquired, NOW) == NOW + timedelta(seconds=30)
    breaking = m.break_(acquired, NOW, period=10).record
    assert m.deadline(breaking, NOW) == NOW + timedelta(seconds=10)
    assert m.deadline(m.break_(acquired, NOW, period=0).record, NOW) is None
    assert m.deadline(m.release(acquired, NOW, lease_id=ID).record, NOW) is None
    # the deadline passes: the state it described has ended
    assert m.deadline(breaking, NOW + timedelta(seconds=10)) is None


def test_a_state_ends_at_its_deadline_exactly():
    """The deadline is the first instant without the lease (seconds_left
    rounds up so that a client waiting that long never arrives early): at
    it, another client's acquire is granted."""
    leased = m.LeaseRecord(m.LEASED, ID, 15, NOW)
    breaking = m.LeaseRecord(m.BREAKING, ID, None, None, NOW)
    assert (m.effective_state(leased, NOW), m.effective_state(breaking, NOW)) == (m.EXPIRED, m.BROKEN)
    assert m.effective_state(leased, NOW - timedelta(microseconds=1)) == m.LEASED
    assert m.effective_state(breaking, NOW - timedelta(microseconds=1)) == m.BREAKING
    other = uuid.uuid4()
    for record in (leased, breaking):
        assert m.acquire(record, NOW, duration=15, proposed_id=other, new_id=other).lease_id == other


def test_renew_sets_the_deadline_of_a_held_fixed_lease_to_its_duration_from_now():
    """15 s granted at NOW, renewed 10 s later: held until 25 s, not 15 s
    (and one microsecond before 25 s, still held)."""
    held = m.acquire(m.LeaseRecord(), NOW, duration=15, proposed_id=ID, new_id=ID).record
    renewed_at = NOW + timedelta(seconds=10)
    out = m.renew(held, renewed_at, lease_id=ID)
    assert (out.state_before, out.state_after) == (m.LEASED, m.LEASED)
    assert out.record.expires_at == renewed_at + timedelta(seconds=15) == m.deadline(out.record, renewed_at)
    assert out.record.duration == 15 and out.record.generation == held.generation
    assert m.effective_state(out.record, NOW + timedelta(seconds=25) - timedelta(microseconds=1)) == m.LEASED
    assert m.effective_state(out.record, NOW + timedelta(seconds=25)) == m.EXPIRED


def test_renew_of_an_infinite_lease_keeps_it_without_a_deadline():
    held = m.acquire(m.LeaseRecord(), NOW, duration=m.INFINITE, proposed_id=ID, new_id=ID).record
    out = m.renew(held, NOW + timedelta(days=3), lease_id=ID)
    assert out.record == held and out.record.expires_at is None
    assert m.deadline(out.record, NOW + timedelta(days=30)) is None
    assert m.effective_state(out.record, NOW + timedelta(days=30)) == m.LEASED


def test_renew_after_expiry_resumes_the_same_lease_for_its_duration_from_now():
    """Expired 5 s ago and nobody else took it: the renew resumes it, its
    deadline the duration from the renew, not from the old expiry."""
    held = m.acquire(m.LeaseRecord(), NOW, duration=15, proposed_id=ID, new_id=ID).record
    renewed_at = NOW + timedelta(seconds=20)
    out = m.renew(held, renewed_at, lease_id=ID)
    assert (out.state_before, out.state_after) == (m.EXPIRED, m.LEASED)
    assert out.record.expires_at == renewed_at + timedelta(seconds=15)
    assert out.record.lease_id == ID and out.record.generation == held.generation
