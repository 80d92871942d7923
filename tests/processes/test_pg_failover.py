"""Failover that always recovers, without restarts: two server instances
on a primary with a synchronous standby (tests/pg_cluster.py ``pair``),
LEASEHOLD_DATABASE naming both hosts with target_session_attrs=read-write.
Clients contend for leases through both instances while the primary is
killed (SIGKILL) or hangs (SIGSTOP), and the standby is promoted: both
instances serve again within 5 s of the promotion, no acknowledged
operation is lost, nothing is answered 500 but a commit whose answer was
lost (500 OperationTimedOut: the outcome unknown), 503 ServerBusy with
Retry-After while no primary answers, and every operation retried after
either succeeds, no lease has two holders, and the whole history of answers is
linearizable (tests/lincheck.py; a 503 or no answer is an unknown outcome).

Also here: a row another session keeps locked holds up no request for
another row (serving/lanes.py). How long such requests take is a
benchmark's figure (bench/pg_cycle.py), printed here, not asserted."""

from __future__ import annotations

import signal
import statistics
import threading
import time
import uuid

import psycopg
import pytest
import requests

from tests import azure_raw, pg_cluster
from tests.lincheck import Recorder
from tests.processes.test_pg_clock import _double_holders
from tests.server_process import Instance, prepare

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.also_postgres]

CONTAINER = "/devstoreaccount1/failover"
BLOBS = 4
CLIENTS = 8  # two per blob, one through each instance


def _until(done, seconds: float, what: str) -> None:
    """Poll ``done()`` until it holds, at most ``seconds``: a handshake with
    what the clients or the server have done, not a sleep."""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.02)


# A commit whose answer was lost (the primary killed or hung under it): 500 OperationTimedOut, the
# outcome unknown (docs/decisions/0045); retried as the SDKs retry it, like a 503.
UNKNOWN = "500 OperationTimedOut"


def outcome_unknown(response: requests.Response) -> bool:
    return response.status_code == 500 and response.headers.get("x-ms-error-code") == "OperationTimedOut"


class Log:
    """Every answer a client got: (monotonic time, instance, action, status,
    client request id)."""

    def __init__(self, give_up_after: float = 15):
        self.give_up_after = give_up_after  # seconds of 503s or no answers before an operation fails
        self.lock = threading.Lock()
        self.answers: list[tuple] = []
        self.sent: dict[str, float] = {}  # client request id -> monotonic time it was sent
        self.double: list[tuple] = []
        self.holder: dict[str, str | None] = {}
        self.failed: list[str] = []  # operations that never succeeded, or a client's error
        self.history = Recorder()

    def call(self, instance: Instance, path: str, action: str, **headers):
        """The operation, retried while answered 503 or 500 OperationTimedOut
        (as an SDK would, after Retry-After), for at most 15 s; the last
        answer, and whether it was a retry (a 503 or an OperationTimedOut
        does not say whether the attempt was made)."""
        give_up = time.monotonic() + self.give_up_after
        retry = False
        seen: dict[int | str, int] = {}  # the answers while retrying, for a failure's message
        while True:
            request_id = str(uuid.uuid4())
            sent_at = self.history.clock()
            with self.lock:
                self.sent[request_id] = time.monotonic()
            status: int | str
            try:
                response = azure_raw.lease(instance.url, path, action, **headers,
                                           **{"x-ms-client-request-id": request_id})
                status = UNKNOWN if outcome_unknown(response) else response.status_code
            except OSError as exc:  # requests' errors are OSErrors: no answer at all
                response, status = None, f"no answer: {type(exc).__name__}"
            client = headers.get("proposed_lease_id") or headers["lease_id"]  # every call names its lease
            self.history.http(client, path, action, sent_at, response,
                              unknown=frozenset({503, 500} if status == UNKNOWN else {503}),
                              lease_id=headers.get("lease_id"),
                              proposed_id=headers.get("proposed_lease_id"), duration=headers.get("duration"))
            with self.lock:
                self.answers.append((time.monotonic(), instance.url, action, status, request_id))
            if status not in (503, UNKNOWN) and response is not None:
                return response, retry
            seen[status] = seen.get(status, 0) + 1
            if time.monotonic() > give_up:
                self.failed.append(f"{action} on {path} through {instance.url}: {status} for {self.give_up_after} s "
                                   f"(answers: {seen}; gave up at {time.time():.3f})")
                return response, retry
            retry = True
            time.sleep(float(response.headers.get("Retry-After", 1)) / 4 if response is not None else 0.25)


