"""Leader election on a blob lease: whoever holds the blob's lease leads,
followers wait for it (held on the server by Leasehold, polled elsewhere), and
a leader whose renewals stop sees ``term.check()`` raise before the lease runs
out on the server; each term carries Leasehold's fencing generation
(client/README.md). This is the sync shell, and what both shells share
(``Leadership``); the election's state is ``core.Election``."""

from __future__ import annotations

import threading
from typing import Any, Callable, Generator, Iterator

from .clock import SYSTEM_CLOCK, SystemClock
from .core import Election
from .lease import AutoRenewLease


class Leadership(Election):
    """What the sync and asyncio elections share: their options, stop(),
    ``is_leader``, the next candidate lease, and a Prometheus collector of the
    election's state."""

    LEASE: Any = AutoRenewLease
    EVENT: Any = threading.Event
    term: Any

    def __init__(self, client, *, duration: int = 15, poll_interval: float | None = None,
                 clock: SystemClock = SYSTEM_CLOCK, **lease_options):
        super().__init__()
        self.client = client
        self.duration = duration
        self.poll_interval = poll_interval
        self.clock = clock
        self.lease_options = lease_options
        self._stop = self.EVENT()
        self._wake = self.EVENT()  # stop, or the current term lost

    def stop(self) -> None:
        """End the election: a follower stops waiting, a leader steps down."""
        self._stop.set()
        self._wake.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def is_leader(self) -> bool:
        """Whether this process leads now: a term whose ``lost`` is not set."""
        term = self.term
        return term is not None and not term.lost.is_set()

    def _candidate(self):
        """The lease to campaign with (waits until acquired or stopped), or None once stopped."""
        if self._stop.is_set():
            return None
        self._wake.clear()
        return self.LEASE(self.client, self.duration, timeout=None, cancel=self._stop,
                          poll_interval=self.poll_interval, clock=self.clock,
                          on_lost=lambda _: self._wake.set(), **self.lease_options)

    def _elected(self, term) -> None:
        self.elected(term, self.clock.time())

    def _deposed(self) -> None:
        self.deposed()

    def collector(self, name: str):
        """A prometheus_client collector (register it) of this election:
        ``leasehold_client_is_leader{election=name}`` and
        ``leasehold_client_leader_transitions_total{election=name}``, read
        when scraped. Needs prometheus_client in this process (an optional
        dependency: ``pip install 'leasehold-client[prometheus]'``)."""
        try:
            from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        except ImportError as exc:
            raise ImportError("LeaderElection.collector() needs prometheus_client: "
                              "pip install 'leasehold-client[prometheus]'") from exc

        election = self

        class _Collector:
            def collect(self):
                leading = GaugeMetricFamily("leasehold_client_is_leader", "1 while this process leads the "
                                            "election, else 0.", labels=["election"])
                leading.add_metric([name], 1 if election.is_leader else 0)
                yield leading
                changes = CounterMetricFamily("leasehold_client_leader_transitions", "Times this process was "
                                              "elected or its term ended.", labels=["election"])
                changes.add_metric([name], election.transitions)
                yield changes

        return _Collector()


class LeaderElection(Leadership):
    """Leader election with threads: ``terms()`` (an iterator) or ``run()`` (callbacks)."""

    term: AutoRenewLease | None

    def campaign(self) -> AutoRenewLease | None:
        """Wait until elected (the lease acquired) or stopped (None)."""
        term = self._candidate()
        if term is None or not term.acquire():
            return None
        if self._stop.is_set():
            term.release()
            return None
        self._elected(term)
        return term

    def terms(self) -> Generator[AutoRenewLease, None, None]:
        """Each time this instance is elected, one term; released (if still
        held) when the loop body returns, then campaigns again. Ends on stop()."""
        while True:
            term = self.campaign()
            if term is None:
                return
            try:
                yield term
            finally:
                term.release()
                self._deposed()

    def run(self, on_elected: Callable[[AutoRenewLease], object],
            on_deposed: Callable[[AutoRenewLease], object] | None = None) -> None:
        """Call ``on_elected(term)`` on each election and ``on_deposed(term)``
        when that term ends (lease lost, or stop()); until stop()."""
        for term in self.terms():
            try:
                on_elected(term)
                # Until the term is lost or the election stopped.
                while not self._wake.is_set():
                    self.clock.wait(self._wake, 3600)
            finally:
                if on_deposed is not None:
                    on_deposed(term)


def leader(client, **options) -> Iterator[AutoRenewLease]:
    """Shorthand for ``LeaderElection(client, **options).terms()``."""
    return LeaderElection(client, **options).terms()
