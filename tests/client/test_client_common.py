"""The client's pure parts: lease timing, error classes, back-off, and the
ManualClock the other client tests run on."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ServiceRequestError

from leasehold_client._common import Timing, backoff, is_conflict, is_transient, jittered, retry_after
from leasehold_client.clock import ManualClock


def test_timing_defaults_leave_two_renewals_before_the_local_deadline():
    timing = Timing.for_duration(60)
    assert (timing.renew_interval, timing.safety_margin) == (20, 2)
    assert timing.deadline(100.0) == 158.0  # sent at 100: the server's countdown started no earlier
    short = Timing.for_duration(15)
    assert (short.renew_interval, short.safety_margin) == (5, 1.5)
    assert Timing.for_duration(-1).deadline(100.0) == float("inf")


@pytest.mark.parametrize("duration, options", [
    (14, {}), (61, {}), (0, {}),
    (15, {"safety_margin": 15}), (15, {"safety_margin": -1}),
    (15, {"renew_interval": 0}), (15, {"renew_interval": 14, "safety_margin": 2}),
])
def test_timing_refuses_what_could_not_keep_the_lease(duration, options):
    with pytest.raises(ValueError):
        Timing.for_duration(duration, **options)


def test_backoff_grows_is_capped_and_jittered_downwards():
    for attempt in range(8):
        value = backoff(attempt, first=0.5, cap=4)
        assert min(4, 0.5 * 2 ** attempt) / 2 <= value <= min(4, 0.5 * 2 ** attempt)
    assert all(5 <= jittered(10) <= 10 for _ in range(100))


def _http_error(status, code=None, headers=None):
    err = HttpResponseError(message="x", response=None)
    err.status_code = status
    err.error_code = code  # type: ignore[attr-defined]  # azure-storage sets it; azure-core does not declare it
    err.response = SimpleNamespace(headers=headers or {})
    return err


def test_which_errors_are_worth_retrying():
    assert is_transient(ServiceRequestError("connection refused"))
    assert is_transient(_http_error(503)) and is_transient(_http_error(500))
    # A commit whose outcome is not known (decision 0045): tried again, the lease not counted held.
    assert is_transient(_http_error(500, "OperationTimedOut")) and not is_conflict(_http_error(500, "OperationTimedOut"))
    assert not is_transient(_http_error(409, "LeaseIsBrokenAndCannotBeRenewed"))
    assert not is_transient(_http_error(412, "LeaseIdMismatchWithLeaseOperation"))
    assert is_conflict(_http_error(409, "LeaseAlreadyPresent"))
    assert is_conflict(_http_error(409, "LeaseIsBreakingAndCannotBeAcquired"))
    assert not is_conflict(ResourceExistsError("exists"))


def test_retry_after_is_read_from_the_refusal_when_sent():
    assert retry_after(_http_error(409, "LeaseAlreadyPresent", {"Retry-After": "27"})) == 27
    assert retry_after(_http_error(409, "LeaseAlreadyPresent")) is None
    assert retry_after(_http_error(409, "LeaseAlreadyPresent", {"Retry-After": "soon"})) is None


def test_manual_clock_moves_only_when_advanced_and_wakes_waiters():
    moved: list[float] = []
    clock = ManualClock(start=50, wall_start=1_000_000, on_advance=moved.append)
    woke = threading.Event()

    def sleeper() -> None:
        clock.sleep(10)
        woke.set()

    thread = clock.enlist(threading.Thread(target=sleeper))
    thread.start()
    assert clock.settle()  # the thread is asleep on the clock
    clock.advance(9.5)
    assert clock.settle() and not woke.is_set()
    clock.advance(0.5)
    assert clock.settle() and woke.is_set()
    thread.join()
    assert (clock.monotonic(), clock.time(), moved) == (60, 1_000_010, [9.5, 0.5])
    with pytest.raises(ValueError):
        clock.advance(-1)
