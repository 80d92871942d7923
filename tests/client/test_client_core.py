"""The client's sans-IO core (leasehold_client.core) on its own: every
decision the sync and asyncio shells act on, from given times and results,
with no server, thread or event loop."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError, ServiceRequestError

from leasehold_client.core import (
    DEADLINE_PASSED,
    DONE,
    MAX_CREATES,
    Do,
    Election,
    LeaseCore,
    Once,
    Periods,
)

T0 = 1000.0


def refusal(status, code=None, headers=None, server="Leasehold/1"):
    err = HttpResponseError(message="x", response=None)
    err.status_code = status
    err.error_code = code  # type: ignore[attr-defined]  # azure-storage sets it; azure-core does not declare it
    err.response = SimpleNamespace(headers={"Server": server, **(headers or {})})
    return err


def held_elsewhere(**headers):
    return refusal(409, "LeaseAlreadyPresent", headers)


def missing(code="BlobNotFound"):
    err = ResourceNotFoundError("missing")
    err.error_code = code  # type: ignore[attr-defined]  # azure-storage sets it; azure-core does not declare it
    return err


def granted(duration=15, sent=T0, **options) -> LeaseCore:
    lease = LeaseCore(duration, **options)
    acquiring = lease.start_acquire(sent)
    assert acquiring is not None
    lease.granted(sent, generation=7)
    return lease


# -- acquiring

def test_a_nonblocking_acquire_gives_up_at_once_when_someone_holds_it():
    acquiring = LeaseCore(15).start_acquire(T0)
    assert acquiring is not None
    assert acquiring.options(T0, cancelled=False, real_now=T0) == {}  # no time to ask the server to wait
    assert acquiring.failed(held_elsewhere(), T0, T0).do is Do.GIVE_UP


def test_a_waiting_acquire_polls_within_its_time_and_then_gives_up():
    acquiring = LeaseCore(15, timeout=10, poll_interval=3).start_acquire(T0)
    assert acquiring is not None
    delays = []
    for now in (T0, T0 + 2, T0 + 5):
        step = acquiring.failed(held_elsewhere(), now, now)
        assert step.do is Do.WAIT and 0 < step.delay <= 3
        delays.append(step.delay)
    step = acquiring.failed(held_elsewhere(), T0 + 9.5, T0 + 9.5)
    assert step.do is Do.WAIT and step.delay <= 0.5  # never past the timeout
    assert acquiring.failed(held_elsewhere(), T0 + 10, T0 + 10).do is Do.GIVE_UP


def test_retry_after_is_followed_but_never_past_the_next_poll():
    acquiring = LeaseCore(15, timeout=None, poll_interval=4).start_acquire(T0)
    assert acquiring is not None
    soon = acquiring.failed(held_elsewhere(**{"Retry-After": "2"}), T0, T0)
    assert soon.do is Do.WAIT and 2 <= soon.delay <= 2 + 1.0
    late = acquiring.failed(held_elsewhere(**{"Retry-After": "27"}), T0, T0)
    assert late.do is Do.WAIT and 4 <= late.delay <= 4 + 1.0


def test_an_acquire_without_a_timeout_never_gives_up():
    acquiring = LeaseCore(15, timeout=None).start_acquire(T0)
    assert acquiring is not None
    assert acquiring.failed(held_elsewhere(), T0 + 10 ** 9, T0).do is Do.WAIT


def test_a_missing_blob_is_created_a_few_times_then_the_error_raised():
    acquiring = LeaseCore(15).start_acquire(T0)
    assert acquiring is not None
    assert [acquiring.failed(missing(), T0, T0).do for _ in range(MAX_CREATES + 1)] == \
        [Do.CREATE] * MAX_CREATES + [Do.RAISE]
    no_create = LeaseCore(15, create=False).start_acquire(T0)
    assert no_create is not None and no_create.failed(missing(), T0, T0).do is Do.RAISE


def test_transient_acquire_failures_are_retried_while_time_is_left_then_raised():
    acquiring = LeaseCore(15, timeout=5).start_acquire(T0)
    assert acquiring is not None
    for err in (ServiceRequestError("refused"), refusal(503, "ServerBusy"), ConnectionResetError()):
        step = acquiring.failed(err, T0 + 1, T0)
        assert step.do is Do.WAIT and 0 < step.delay <= 4
    assert acquiring.failed(refusal(503, "ServerBusy"), T0 + 5, T0).do is Do.RAISE


@pytest.mark.parametrize("err", [refusal(400, "InvalidHeaderValue"), refusal(403, "AuthenticationFailed"),
                                 ValueError("a bug")])
def test_an_acquire_refused_for_another_reason_raises_at_once(err):
    acquiring = LeaseCore(15, timeout=None).start_acquire(T0)
    assert acquiring is not None
    assert acquiring.failed(err, T0, T0).do is Do.RAISE


def test_the_server_is_asked_to_hold_the_acquire_until_it_is_seen_not_to():
    lease = LeaseCore(15, timeout=60)
    acquiring = lease.start_acquire(T0)
    assert acquiring is not None
    asked = acquiring.options(T0, cancelled=False, real_now=T0)
    assert asked["headers"] == {"x-leasehold-wait": "20.0"}
    # Held for the whole wait: ask again at once, no polling.
    assert acquiring.failed(held_elsewhere(), T0 + 20, T0 + 20).delay == 0.0
    assert lease.server_wait.worth_asking
    # A cancelled (stopping) acquire asks for no wait.
    assert acquiring.options(T0 + 20, cancelled=True, real_now=T0 + 20) == {}
    # A server that answers at once (Azure, Azurite) is polled from then on.
    elsewhere = LeaseCore(15, timeout=60)
    polling = elsewhere.start_acquire(T0)
    assert polling is not None
    assert polling.options(T0, cancelled=False, real_now=T0)
    step = polling.failed(refusal(409, "LeaseAlreadyPresent", server="Azurite-Blob/3"), T0, T0)
    assert step.do is Do.WAIT and step.delay > 0
    assert polling.options(T0, cancelled=False, real_now=T0) == {} and not elsewhere.server_wait.worth_asking


def test_a_held_lease_is_not_acquired_again_and_a_released_one_never():
    lease = granted()
    assert lease.start_acquire(T0 + 1) is None
    assert lease.releasing() and not lease.releasing()
    with pytest.raises(RuntimeError, match="released"):
        lease.start_acquire(T0 + 2)


# -- holding

def test_the_local_deadline_counts_from_the_request_sent_minus_the_margin():
    lease = LeaseCore(15)
    assert lease.why_not_held() == "the lease was not acquired" and not lease.expired(T0)
    assert lease.start_acquire(T0) is not None
    assert lease.granted(T0, generation=3)  # to be renewed
    assert (lease.deadline, lease.generation, lease.next_renewal) == (T0 + 13.5, 3, T0 + 5)
    assert lease.remaining_at(T0 + 3.5) == 10 and lease.watch(T0 + 3.5) == 10
    assert not lease.expired(T0 + 13.49) and lease.why_not_held() is None
    assert lease.expired(T0 + 13.5) and lease.watch(T0 + 13.5) is None


def test_an_infinite_lease_is_not_renewed_and_never_expires():
    lease = LeaseCore(-1)
    assert lease.start_acquire(T0) is not None
    assert not lease.granted(T0, generation=None)
    assert not lease.expired(T0 + 10 ** 9) and lease.remaining_at(T0 + 10 ** 9) == float("inf")


def test_a_clock_jump_past_the_deadline_loses_the_lease_once():
    lease = granted()
    jumped = T0 + 3600  # a suspended machine, a paused process
    assert lease.expired(jumped)
    assert lease.lose(DEADLINE_PASSED, jumped)
    assert not lease.lose("renewal refused: 409 LeaseIdMismatchWithLeaseOperation", jumped + 1)
    assert (lease.why_not_held(), lease.lost_at, lease.is_lost) == (DEADLINE_PASSED, jumped, True)
    assert not lease.expired(jumped + 1)  # counted once: the shell tells its user once
    assert lease.state() == "lost"


def test_a_released_lease_is_not_lost_afterwards():
    lease = granted()
    assert lease.releasing()
    assert not lease.lose(DEADLINE_PASSED, T0 + 100)
    assert not lease.expired(T0 + 100)
    assert (lease.why_not_held(), lease.lost_reason, lease.state()) == ("the lease was released", None, "not held")


def test_a_lease_never_acquired_has_nothing_to_release():
    assert not LeaseCore(15).releasing()


# -- renewing

def test_a_renewal_moves_the_deadline_from_when_it_was_sent():
    lease = granted(renew_interval=4)
    assert lease.renewed(T0 + 4)
    assert (lease.deadline, lease.next_renewal, lease.renewals) == (T0 + 17.5, T0 + 8, 1)
    # An answer to an earlier request, arriving late, never moves it back.
    assert lease.renewed(T0 + 2)
    assert lease.deadline == T0 + 17.5


def test_a_transient_renewal_failure_is_retried_before_the_deadline():
    lease = granted(renew_interval=5)
    delays = [lease.renewal_failed(ServiceRequestError("reset"), T0 + 5 + i, None) for i in range(6)]
    assert all(isinstance(d, float) and 0 < d <= 5 / 4 for d in delays)
    late = lease.renewal_failed(refusal(503, "ServerBusy"), T0 + 13.4)
    assert isinstance(late, float) and late <= 0.1 + 1e-9  # never sleeps past the deadline
    assert lease.renewed(T0 + 13.4) and lease.renew_attempt == 0  # back-off starts over


def test_transient_renewal_failures_until_the_deadline_lose_the_lease():
    lease = granted()
    reason = lease.renewal_failed(ServiceRequestError("unreachable"), T0 + 13.5)
    assert reason == f"{DEADLINE_PASSED} (last error: ServiceRequestError: unreachable)"


@pytest.mark.parametrize("code", ["LeaseIsBrokenAndCannotBeRenewed", "LeaseIdMismatchWithLeaseOperation",
                                  "LeaseNotPresentWithLeaseOperation"])
def test_a_refused_renewal_loses_the_lease_at_once(code):
    lease = granted()
    status = 412 if code == "LeaseNotPresentWithLeaseOperation" else 409
    assert lease.renewal_failed(refusal(status, code), T0 + 5) == f"renewal refused: {status} {code}"


def test_a_timed_out_renewal_counts_as_transient_when_the_shell_says_so():
    lease = granted()
    assert isinstance(lease.renewal_failed(ValueError("cancelled"), T0 + 5, transient=True), float)
    assert isinstance(lease.renewal_failed(ValueError("cancelled"), T0 + 5), str)


def test_a_renewal_answered_after_the_lease_was_lost_does_not_revive_it():
    lease = granted()
    assert lease.lose(DEADLINE_PASSED, T0 + 13.5)
    assert not lease.renewed(T0 + 5)
    assert (lease.deadline, lease.renewals, lease.is_lost) == (T0 + 13.5, 0, True)


def test_a_renew_request_may_not_outlive_the_lease_by_much():
    lease = granted(renew_interval=5)
    assert lease.renewal_timeout(T0 + 5) == 5
    assert lease.renewal_timeout(T0 + 11) == 2.5
    assert lease.renewal_timeout(T0 + 13.4) == 1.0  # at least a second, to be answered at all


# -- do_once

def test_do_once_polls_until_done_and_waits_on_the_server_where_it_can():
    once = Once(key="progress", poll_interval=4, lease_options={"renew_interval": 5})
    assert not once.done(None) and not once.done({"progress": "started"}) and once.done({"progress": DONE})
    assert once.options() == {"renew_interval": 5}
    delays = [once.not_acquired(server_waits=False) for _ in range(6)]
    assert all(0 < d <= 4 for d in delays) and delays[-1] >= 2  # grows to the poll interval
    assert once.not_acquired(server_waits=True) == 0.0
    assert once.options() == {"timeout": 20.0, "poll_interval": 4, "renew_interval": 5}
    metadata = {"owner": "ops"}
    assert once.finished(metadata) == {"owner": "ops", "progress": DONE} and metadata == {"owner": "ops"}


# -- once_per

def test_periods_are_slots_of_wall_clock_time_run_once_each():
    hourly = Periods(3600)
    assert (hourly.slot_at(3599.9), hourly.slot_at(3600), hourly.slot_at(7300)) == (0, 1, 2)
    record = hourly.record({"owner": "ops"}, 5, 5 * 3600 + 12)
    assert record == {"owner": "ops", "lastrun": "5", "lastrunat": "1970-01-01T05:00:12+00:00"}
    assert hourly.is_due(None, 5) and hourly.is_due({"lastrun": "4"}, 5)
    assert not hourly.is_due(record, 5)
    assert hourly.recorded({"lastrun": "not a number"}) is None
    with pytest.raises(ValueError):
        Periods(0)


def test_a_wall_clock_set_back_does_not_run_a_period_again_and_one_set_forward_runs_once():
    hourly = Periods(3600)
    ran = hourly.record({}, hourly.slot_at(10 * 3600 + 5), 10 * 3600 + 5)
    assert not hourly.is_due(ran, hourly.slot_at(9 * 3600 + 5))  # NTP stepped the clock back an hour
    assert hourly.is_due(ran, hourly.slot_at(15 * 3600))  # five hours skipped: one run, not five


def test_once_per_sleeps_to_the_next_period_or_polls_while_this_one_is_pending():
    job = Periods(60, poll_interval=10)
    for _ in range(20):
        assert 30 <= job.pause(pending=False, wall=630) <= 30 + 1.0  # spread past the boundary
        assert 5 <= job.pause(pending=True, wall=630) <= 10  # polled, jittered
    assert job.pause(pending=True, wall=659) <= 1.0  # never past the next period's start
    assert Periods(3600).poll_interval == 15.0 and Periods(20).poll_interval == 5.0


# -- leader election

def test_an_election_counts_terms_begun_and_ended():
    election = Election()
    term = granted()
    election.elected(term, 1_700_000_000.0)
    assert (election.term, election.elected_at, election.transitions) == (term, 1_700_000_000.0, 1)
    election.deposed()
    assert (election.term, election.elected_at, election.transitions) == (None, None, 2)
