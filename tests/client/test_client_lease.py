"""AutoRenewLease (sync) against Leasehold (time moved, not slept) and Azurite
(real time, short waits), through the official SDK."""

from __future__ import annotations

import pytest
from azure.storage.blob import BlobLeaseClient
from azure.core.pipeline.transport import RequestsTransport

from leasehold_client import AutoRenewLease, LeaseLostError
from tests.client.helpers import Partition


def test_nonblocking_acquire_says_whether_it_got_the_lease_and_creates_the_blob(backend):
    container, name = backend.names()  # neither exists yet
    first = AutoRenewLease(backend.blob(container, name), 15, clock=backend.clock)
    with first:
        assert first.has_lease and first.held
        first.check()
        props = backend.blob(container, name).get_blob_properties()
        assert props.lease.state == "leased" and props.size == 0
        with AutoRenewLease(backend.blob(container, name), 15, clock=backend.clock) as second:
            assert not second.has_lease
            with pytest.raises(LeaseLostError):
                second.check()
    assert backend.blob(container, name).get_blob_properties().lease.state == "available"
    with AutoRenewLease(backend.blob(container, name), 15, clock=backend.clock) as third:
        assert third.has_lease
        if backend.name == "leasehold":
            assert (first.generation, third.generation) == (1, 2)  # a new lease, a new fencing token
        else:
            assert third.generation is None


def test_released_when_the_block_raises(backend):
    container, name = backend.names()
    with pytest.raises(ZeroDivisionError):
        with AutoRenewLease(backend.blob(container, name), 15, clock=backend.clock) as lease:
            assert lease.has_lease
            1 / 0
    assert backend.blob(container, name).get_blob_properties().lease.state == "available"
    with pytest.raises(LeaseLostError, match="released"):
        lease.check()
    assert not lease.lost.is_set()  # a release is not a loss


def test_renews_in_the_background_past_the_duration(backend):
    container, name = backend.names()
    interval = 5.0 if backend.fake_time else 0.5
    with AutoRenewLease(backend.blob(container, name), 15, renew_interval=interval, clock=backend.clock) as lease:
        held_for = 40.0 if backend.fake_time else 1.5
        acquired_at = lease.acquired_at
        assert acquired_at is not None
        backend.run_until(lambda: lease.clock.monotonic() - acquired_at >= held_for,
                          step=1.0 if backend.fake_time else 0.1)
        lease.check()
        assert lease.renewals >= 2 and not lease.lost.is_set()
        assert not AutoRenewLease(backend.blob(container, name), 15, clock=backend.clock).acquire()


def test_a_broken_lease_is_noticed_within_one_renewal_interval(backend):
    container, name = backend.names()
    interval = 5.0 if backend.fake_time else 1.0
    losses: list[AutoRenewLease] = []
    with AutoRenewLease(backend.blob(container, name), 15, renew_interval=interval, clock=backend.clock,
                        on_lost=losses.append) as lease:
        backend.advance(0.5)
        broken_at = backend.clock.monotonic()
        # Another client (an operator) breaks it at once.
        BlobLeaseClient(backend.blob(container, name)).break_lease(lease_break_period=0)
        took = backend.run_until(lease.lost.is_set, step=0.25 if backend.fake_time else 0.05, limit=2 * interval)
        assert took <= interval + (0.25 if backend.fake_time else 0.5)
        # on_lost runs on the renewal thread right after `lost` is set: wait for it, not for time.
        backend.run_until(lambda: bool(losses), step=0.01, limit=interval)
        assert losses == [lease] and lease.lost_reason is not None and "renewal refused" in lease.lost_reason
        assert lease.lost_at - broken_at <= interval + 0.5
        with pytest.raises(LeaseLostError, match="renewal refused"):
            lease.check()
    # Someone else may take it now.
    with AutoRenewLease(backend.blob(container, name), 15, clock=backend.clock) as other:
        assert other.has_lease


def test_waits_up_to_a_timeout_for_the_lease(leasehold):
    container, name = leasehold.names()
    holder = AutoRenewLease(leasehold.blob(container, name), 15, clock=leasehold.clock)
    holder.acquire()
    results = {}

    def wait_for_it(key, timeout):
        lease = AutoRenewLease(leasehold.blob(container, name), 15, timeout=timeout, poll_interval=1,
                               clock=leasehold.clock)
        results[key] = lease.acquire()
        results[key + "_at"] = leasehold.clock.monotonic()
        if results[key]:
            lease.release()

    short = leasehold.start(wait_for_it, "short", 3)
    leasehold.run_until(lambda: "short" in results, step=0.5)
    assert results["short"] is False  # gave up after its 3 s
    long = leasehold.start(wait_for_it, "long", 60)
    leasehold.advance(2)
    holder.release()  # the waiter gets it at its next poll
    leasehold.run_until(lambda: "long" in results, step=0.25)
    assert results["long"] is True
    short.join(), long.join()