def _client(log: Log, instance: Instance, path: str, stop: threading.Event, duration: int = 15) -> None:
    me = str(uuid.uuid4())
    try:
        while not stop.is_set():
            acquired, _ = log.call(instance, path, "acquire", duration=duration, proposed_lease_id=me)
            if acquired.status_code != 201:
                assert acquired.status_code == 409, (acquired.status_code, acquired.content)
                time.sleep(0.02)
                continue
            with log.lock:
                if log.holder.get(path) is not None:
                    log.double.append((path, log.holder[path], me))
                log.holder[path] = me
            for _ in range(2):
                renewed, _ = log.call(instance, path, "renew", lease_id=me)
                assert renewed.status_code == 200, ("a held lease was lost", renewed.status_code, renewed.content)
            with log.lock:
                log.holder[path] = None  # the belief goes before the release does
            released, retried = log.call(instance, path, "release", lease_id=me)
            # A retry may find the lease released by the attempt answered 503 (and taken since).
            assert released.status_code == 200 or (retried and released.status_code == 409), \
                (released.status_code, released.content)
    except Exception as exc:  # noqa: BLE001 - reported by the test
        log.failed.append(repr(exc))


def _history(database: str) -> tuple[set[str], dict[str, list[tuple]]]:
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT blob, action, outcome, lease_fingerprint, proposed_lease_fingerprint, state_after, expires_at, "
                            "occurred_at, client_request_id FROM leases_leaseevent WHERE container = 'failover' "
                            "AND blob <> '' ORDER BY id").fetchall()
    events: dict[str, list[tuple]] = {}
    for blob, *event, _ in rows:
        if event[0] != "put-blob":
            events.setdefault(blob, []).append(tuple(event))
    return {row[-1] for row in rows if row[2] == "success"}, events


