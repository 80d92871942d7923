"""Failover without a human: two PostgreSQL nodes managed by Patroni with
etcd (tests/patroni_cluster.py, the recipe of docs/deploy/patroni.md), two
server instances on the multi-host URL, clients contending for leases and
renewing through both. The primary's node is killed (Patroni and PostgreSQL,
SIGKILL), or PostgreSQL alone dies under a live Patroni, or the node hangs
(SIGSTOP on both), or an operator switches over (`patronictl switchover`);
nobody promotes by hand. Each time: a new primary within what Patroni's
settings promise, both instances serving again with no restart, no
acknowledged lease operation lost, no lease with two holders, the whole
history linearizable (tests/lincheck.py). After PostgreSQL alone dies, the
other node becomes the synchronous standby again. A hung primary, thawed, is
demoted by its Patroni and refuses a write. A switchover fails no request for longer
than the Azure SDK's first retry waits.

Not in `make test` (marker ``ha``): `make test-ha` installs etcd and Patroni
and runs it (docs/development/tests.md)."""

from __future__ import annotations

import re
import signal
import threading
import time

import psycopg
import pytest
import requests

from tests import azure_raw, patroni_cluster
from tests.patroni_cluster import LOOP_WAIT, RETRY_TIMEOUT, TTL, wait_for
from tests.processes.test_pg_clock import _double_holders
from tests.processes.test_pg_failover import UNKNOWN, Log, _client, _history
from tests.server_process import Instance, prepare

pytestmark = [pytest.mark.ha, pytest.mark.processes, pytest.mark.postgres]

CONTAINER = "/devstoreaccount1/failover"
BLOBS = 4
CLIENTS = 8  # two per blob, one through each instance
# A dead node's leader key lapses at most TTL after its last renewal; the standby's Patroni sees that at
# once (a watch on etcd) or in its next loop, and promotes. Its promise, plus slack for a loaded machine.
PROMISED = TTL + LOOP_WAIT + 2 * RETRY_TIMEOUT
SLACK = 15
# The Azure SDK for Python retries a 503 or a dropped connection after 15 s +- 3 (ExponentialRetry):
# a request unanswered for less than that succeeds at its first retry.
SDK_FIRST_RETRY = 12


class TimedLog(Log):
    """Log, with each operation that needed a retry: (first sent, answered, action, instance)."""

    def __init__(self):
        super().__init__(give_up_after=TTL * 4)  # every operation outlives the failover
        self.retried: list[tuple[float, float, str, str]] = []

    def call(self, instance, path, action, **headers):
        started = time.monotonic()
        response, retry = super().call(instance, path, action, **headers)
        if retry:
            with self.lock:
                self.retried.append((started, time.monotonic(), action, instance.url))
        return response, retry


def _granted(log: Log, instance: Instance, since: float) -> int:
    with log.lock:
        return sum(1 for t, url, _, status, _ in log.answers if t > since and url == instance.url
                   and status in (200, 201))


def _refuses_writes(ha: patroni_cluster.HaCluster, node: patroni_cluster.Node) -> str:
    """How ``node``'s PostgreSQL refuses a lease write ("" if it took one)."""
    try:
        with psycopg.connect(ha.node_url(node), connect_timeout=5, autocommit=True) as conn:
            [(recovery,)] = conn.execute("SELECT pg_is_in_recovery()").fetchall()
            conn.execute("UPDATE leases_blob SET lease_duration = lease_duration WHERE false")
            return "in recovery, yet took a write" if recovery else "took a write"
    except psycopg.errors.ReadOnlySqlTransaction as exc:
        return f"read-only: {exc}".strip()
    except psycopg.OperationalError:
        return ""  # not answering (yet): being rewound or restarted as a replica


