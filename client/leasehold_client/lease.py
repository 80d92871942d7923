"""AutoRenewLease: a blob (or container) lease held, and renewed by a
background thread, for as long as a ``with`` block runs; ``check()`` raises
LeaseLostError strictly before the server could grant the lease to anyone
else (client/README.md has the rules). This is the sync shell: it sends the
requests and runs the threads, while ``core.LeaseCore`` decides (when to
renew, what a failure means, when the lease is lost); ``LeaseHandle`` is what
the sync and asyncio shells share above the core."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from azure.storage.blob import BlobLeaseClient

from ._common import LeaseLostError, generation_of
from .clock import SYSTEM_CLOCK, SystemClock
from .core import (
    DEADLINE_PASSED,
    NO_SDK_RETRY,
    Do,
    LeaseCore,
    already_there,
    creates_container,
    describe,
    is_blob,
    name_of,
)

log = logging.getLogger("leasehold_client")


class LeaseHandle(LeaseCore):
    """What the sync and asyncio AutoRenewLease share above the core: the
    checks a holder makes, read on the lease's clock. ``lost`` is the shell's
    event (threading or asyncio), set when the core counts the lease lost."""

    lost: Any
    _done: Any
    _state: Any
    KIND = "AutoRenewLease"

    def __init__(self, client, duration: int, *, on_lost: Callable | None, clock: SystemClock, **options: Any):
        super().__init__(duration, **options)
        self.client = client
        self.on_lost = on_lost
        self.clock = clock

    @property
    def server_waits(self) -> bool:
        """Whether the server was found to hold an acquire until the lease is
        free (Leasehold): waiting for it then costs no polling."""
        return self.server_wait.worth_asking

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
        return self.remaining_at(self.clock.monotonic())

    def check(self) -> None:
        """Raise LeaseLostError unless the lease is still safely held."""
        if self.expired(self.clock.monotonic()):
            self._mark_lost(DEADLINE_PASSED)
        reason = self.why_not_held()
        if reason is not None:
            raise LeaseLostError(reason)

    def _mark_lost(self, reason: str) -> None:
        """Count the lease lost, end the background work, tell the user once."""
        with self._state:
            if not self.lose(reason, self.clock.monotonic()):
                return
            self.lost.set()
            self._done.set()
        log.warning("lease %s on %s lost: %s", self.lease_id, name_of(self.client), reason)
        if self.on_lost is not None:
            try:
                self._called_back(self.on_lost(self))
            except Exception:  # noqa: BLE001  a callback must not kill the renewer
                log.exception("on_lost callback failed")

    def _called_back(self, result: object) -> None:
        """What the shell does with a callback's result (asyncio: runs a coroutine)."""

    def _log_granted(self, what: str, sent: float) -> None:
        log.debug("lease %s %s (sent at %.3f, local deadline %.3f)", self.lease_id, what, sent, self.deadline)

    def __repr__(self) -> str:
        return f"<{self.KIND} {name_of(self.client)} {self.state()} id={self.lease_id} generation={self.generation}>"


