"""AutoRenewLease: a blob (or container) lease held for as long as a block runs.

    with AutoRenewLease(blob_client, duration=15) as lease:
        if lease.has_lease:
            for item in work:
                lease.check()          # raises LeaseLostError once the lease may be gone
                handle(item, fencing_token=lease.generation)

Non-blocking by default, as in the seed: if someone else holds the lease the
block still runs, with ``has_lease`` False. ``timeout=`` waits up to that many
seconds (None: for ever), polling with jittered back-off, or after the
refusal's Retry-After where the server sends one.

While held, a background thread renews the lease every ``renew_interval``
(a third of the duration by default), retrying network and server errors
while time remains. Its local deadline is the monotonic time at which the
last successful acquire/renew request was *sent*, plus the duration, minus
``safety_margin``: the server started its own countdown no earlier, so
``check()`` starts raising strictly before the server could grant the lease
to anyone else (barring a clock that runs more than margin/duration slower
than the server's). When the lease is lost (renewal refused, e.g. after a
break; or the deadline passed without a renewal) the ``lost`` event is set,
``on_lost(lease)`` is called once, and ``check()`` raises.

The blob (and its container) are created when missing. The lease is released
on exit, also when the block raises.
"""

from __future__ import annotations

import logging
import time
import threading
import uuid
from typing import Any, Callable

from azure.storage.blob import BlobLeaseClient

from ._common import (
    INFINITE,
    LeaseLostError,
    Timing,
    ServerWait,
    backoff,
    generation_of,
    is_conflict,
    is_not_found,
    is_transient,
    jittered,
    retry_after,
)
from .clock import SYSTEM_CLOCK, SystemClock

log = logging.getLogger("leasehold_client")

# Our own loops decide when to retry lease calls (within the lease's time),
# so the SDK's retry policy must not add its own waits to them.
NO_SDK_RETRY: dict[str, Any] = {"retry_total": 0}
MAX_CREATES = 3