@pytest.mark.parametrize("how", ["node killed", "postgres killed", "node hung", "switchover"])
def test_patroni_promotes_and_both_instances_follow(tmp_path, how):
    with patroni_cluster.cluster() as ha:
        old = ha.leader()
        assert old is not None
        standby = ha.other(old)
        prepare(ha.node_url(old), tmp_path)
        instances = [Instance(ha.url(), tmp_path, name, workers=1) for name in ("a", "b")]
        for instance in instances:
            instance.env["LEASEHOLD_WRITE_WAIT"] = "2"
            instance.start()
        log, stop = TimedLog(), threading.Event()
        try:
            a = instances[0]
            assert azure_raw.signed("PUT", a.url, f"{CONTAINER}?restype=container").status_code == 201
            paths = [f"{CONTAINER}/blob-{n}" for n in range(BLOBS)]
            for path in paths:
                assert azure_raw.signed("PUT", a.url, path, body=b"x",
                                        headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
            # 60 s leases: none runs out while its holder waits out the failover (docs/deploy/patroni.md)
            clients = [threading.Thread(target=_client, args=(log, instances[n % 2], paths[n % BLOBS], stop, 60))
                       for n in range(CLIENTS)]
            for client in clients:
                client.start()
            wait_for(lambda: all(_granted(log, i, 0) >= 5 for i in instances), 60, "both instances serving")

            gone, gone_wall = time.monotonic(), time.time()
            if how == "node killed":
                old.signal(signal.SIGKILL)
            elif how == "postgres killed":
                old.pg.signal_all(signal.SIGKILL)
            elif how == "node hung":
                old.signal(signal.SIGSTOP)
            else:
                done = ha.switchover(standby)
                assert done.returncode == 0, done.stdout + done.stderr
            if how in ("node killed", "node hung"):  # meanwhile, readiness says why the instances cannot serve
                def not_ready():
                    answer = requests.get(f"{instances[1].url}/health/ready", timeout=10)
                    return answer.status_code == 503 and "no primary answers" in answer.text

                wait_for(not_ready, TTL, "readiness saying no primary answers")

            def new_leader():
                # a primary again: Patroni's REST API says so, and its PostgreSQL is out of recovery
                leader = ha.leader()
                if leader is None or (leader is old and how != "postgres killed"):
                    return None
                return leader if ha.primary_answers(leader) else None

            leader = wait_for(new_leader, PROMISED + SLACK + 60, f"a new leader ({how})", 0.1)
            promoted = time.monotonic()
            # PostgreSQL killed alone: Patroni restarts it in place, or fails over (primary_start_timeout 0)
            if how != "postgres killed":
                assert leader is standby, (leader.name, how)
            moved = "to the standby" if leader is standby else "restarted in place"

            def served_again():
                return all(_granted(log, i, promoted) >= 1 for i in instances) and time.monotonic()

            again = wait_for(served_again, 60, "both instances serving after the failover")
            wait_for(lambda: all(_granted(log, i, again) >= 20 for i in instances), 60, "20 grants on each after")
            for instance in instances:
                ready = requests.get(f"{instance.url}/health/ready", timeout=10)
                assert ready.status_code == 200, ready.text

            if how == "postgres killed":  # the other node the synchronous standby again, as before the crash
                ha.wait_synchronous(ha.other(leader), 120)
                print(f"{how}: a synchronous standby again {time.monotonic() - gone:.1f} s after the fault")
            if how == "node hung":
                # thawed, the old primary finds its leader key gone: its Patroni demotes it
                old.signal(signal.SIGCONT)
                wait_for(lambda: old.role() not in ("", "primary") and old.role(), 120,
                         f"the thawed node demoted\n{old.output()[-3000:]}", 0.2)
                refusal = wait_for(lambda: _refuses_writes(ha, old), 120, "the thawed node answering")
                assert refusal.startswith("read-only"), refusal
                print(f"{how}: thawed, {old.name} is {old.role()}; a write: {refusal}")
            stop.set()
            for client in clients:
                client.join(timeout=TTL * 5)
        finally:
            stop.set()
            for instance in instances:
                instance.stop()
        acknowledged = {rid for (_, _, _, status, rid) in log.answers if isinstance(status, int) and status < 300}
        recorded, events = _history(ha.node_url(leader))
        logs = {instance.url: instance.output() for instance in instances}

    assert not log.failed, (log.failed[:5], {url: output[-4000:] for url, output in logs.items()})
    assert not log.double, log.double
    statuses = {status for (_, _, _, status, _) in log.answers}
    assert statuses <= {200, 201, 409, 503, UNKNOWN}, statuses  # no 500 but a commit's lost answer
    took = promoted - gone
    # wall-clock instants, for a timeline against Patroni's, PostgreSQL's and the instances' logs
    print(f"{how}: timeline: fault {gone_wall:.3f} primary {gone_wall + took:.3f} served {gone_wall + again - gone:.3f}")
    print(f"{how}: a primary ({moved}) again after {took:.1f} s (promised {PROMISED} s); both instances served "
          f"{again - gone:.1f} s after the fault; {sum(1 for *_, s, _ in log.answers if s == 503)} answers 503; "
          f"longest wait of an operation {max((e - s for s, e, *_ in log.retried), default=0):.1f} s")
    assert took < PROMISED + SLACK, took
    assert acknowledged <= recorded, len(acknowledged - recorded)  # no acknowledged operation lost
    for blob, history in events.items():
        assert not _double_holders(history), (blob, _double_holders(history))
    assert len(acknowledged) > 50, len(acknowledged)
    verdict = log.history.check()
    assert verdict, verdict.explain()
    print(f"{how}: {verdict.explain()}")
    if how == "switchover":
        slow = [(round(end - start, 1), action) for start, end, action, _ in log.retried
                if end - start >= SDK_FIRST_RETRY]
        assert not slow, slow
    outages = {url: re.findall(r"database failover or outage over: .* after (\d+\.\d) s", output)
               for url, output in logs.items()}
    for url, output in logs.items():
        assert "Traceback" not in output, output[-3000:]
        print(f"{how}: {url} logged outages of {', '.join(outages[url]) or 'none'} s")
    # An instance logs the outage it saw, with its length (one in about 18 runs did not: its clock
    # readings may all have timed out, which counts as slow, not gone; under investigation).
    assert how == "switchover" or any(outages.values()), {url: output[-3000:] for url, output in logs.items()}
