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
