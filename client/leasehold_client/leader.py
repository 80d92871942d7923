"""Leader election on a blob lease.

Whoever holds the blob's lease leads. Followers wait for the lease: on
Leasehold the server holds their acquire until it is free (x-leasehold-wait),
so a release is taken over at once; elsewhere they poll (jittered, every
``poll_interval`` at most). The leader renews it in the background. A
leader that dies stops renewing, its lease runs out and a follower takes over
within the lease duration plus one poll interval; a leader whose renewals
stop while it lives (partition, pause) sees ``term.check()`` raise and
``term.lost`` set *before* the lease runs out on the server, so it can stop
acting as leader before the next one starts. Each term carries Leasehold's
fencing generation (``term.generation``; None on Azurite/Azure): pass it to
the resources the leader writes, so they can refuse an older leader.

Iterator form (each term is an AutoRenewLease, released when the loop moves on):

    election = LeaderElection(blob_client, duration=15)
    for term in election.terms():
        while not term.lost.wait(1.0):
            lead(fencing_token=term.generation)

Callback form (blocks until ``election.stop()``):

    election.run(on_elected=start_leading, on_deposed=stop_leading)
"""

from __future__ import annotations

import threading
from typing import Callable, Iterator

from .clock import SYSTEM_CLOCK, SystemClock
from .lease import AutoRenewLease


class Leadership:
    """What an election says about this process, for its logs and metrics:
    ``is_leader``, ``transitions`` (elections plus terms ended) and
    ``elected_at`` (when the current term began, Unix time; None between terms)."""

    term = None
    transitions = 0
    elected_at: float | None = None
    clock: SystemClock  # set by the election

    @property
    def is_leader(self) -> bool:
        term = self.term
        return term is not None and not term.lost.is_set()

    def _elected(self, term) -> None:
        self.term = term
        self.elected_at = self.clock.time()
        self.transitions += 1

    def _deposed(self) -> None:
        self.term = None
        self.elected_at = None
        self.transitions += 1

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
    def __init__(self, client, *, duration: int = 15, poll_interval: float | None = None,
                 clock: SystemClock = SYSTEM_CLOCK, **lease_options):
        self.client = client
        self.duration = duration
        self.poll_interval = poll_interval
        self.clock = clock
        self.lease_options = lease_options
        self._stop = threading.Event()
        self._wake = threading.Event()  # stop, or the current term lost
        self.term: AutoRenewLease | None = None
        self.transitions = 0

    def stop(self) -> None:
        """End the election: a follower stops waiting, a leader steps down."""
        self._stop.set()
        self._wake.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def campaign(self) -> AutoRenewLease | None:
        """Wait until elected (the lease acquired) or stopped (None)."""
        if self._stop.is_set():
            return None
        self._wake.clear()
        term = AutoRenewLease(self.client, self.duration, timeout=None, cancel=self._stop,
                              poll_interval=self.poll_interval, clock=self.clock,
                              on_lost=lambda _: self._wake.set(), **self.lease_options)
        if not term.acquire():
            return None
        if self._stop.is_set():
            term.release()
            return None
        self._elected(term)
        return term

    def terms(self) -> Iterator[AutoRenewLease]:
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