class AutoRenewLease(LeaseHandle):
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
        super().__init__(client, duration, timeout=timeout, renew_interval=renew_interval, safety_margin=safety_margin,
                         poll_interval=poll_interval, create=create, lease_id=lease_id, on_lost=on_lost, clock=clock)
        self.cancel = cancel or threading.Event()  # set it to stop waiting for the lease
        self.lost = threading.Event()
        self._lease = BlobLeaseClient(client, lease_id=self.lease_id)
        self._state = threading.Lock()   # the core's state, between the renewer, the watcher and the holder
        self._io = threading.Lock()      # one lease request at a time (renew vs release)
        self._done = threading.Event()   # set on release or loss: background threads end
        self._threads: list[threading.Thread] = []

    # -- acquiring

    def acquire(self) -> bool:
        """Try to acquire (waiting up to ``timeout``); whether it was acquired.
        Raises the last error if only transient errors were met and no time is left."""
        clock = self.clock
        acquiring = self.start_acquire(clock.monotonic())
        if acquiring is None:
            return True
        while True:
            seen: dict = {}
            sent = clock.monotonic()
            options = acquiring.options(sent, self.cancel.is_set(), time.monotonic())
            try:
                self._lease.acquire(lease_duration=self.timing.duration, **options,
                                    raw_response_hook=lambda r: seen.update(response=r.http_response),
                                    **NO_SDK_RETRY)
            except Exception as exc:  # noqa: BLE001  classified by the core
                step = acquiring.failed(exc, clock.monotonic(), time.monotonic())
                if step.do is Do.CREATE:
                    self._create_missing(exc)
                elif step.do is Do.RAISE:
                    raise
                elif step.do is Do.GIVE_UP or clock.wait(self.cancel, step.delay):
                    return False
                continue
            response = seen.get("response")
            with self._state:
                renews = self.granted(sent, generation_of(response) if response is not None else None)
            self._log_granted("acquired", sent)
            if renews:
                self._start(renew=self._keep, watch=self._watch)
            return True

    def _create_missing(self, exc) -> None:
        """Create what is missing: the container, and for a blob an empty
        blob. Losing a race to create them is fine."""
        if creates_container(self.client, exc):
            # BlobClient._get_container_client: the SDK's own way to the parent
            # container with the same credential and pipeline (private, stable since 12.x).
            container = self.client._get_container_client() if is_blob(self.client) else self.client
            _ignore_exists(container.create_container)
        if is_blob(self.client):
            _ignore_exists(lambda: self.client.upload_blob(b"", overwrite=False))

    def _start(self, **targets: Callable[[], None]) -> None:
        for name, target in targets.items():
            thread = self.clock.enlist(threading.Thread(target=target, name=f"lease-{name}-{self.lease_id[:8]}",
                                                        daemon=True))
            self._threads.append(thread)
            thread.start()

    # -- holding

    def _watch(self) -> None:
        """Declare the lease lost when its local deadline passes (even while a
        renewal request hangs)."""
        while not self._done.is_set():
            with self._state:
                left = self.watch(self.clock.monotonic())
            if left is None:
                self._mark_lost(DEADLINE_PASSED)
                return
            self.clock.wait(self._done, left)

    def _keep(self) -> None:
        clock = self.clock
        while not clock.wait(self._done, self.next_renewal - clock.monotonic()):
            while not self._renew(clock.monotonic()):
                pass

    def _renew(self, sent: float) -> bool:
        """One renew request; whether the renewer goes back to sleep (renewed,
        or ended) rather than trying again now."""
        with self._state:
            limit = self.renewal_timeout(sent)
        try:
            with self._io:
                if self._done.is_set():
                    return True
                self._lease.renew(connection_timeout=limit, read_timeout=limit, **NO_SDK_RETRY)
        except Exception as exc:  # noqa: BLE001  classified by the core
            if self._done.is_set():
                return True
            with self._state:
                verdict = self.renewal_failed(exc, self.clock.monotonic())
            if isinstance(verdict, str):
                self._mark_lost(verdict)
                return True
            log.info("renewal of lease %s failed, retrying: %s", self.lease_id, describe(exc))
            return self.clock.wait(self._done, verdict)
        with self._state:
            if not self.renewed(sent):
                return True
        self._log_granted("renewed", sent)
        return True

    # -- releasing

    def release(self) -> None:
        """Stop renewing and release the lease (errors are logged, not raised:
        an unreleased lease runs out by itself)."""
        with self._state:
            if not self.releasing():
                return
            self._done.set()
        with self._io:
            try:
                self._lease.release(**NO_SDK_RETRY)
            except Exception as exc:  # noqa: BLE001
                log.info("release of lease %s failed: %s", self.lease_id, describe(exc))
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    def __enter__(self) -> "AutoRenewLease":
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


def _ignore_exists(create) -> None:
    try:
        create()
    except Exception as err:  # noqa: BLE001
        if not already_there(err):
            raise
