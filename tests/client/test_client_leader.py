"""Leader election: a leader process killed with SIGKILL hands over within the
lease duration (plus one poll); a leader whose renewals stop while it lives
sees check() raise before the next one is elected; terms carry Leasehold's
fencing generation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from leasehold_client import AutoRenewLease, LeaderElection, LeaseLostError
from tests.client.helpers import REPO, Partition

LEADER_PROCESS = """
import sys
from azure.storage.blob import BlobClient
from leasehold_client import LeaderElection

connection, container, name = sys.argv[1:4]
election = LeaderElection(BlobClient.from_connection_string(connection, container, name, retry_total=0), duration=15)
for term in election.terms():
    print("elected", term.generation, flush=True)
    term.lost.wait()
"""


def _leader_process(backend, container, name):
    proc = subprocess.Popen([sys.executable, "-c", LEADER_PROCESS, backend.connection_string, container, name],
                            stdout=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    assert proc.stdout is not None  # spawned with a pipe
    line = proc.stdout.readline().split()
    if line[:1] != ["elected"]:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"the leader process did not report its election: {line}")
    return proc, (None if line[1] == "None" else int(line[1]))


def _kill_and_take_over(backend, poll_interval):
    container, name = backend.names()
    proc, old_generation = _leader_process(backend, container, name)
    elected = []
    follower = LeaderElection(backend.blob(container, name), duration=15, poll_interval=poll_interval,
                              clock=backend.clock)
    thread = backend.start(follower.run, lambda term: elected.append((backend.clock.monotonic(), term)))
    try:
        backend.advance(1)
        assert not elected  # the live leader keeps it
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        took = backend.run_until(lambda: bool(elected), step=0.5, limit=60)
        term = elected[0][1]
        term.check()
        return took, old_generation, term
    finally:
        follower.stop()
        thread.join(timeout=10)
        if proc.poll() is None:  # the test failed before the kill
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stdout.close()


def test_a_killed_leader_process_hands_over_within_the_lease_duration(leasehold):
    poll = 1.0
    took, old_generation, term = _kill_and_take_over(leasehold, poll)
    # The dead leader's lease ran out at most 15 s after the kill; the follower polls every <= 1 s.
    assert took <= 15 + poll + 0.5
    assert term.generation == old_generation + 1


def test_a_killed_leader_process_hands_over_on_azurite(azurite):
    poll = 1.0
    took, old_generation, term = _kill_and_take_over(azurite, poll)
    assert took <= 15 + poll + 1.0  # real seconds
    assert old_generation is None and term.generation is None


def test_a_leader_whose_renewals_stop_steps_down_before_the_next_is_elected(backend):
    """On both servers: on Azurite in real time (the lease's 15 s run out)."""
    container, name = backend.names()
    partition = Partition()
    events = []
    old = LeaderElection(backend.blob(container, name, raw_request_hook=partition), duration=15,
                         safety_margin=2, clock=backend.clock)
    new = LeaderElection(backend.blob(container, name), duration=15, poll_interval=1, clock=backend.clock)

    def old_elected(term):
        events.append(("old elected", backend.clock.monotonic()))

    def old_deposed(term):
        events.append(("old deposed", backend.clock.monotonic()))

    terms: dict[str, AutoRenewLease] = {}  # each leader's term, as its callback saw it
    old_refused: list[bool] = []

    def new_elected(term):
        # The moment the new leader starts, the old one must already refuse
        # to act. Recorded here, asserted by the test's own thread below: an
        # assertion in this callback's thread could not fail the test.
        terms["new"] = term
        try:
            terms["old"].check()
            old_refused.append(False)
        except LeaseLostError:
            old_refused.append(True)
        events.append(("new elected", backend.clock.monotonic()))

    def remember(term):
        terms["old"] = term
        old_elected(term)

    old_thread = backend.start(old.run, remember, old_deposed)
    backend.run_until(lambda: bool(events), step=0.5)
    new_thread = backend.start(new.run, new_elected)
    backend.advance(6)
    assert [e for e, _ in events] == ["old elected"]  # renewals keep it
    assert terms["old"].renewals >= 1
    partition.blocked = True  # the old leader's process lives; its renewals no longer arrive
    backend.run_until(lambda: len(events) == 3, step=0.5)
    new.stop()
    old.stop()
    new_thread.join(timeout=10)
    old_thread.join(timeout=10)
    assert [e for e, _ in events] == ["old elected", "old deposed", "new elected"]
    assert old_refused == [True], "the old leader's term.check() passed when the new leader was elected"
    old_term, new_term = terms["old"], terms["new"]
    if backend.fake_time:  # Leasehold's fencing generation; Azure has none
        assert old_term.generation is not None and new_term.generation == old_term.generation + 1
    else:
        assert old_term.generation is None and new_term.generation is None
    # Lost at its local deadline (13 s after its last renewal was sent), the
    # lease granted to the next leader no earlier than 15 s after it: the
    # 2 s margin apart, less up to one 0.5 s step of the test's clock.
    assert new_term.acquired_at is not None and old_term.lost_at is not None
    assert new_term.acquired_at - old_term.lost_at >= 1.5


def test_leader_terms_iterator_hands_over_on_step_down(backend):
    container, name = backend.names()
    first = LeaderElection(backend.blob(container, name), duration=15, clock=backend.clock)
    second = LeaderElection(backend.blob(container, name), duration=15, poll_interval=1, clock=backend.clock)
    seen = []
    terms = first.terms()
    term = next(terms)
    seen.append(("first", term.generation))

    def follow():
        for t in second.terms():
            seen.append(("second", t.generation))
            second.stop()

    thread = backend.start(follow)
    backend.advance(2 if backend.fake_time else 0.3)
    assert len(seen) == 1
    first.stop()
    terms.close()  # steps down: the term is released
    backend.run_until(lambda: len(seen) == 2, step=0.5, limit=30)
    thread.join(timeout=10)
    assert [who for who, _ in seen] == ["first", "second"]
    (_, first_generation), (_, second_generation) = seen
    if backend.fake_time:
        assert first_generation is not None and second_generation == first_generation + 1
    else:
        assert first_generation is None and second_generation is None


def test_leadership_is_visible_and_exported(backend):
    """is_leader, transitions and elected_at follow the terms; the collector
    exports them for the client process's Prometheus registry."""
    from prometheus_client import CollectorRegistry, generate_latest

    container, name = backend.names()
    election = LeaderElection(backend.blob(container, name), duration=15, clock=backend.clock)
    registry = CollectorRegistry()
    registry.register(election.collector("billing"))

    def exported() -> tuple[float, float]:
        text = generate_latest(registry).decode()
        values = {line.split("{")[0]: float(line.split()[-1]) for line in text.splitlines()
                  if line and not line.startswith("#")}
        return values["leasehold_client_is_leader"], values["leasehold_client_leader_transitions_total"]

    assert (election.is_leader, election.transitions, election.elected_at, exported()) == (False, 0, None, (0, 0))
    terms = election.terms()
    term = next(terms)
    assert election.is_leader and election.transitions == 1 and election.elected_at is not None
    assert exported() == (1, 1)
    term.lost.set()  # a lost term: no longer leading, before it is released
    assert not election.is_leader and exported() == (0, 1)
    next(terms)  # the next term (the lease is ours again)
    assert election.is_leader and election.transitions == 3 and exported() == (1, 3)
    election.stop()
    terms.close()
    assert (election.is_leader, election.transitions, election.elected_at) == (False, 4, None)