def test_renewals_that_stop_make_check_raise_before_the_server_lets_go(leasehold):
    """A holder whose renewals no longer reach the server (its process lives):
    check() raises at the local deadline, strictly before anyone else can get it."""
    container, name = leasehold.names()
    partition = Partition()
    lease = AutoRenewLease(leasehold.blob(container, name, raw_request_hook=partition), 15,
                           clock=leasehold.clock, safety_margin=2)
    lease.acquire()
    start = leasehold.clock.monotonic()
    partition.blocked = True
    rival = AutoRenewLease(leasehold.blob(container, name), 15, clock=leasehold.clock)
    while not rival.acquire():
        leasehold.advance(0.5)
        if leasehold.clock.monotonic() - start < 13:
            lease.check()  # still safely held
    with pytest.raises(LeaseLostError, match="deadline"):
        lease.check()
    assert partition.refused >= 2  # it kept retrying while time remained
    assert lease.lost_at is not None and rival.acquired_at is not None and lease.generation is not None
    assert lease.lost_at < rival.acquired_at
    assert lease.lost_at - start <= 13 + 0.5 and rival.acquired_at - start >= 15
    assert rival.generation == lease.generation + 1
    rival.release()
    lease.release()


def test_container_leases_and_infinite_leases(backend):
    container, _ = backend.names()
    client = backend.service().get_container_client(container)  # does not exist yet
    with AutoRenewLease(client, -1, clock=backend.clock) as lease:
        assert lease.has_lease and lease.remaining() == float("inf")
        backend.advance(1)
        lease.check()
        assert client.get_container_properties().lease.duration == "infinite"
        assert not AutoRenewLease(backend.service().get_container_client(container), 15,
                                  clock=backend.clock).acquire()
    assert client.get_container_properties().lease.state == "available"


def test_a_released_lease_object_is_not_reused(leasehold):
    container, name = leasehold.names()
    with AutoRenewLease(leasehold.blob(container, name), 15, clock=leasehold.clock) as lease:
        assert lease.has_lease
    with pytest.raises(RuntimeError, match="released"):
        lease.acquire()


class _RetryAfterTransport(RequestsTransport):
    """Adds ``Retry-After`` to refused acquires, as Leasehold's JSON API sends
    it (its Azure door does not), and notes when each acquire was sent."""

    def __init__(self, clock, seconds, **kwargs):
        super().__init__(**kwargs)
        self.clock, self.seconds, self.sent = clock, seconds, []

    def send(self, request, **kwargs):
        acquiring = request.headers.get("x-ms-lease-action") == "acquire"
        if acquiring:
            self.sent.append(self.clock.monotonic())
        response = super().send(request, **kwargs)
        if acquiring and response.status_code == 409 and self.seconds is not None:
            response.headers["Retry-After"] = str(self.seconds)
        return response


@pytest.mark.parametrize("retry_after", [3, 30, None])
def test_a_waiter_follows_retry_after_capped_by_its_poll_interval(leasehold, retry_after):
    container, name = leasehold.names()
    holder = AutoRenewLease(leasehold.blob(container, name), 15, clock=leasehold.clock)
    holder.acquire()
    transport = _RetryAfterTransport(leasehold.clock, retry_after)
    waiter = AutoRenewLease(leasehold.blob(container, name, transport=transport), 15, timeout=60, poll_interval=5,
                            clock=leasehold.clock)
    result: dict[str, bool] = {}
    leasehold.start(lambda: result.setdefault("got", waiter.acquire()))
    leasehold.run_until(lambda: len(transport.sent) >= 2, step=0.25)
    gap = transport.sent[1] - transport.sent[0]
    if retry_after == 3:
        assert 3 + 0.5 <= gap <= 3 + 1 + 0.25  # Retry-After, plus 0.5-1 s jitter, within a step
    elif retry_after == 30:
        assert 5 + 0.5 <= gap <= 5 + 1 + 0.25  # capped by poll_interval: it may be released early
    else:
        assert gap <= 0.5 + 0.25  # no hint: back-off from 0.25-0.5 s
    holder.release()
    leasehold.run_until(lambda: "got" in result, step=0.5)
    assert result["got"] is True
    waiter.release()