class AutoRenewLease:
    """A lease on ``client`` (azure.storage.blob BlobClient or ContainerClient),
    renewed in the background while held.

    Attributes: ``has_lease`` (whether it was acquired), ``lease_id``,
    ``generation`` (Leasehold's fencing token from the acquire response's
    ``Leasehold-Generation`` header; None on Azurite and Azure), ``lost``
    (threading.Event), ``lost_reason``, ``renewals`` (successful renewals).
    """

    def __init__(self, client, duration: int = 60, *, timeout: float | None = 0.0,
                 renew_interval: float | None = None, safety_margin: float | None = None,
                 poll_interval: float | None = None, on_lost: Callable[["AutoRenewLease"], None] | None = None,
                 create: bool = True, lease_id: str | None = None, cancel: threading.Event | None = None,
                 clock: SystemClock = SYSTEM_CLOCK):
        self.client = client
        self.timing = Timing.for_duration(duration, renew_interval, safety_margin)
        self.timeout = timeout
        # Longest wait between two acquire attempts while someone else holds it.
        self.poll_interval = float(poll_interval) if poll_interval is not None else (
            5.0 if duration == INFINITE else max(1.0, min(5.0, duration / 4)))
        self.on_lost = on_lost
        self.create = create
        self.clock = clock
        self.cancel = cancel or threading.Event()  # set it to stop waiting for the lease
        self.lease_id = lease_id or str(uuid.uuid4())
        self.generation: int | None = None
        self.has_lease = False
        self.renewals = 0
        self.acquired_at: float | None = None
        self.lost = threading.Event()
        self.lost_reason: str | None = None
        self.lost_at: float | None = None
        self._lease = BlobLeaseClient(client, lease_id=self.lease_id)
        self._server_wait = ServerWait()
        self._state = threading.Lock()   # deadline, lost
        self._io = threading.Lock()      # one lease request at a time (renew vs release)
        self._done = threading.Event()   # set on release or loss: background threads end
        self._released = False
        self._deadline = float("-inf")
        self._threads: list[threading.Thread] = []

    # -- acquiring

    def acquire(self) -> bool:
        """Try to acquire (waiting up to ``timeout``); whether it was acquired.
        Raises the last error if only transient errors were met and no time is left."""
        if self._released:
            raise RuntimeError("this lease was released: use a new AutoRenewLease to acquire again")
        if self.has_lease:
            return True
        clock = self.clock
        until = None if self.timeout is None else clock.monotonic() + self.timeout
        attempt = creates = 0
        server_wait = self._server_wait  # Leasehold holds the request until the lease is free: no polling
        while True:
            seen: dict = {}
            sent = clock.monotonic()
            left = float("inf") if until is None else until - sent
            waiting = server_wait.options(0.0 if self.cancel.is_set() else left, time.monotonic())
            try:
                self._lease.acquire(lease_duration=self.timing.duration, **waiting,
                                    raw_response_hook=lambda r: seen.update(response=r.http_response),
                                    **NO_SDK_RETRY)
            except Exception as exc:  # noqa: BLE001  classified below
                if is_not_found(exc) and self.create and creates < MAX_CREATES:
                    creates += 1
                    self._create_missing(exc)
                    continue
                if is_conflict(exc) and server_wait.refused(exc, time.monotonic()):
                    delay = 0.0
                elif is_conflict(exc):
                    after = retry_after(exc)
                    # Retry-After (when the server says when it ends), never later
                    # than the next poll, plus a little jitter so waiters do not
                    # all arrive in the same instant.
                    delay = backoff(attempt, first=0.5, cap=self.poll_interval) if after is None else \
                        min(after, self.poll_interval) + jittered(min(1.0, self.poll_interval / 4))
                elif is_transient(exc):
                    delay = backoff(attempt, first=0.2, cap=self.poll_interval)
                else:
                    raise
                left = float("inf") if until is None else until - clock.monotonic()
                if left <= 0:
                    if is_conflict(exc):
                        return False
                    raise
                if clock.wait(self.cancel, min(delay, left)):
                    return False
                attempt += 1
                continue
            self._granted(sent, seen.get("response"))
            return True

    def _create_missing(self, exc) -> None:
        """Create what is missing: the container, and for a blob an empty
        blob. Losing a race to create them (someone else did, or already
        leases the blob) is fine."""
        is_blob = hasattr(self.client, "blob_name")
        if not is_blob or getattr(exc, "error_code", None) == "ContainerNotFound":
            # BlobClient._get_container_client: the SDK's own way to the parent
            # container with the same credential and pipeline (private, stable since 12.x).
            container = self.client._get_container_client() if is_blob else self.client
            _ignore_exists(container.create_container)
        if is_blob:
            _ignore_exists(lambda: self.client.upload_blob(b"", overwrite=False))

    def _granted(self, sent: float, response) -> None:
        with self._state:
            self.has_lease = True
            self.acquired_at = sent
            self._deadline = self.timing.deadline(sent)
        log.debug("lease %s acquired (sent at %.3f, local deadline %.3f)", self.lease_id, sent, self._deadline)
        self.generation = generation_of(response) if response is not None else None
        if self.timing.duration != INFINITE:
            for target, name in ((self._keep, "renew"), (self._watch, "watch")):
                thread = self.clock.enlist(threading.Thread(target=target, name=f"lease-{name}-{self.lease_id[:8]}",
                                                            daemon=True))
                self._threads.append(thread)
                thread.start()

    # -- holding

    @property
    def server_waits(self) -> bool:
        """Whether the server was found to hold an acquire until the lease is
        free (Leasehold): waiting for it then costs no polling."""
        return self._server_wait.worth_asking

    @property
    def held(self) -> bool:
        """Acquired, not released, not lost, local deadline not passed."""
        try:
            self.check()
            return True
        except LeaseLostError:
            return False

    def remaining(self) -> float:
        """Seconds left until the local deadline (inf for an infinite lease)."""
        with self._state:
            return self._deadline - self.clock.monotonic() if self.has_lease else 0.0

    def check(self) -> None:
        """Raise LeaseLostError unless the lease is still safely held."""
        if not self.has_lease:
            raise LeaseLostError("the lease was not acquired")
        if self._released:
            raise LeaseLostError("the lease was released")
        if not self.lost.is_set() and self.clock.monotonic() >= self._deadline:
            self._mark_lost("the local deadline passed without a renewal")
        if self.lost.is_set():
            raise LeaseLostError(self.lost_reason)

    def _mark_lost(self, reason: str) -> None:
        with self._state:
            if self.lost.is_set() or self._released:
                return
            self.lost_reason = reason
            self.lost_at = self.clock.monotonic()
            log.debug("lease %s lost at %.3f (local deadline %.3f)", self.lease_id, self.lost_at, self._deadline)
            self.lost.set()
            self._done.set()
        log.warning("lease %s on %s lost: %s", self.lease_id, _name(self.client), reason)
        if self.on_lost is not None:
            try:
                self.on_lost(self)
            except Exception:  # noqa: BLE001  a callback must not kill the renewer
                log.exception("on_lost callback failed")

    def _watch(self) -> None:
        """Declare the lease lost when its local deadline passes (even while a
        renewal request hangs)."""
        while not self._done.is_set():
            with self._state:
                left = self._deadline - self.clock.monotonic()
            if left <= 0:
                self._mark_lost("the local deadline passed without a renewal")
                return
            self.clock.wait(self._done, left)

    def _keep(self) -> None:
        clock, timing = self.clock, self.timing
        assert self.acquired_at is not None  # started by _granted, which set it
        next_at = self.acquired_at + timing.renew_interval
        while not clock.wait(self._done, next_at - clock.monotonic()):
            attempt = 0
            while True:
                sent = clock.monotonic()
                with self._state:
                    left = self._deadline - sent
                # A hung request must not outlive the lease by much (real seconds).
                limit = max(1.0, min(timing.renew_interval, left))
                try:
                    with self._io:
                        if self._done.is_set():
                            return
                        self._lease.renew(connection_timeout=limit, read_timeout=limit, **NO_SDK_RETRY)
                except Exception as exc:  # noqa: BLE001  classified below
                    if self._done.is_set():
                        return
                    if is_transient(exc) and clock.monotonic() < self._deadline:
                        log.info("renewal of lease %s failed, retrying: %s", self.lease_id, exc)
                        left = self._deadline - clock.monotonic()
                        if clock.wait(self._done, min(backoff(attempt, first=0.25, cap=timing.renew_interval / 4),
                                                      max(0.0, left))):
                            return
                        attempt += 1
                        continue
                    if is_transient(exc):
                        self._mark_lost(f"the local deadline passed without a renewal (last error: {_describe(exc)})")
                    else:
                        self._mark_lost(f"renewal refused: {_describe(exc)}")
                    return
                with self._state:
                    if self.lost.is_set():
                        return
                    self._deadline = max(self._deadline, timing.deadline(sent))
                    self.renewals += 1
                log.debug("lease %s renewed (sent at %.3f, local deadline %.3f)", self.lease_id, sent, self._deadline)
                next_at = sent + timing.renew_interval
                break

    # -- releasing

    def release(self) -> None:
        """Stop renewing and release the lease (errors are logged, not raised:
        an unreleased lease runs out by itself)."""
        if not self.has_lease or self._released:
            return
        with self._state:
            self._released = True
            self._done.set()
        with self._io:
            try:
                self._lease.release(**NO_SDK_RETRY)
            except Exception as exc:  # noqa: BLE001
                log.info("release of lease %s failed: %s", self.lease_id, _describe(exc))
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    def __enter__(self) -> "AutoRenewLease":
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "held" if self.has_lease and not self._released else "not held"
        return f"<AutoRenewLease {_name(self.client)} {state} id={self.lease_id} generation={self.generation}>"


def _ignore_exists(create) -> None:
    try:
        create()
    except Exception as err:  # noqa: BLE001
        if getattr(err, "status_code", None) not in (409, 412):  # exists, or leased by someone
            raise


def _name(client) -> str:
    blob = getattr(client, "blob_name", None)
    return f"{client.container_name}/{blob}" if blob else client.container_name


def _describe(exc: BaseException) -> str:
    code = getattr(exc, "error_code", None)
    status = getattr(exc, "status_code", None)
    return f"{status} {code}" if code else f"{type(exc).__name__}: {exc}"