@pytest.mark.parametrize("how", ["killed", "hung"])
def test_both_instances_serve_again_after_the_standby_is_promoted(tmp_path, how):
    with pg_cluster.pair() as (primary, standby):
        prepare(primary.url(), tmp_path)
        both = (f"postgresql://{pg_cluster.SUPERUSER}@127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
                "/leasehold?target_session_attrs=read-write")
        instances = [Instance(both, tmp_path, name, workers=1) for name in ("a", "b")]
        for instance in instances:
            instance.env["LEASEHOLD_WRITE_WAIT"] = "2"
            instance.start()
        try:
            a = instances[0]
            assert azure_raw.signed("PUT", a.url, f"{CONTAINER}?restype=container").status_code == 201
            paths = [f"{CONTAINER}/blob-{n}" for n in range(BLOBS)]
            for path in paths:
                assert azure_raw.signed("PUT", a.url, path, body=b"x",
                                        headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
            log, stop = Log(), threading.Event()
            clients = [threading.Thread(target=_client, args=(log, instances[n % 2], paths[n % BLOBS], stop))
                       for n in range(CLIENTS)]
            for client in clients:
                client.start()
            def granted(instance, since: float) -> int:
                with log.lock:
                    return sum(1 for t, url, _, status, _ in log.answers
                               if t > since and url == instance.url and status in (200, 201))

            # load on both instances, then the primary goes, a second before the promotion
            _until(lambda: all(granted(i, 0) >= 5 for i in instances), 30, "both instances serving")
            primary.signal_all(signal.SIGKILL if how == "killed" else signal.SIGSTOP)
            gone = time.monotonic()
            answers = []

            def not_ready() -> bool:
                answers.append(requests.get(f"{instances[1].url}/health/ready", timeout=10))
                return answers[-1].status_code == 503

            _until(not_ready, 30, "readiness says no primary")  # within the bound every wait has
            assert "no primary answers" in answers[-1].text, answers[-1].text
            time.sleep(max(0.0, gone + 1 - time.monotonic()))  # the scenario's pace: no check waits on it
            standby.promote()
            promoted = time.monotonic()

            def served_again() -> bool:
                with log.lock:
                    return all(any(t > promoted and status in (200, 201) and url == instance.url
                                   for t, url, _, status, _ in log.answers) for instance in instances)

            _until(served_again, 30, "both instances serving again after the promotion")
            # serving again, and no 503 after that (checked below) for 20 more grants on each
            again = time.monotonic()
            _until(lambda: all(granted(i, again) >= 20 for i in instances), 30, "20 grants on each after")
            for instance in instances:
                ready = requests.get(f"{instance.url}/health/ready", timeout=10)
                assert ready.status_code == 200, ready.text
            stop.set()
            for client in clients:
                client.join(timeout=30)
        finally:
            for instance in instances:
                instance.stop()
        acknowledged = {rid for (_, _, _, status, rid) in log.answers if isinstance(status, int) and status < 300}
        recorded, events = _history(standby.url())
        logs = {instance.url: instance.output() for instance in instances}

    assert not log.failed, (log.failed[:5], {url: output[-4000:] for url, output in logs.items()})
    assert not log.double, log.double
    statuses = {status for (_, _, _, status, _) in log.answers}
    assert statuses <= {200, 201, 409, 503, UNKNOWN}, statuses  # no other 500, every request answered
    for instance in instances:
        mine = [(t, status, log.sent[rid]) for (t, url, _, status, rid) in log.answers if url == instance.url]
        served = min((t for t, status, _ in mine if t > promoted and status in (200, 201)), default=None)
        assert served is not None, instance.url  # how soon is a figure (printed), not a check
        print(f"{how}: {instance.url} served again {served - promoted:.2f} s after the promotion; "
              f"{sum(1 for _, status, _ in mine if status == 503)} answers 503 in all")
        # Once it has served again, no request sent after that is answered 503 (one sent before,
        # whose connection attempt began while the standby was still being promoted, may be).
        late = [(round(sent - promoted, 2), round(t - promoted, 2)) for t, status, sent in mine
                if sent > served and status == 503]
        assert not late, (late, logs[instance.url][-3000:])
    assert acknowledged <= recorded, len(acknowledged - recorded)  # no acknowledged operation lost
    for blob, history in events.items():
        assert not _double_holders(history), (blob, _double_holders(history))
    assert len(acknowledged) > 50, len(acknowledged)
    verdict = log.history.check()
    assert verdict, verdict.explain()
    print(f"{how}: {verdict.explain()}")
    for url, output in logs.items():
        assert "Traceback" not in output and "make the database file" not in output, output[-3000:]
        assert "database failover or outage" in output, output[-3000:]  # the log names it


def test_a_locked_row_delays_no_request_for_another_row(postgres, tmp_path):
    """Another session holds one blob's row locked while clients keep
    asking for its lease through one worker: renewals of other blobs through
    that worker are not held up (they were, for LEASEHOLD_WRITE_WAIT), and
    the locked blob's renewals are made once it is let go."""
    database = postgres()
    prepare(database, tmp_path)
    server = Instance(database, tmp_path, "rows", workers=1)
    server.env["LEASEHOLD_WRITE_WAIT"] = "20"  # a loaded machine's slow renewals stay far inside it
    server.start()
    try:
        assert azure_raw.signed("PUT", server.url, f"{CONTAINER}?restype=container").status_code == 201
        paths = [f"{CONTAINER}/row-{n}" for n in range(5)]
        ids = {}
        for path in paths:
            assert azure_raw.signed("PUT", server.url, path, body=b"x",
                                    headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
            ids[path] = azure_raw.lease(server.url, path, "acquire", duration=60).headers["x-ms-lease-id"]
        locked, others = paths[0], paths[1:]

        def renew_others() -> list[float]:
            took = []
            for path in others * 5:
                started = time.monotonic()
                assert azure_raw.lease(server.url, path, "renew", lease_id=ids[path]).status_code == 200
                took.append(time.monotonic() - started)
            return took

        unlocked = renew_others()
        with psycopg.connect(database) as holder:
            holder.execute("SELECT 1 FROM leases_blob WHERE name = 'row-0' FOR UPDATE")
            statuses = []

            def renew_locked():
                statuses.append(azure_raw.lease(server.url, locked, "renew", lease_id=ids[locked]).status_code)
            waiting = [threading.Thread(target=renew_locked) for _ in range(4)]
            for thread in waiting:
                thread.start()
            # the renewals of the locked row are waiting for it, in the database
            with psycopg.connect(database, autocommit=True) as watch:
                def waiting_for_the_row() -> bool:
                    [(count,)] = watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                               "current_database() AND wait_event_type = 'Lock'").fetchall()
                    return count > 0

                _until(waiting_for_the_row, 10, "a renewal waiting for the row")
            while_locked = renew_others()  # each asserts 200
            answered_while_locked = list(statuses)
            holder.rollback()
        for thread in waiting:
            thread.join()
        # every other row renewed while the row stayed locked, before any of its renewals
        # was answered (a request held up behind it would have waited, then been answered
        # 503 after LEASEHOLD_WRITE_WAIT while the lock was still held); those were made once
        # the row was let go (a lease batch sends them alone, in the row's turn)
        assert answered_while_locked == [], answered_while_locked
        assert statuses == [200] * 4, statuses
    finally:
        server.stop()
    print(f"renewals of other rows while one was locked: median {statistics.median(while_locked) * 1000:.1f} ms, "
          f"max {max(while_locked) * 1000:.1f} ms (unlocked median {statistics.median(unlocked) * 1000:.1f} ms)")
