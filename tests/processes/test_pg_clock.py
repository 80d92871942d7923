"""One clock decides lease time: two server instances on one PostgreSQL,
one of them an hour ahead (libfaketime), give exactly the outcomes of one
instance, and races across them never make two holders; a step back of
the database's own clock shortens no lease and is reported.

The database runs under libfaketime too (tests/pg_cluster.py, ``faketime``),
so the test moves the database's clock instead of sleeping: ``Timeline.at(t)``
makes it read t seconds after the timeline began, from then on."""

from __future__ import annotations

import random
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
import requests

from tests import azure_raw, pg_cluster
from tests.lincheck import Recorder
from tests.server_process import Instance, admin_token, prepare
from tests.serving.test_metrics import scrape, value

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.also_postgres]

CONTAINER = "/devstoreaccount1/clocks"


class Timeline:
    """The database's clock, moved forwards only (a step back would hold
    lease time at its high-water mark, as the last test shows)."""

    def __init__(self, pg):
        self.pg, self.offset = pg, 0.0
        self.begin()

    def begin(self) -> None:
        self.started, self.base = time.time(), self.offset

    def at(self, t: float) -> None:
        """From now on the database reads the timeline's start plus ``t``
        seconds, or keeps its course if it is past that already (a round
        that took longer than its step): never a step back."""
        self.offset = max(self.offset, self.base + t - (time.time() - self.started))
        self.pg.set_clock(self.offset)

    def step(self, seconds: float) -> None:
        self.offset += seconds
        self.pg.set_clock(self.offset)
        self.begin()


@pytest.fixture(scope="module")
def two_clocks(tmp_path_factory):
    """A PostgreSQL whose clock the test sets, instance A on the real clock,
    B an hour ahead of it and C an hour behind, the database's timeline, and
    the headers of a token that may scrape /metrics."""
    tmp = tmp_path_factory.mktemp("pgclock")
    with pg_cluster.cluster(faketime=True) as pg:
        database = pg.url()
        env = prepare(database, tmp)
        token = admin_token(database, env)
        a, b, c = (Instance(database, tmp, name, workers=1) for name in "abc")
        b.env.update(pg_cluster.faketime_env("+1h"))
        c.env.update(pg_cluster.faketime_env("-1h"))
        try:
            for instance in (a, b, c):
                instance.start()
            assert azure_raw.signed("PUT", a.url, f"{CONTAINER}?restype=container").status_code == 201
            headers = {"Authorization": f"Bearer {token}"}
            yield pg, a, b, c, Timeline(pg), headers
        finally:
            for instance in (a, b, c):
                instance.stop()
        for instance in (a, b, c):
            log = instance.output()
            assert "Traceback" not in log and "Internal Server Error" not in log, log[-3000:]


def _blob(base: str, name: str) -> str:
    path = f"{CONTAINER}/{name}"
    assert azure_raw.signed("PUT", base, path, body=b"x", headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    return path


def _outcome(response) -> tuple:
    return (response.status_code, azure_raw.error_code(response) if response.status_code >= 400 else None,
            response.headers.get("x-ms-lease-time"))


X, Y = str(uuid.uuid4()), str(uuid.uuid4())
# The steps just before and just after a lease ends are M seconds from it: a
# request answered up to M seconds late (a loaded machine) still lands on its
# side. Moving the database's clock costs no time, so a wide margin is free.
M = 5
# (seconds into the timeline, client's lease id, through the "holder" or "other" instance, action, headers)
SCRIPT = [
    (0, X, "holder", "acquire", {"duration": 15}),  # X's lease ends at 15
    (8, Y, "other", "acquire", {"duration": 15}),  # the overlap: 201 there with B ahead
    (15 - M, Y, "other", "acquire", {"duration": 15}),
    (15 + M, Y, "other", "acquire", {"duration": 15}),  # X's lease ended; Y's ends at 35
    (21, X, "holder", "renew", {}),
    (28, Y, "holder", "renew", {}),  # Y's lease now ends at 43
    (43 - M, X, "other", "acquire", {"duration": 15}),
    (39, Y, "other", "renew", {}),  # ends at 54
    (40, None, "holder", "break", {"break_period": 10}),  # breaks at 50
    (50 - M, X, "other", "acquire", {"duration": 15}),
    (50 + M, X, "holder", "acquire", {"duration": 15}),
]
EXPECTED = [(201, None, None), (409, "LeaseAlreadyPresent", None), (409, "LeaseAlreadyPresent", None),
            (201, None, None), (409, "LeaseIdMismatchWithLeaseOperation", None), (200, None, None),
            (409, "LeaseAlreadyPresent", None), (200, None, None), (202, None, "10"),
            (409, "LeaseAlreadyPresent", None), (201, None, None)]
assert [t for t, *_ in SCRIPT] == sorted(t for t, *_ in SCRIPT)


def _play(timeline: Timeline, holder: Instance, other: Instance, name: str) -> list[tuple]:
    path = _blob(holder.url, name)
    timeline.begin()
    outcomes = []
    for t, who, where, action, headers in SCRIPT:
        timeline.at(t)
        sent: dict[str, Any] = dict(headers)  # azure_raw.lease's keyword arguments
        if who is not None:
            sent["proposed_lease_id" if action == "acquire" else "lease_id"] = who
        instance = holder if where == "holder" else other
        outcomes.append(_outcome(azure_raw.lease(instance.url, path, action, **sent)))
    return outcomes


def _history(pg, blob_prefix: str) -> dict[str, list[tuple]]:
    with psycopg.connect(pg.url()) as conn:
        rows = conn.execute("SELECT blob, action, outcome, lease_fingerprint, proposed_lease_fingerprint, state_after, expires_at, "
                            "occurred_at FROM leases_leaseevent WHERE blob LIKE %s AND action <> 'put-blob' "
                            "ORDER BY id", [blob_prefix + "%"]).fetchall()
    found: dict[str, list[tuple]] = {}
    for blob, *event in rows:
        found.setdefault(blob, []).append(tuple(event))
    return found


def _double_holders(events: list[tuple]) -> list[tuple]:
    """Acquires granted while another lease id's lease was live (by the
    times recorded), and events stamped before the one recorded ahead of them."""
    wrong, live = [], None  # live: (lease id, until: None for ever)
    last_time = None
    for action, outcome, lease_id, proposed, state_after, expires_at, at in events:
        if last_time is not None and at < last_time:
            wrong.append(("stamped before the event ahead of it", action, at, last_time))
        last_time = at
        if outcome != "success":
            continue
        if action == "acquire" and live is not None and live[0] != lease_id and (live[1] is None or at < live[1]):
            wrong.append(("acquired while held", lease_id, at, live))
        holder = proposed if action == "change" else lease_id
        live = (holder, expires_at) if state_after in ("leased", "breaking") else None
    return wrong


def test_two_instances_an_hour_apart_decide_as_one(two_clocks):
    """The script through one instance, then with the holder on A and the
    other client on B (an hour ahead), the other way round, and with C (an
    hour behind) against B and A: the same outcomes, and those of the lease
    rules (EXPECTED); the history in time order."""
    pg, a, b, c, timeline, _ = two_clocks  # c: an hour behind A, two behind B
    one = _play(timeline, a, a, "one")
    assert one == EXPECTED
    assert _play(timeline, a, b, "a-then-b") == one
    assert _play(timeline, b, a, "b-then-a") == one
    assert _play(timeline, c, b, "c-then-b") == one
    assert _play(timeline, a, c, "a-then-c") == one
    for blob, events in _history(pg, "").items():
        assert not _double_holders(events), (blob, _double_holders(events))


def test_races_across_instances_never_make_two_holders(two_clocks):
    """Acquires, renewals and breaks of the same blobs through both
    instances at once, at moments when the leases end: every answer is a
    lease answer (no 5xx), the history shows no two holders, and the
    answers are linearizable on the database's timeline (tests/lincheck.py)."""
    pg, a, b, _, timeline, _ = two_clocks
    names = [f"race-{n}" for n in range(12)]
    paths = [_blob(a.url, name) for name in names]
    rng = random.Random(24)
    clients = [str(uuid.uuid4()) for _ in range(3)]
    timeline.begin()
    statuses: dict[int, int] = {}
    # lease time is the database's clock: the real time plus the offset the test set (between rounds)
    history = Recorder(clock=lambda: time.time() + timeline.offset)

    def call(path: str, n: int) -> None:
        instance = (a, b)[n % 2]
        client = clients[rng.randrange(len(clients))]
        kind = n % 4
        if kind in (0, 1):
            sent = {"duration": 15, "proposed_lease_id": client}
            action = "acquire"
        elif kind == 2:
            sent, action = {"lease_id": client}, "renew"
        else:
            sent, action = {"break_period": rng.choice([0, 1, 5])}, "break"
        sent_at = history.clock()
        response = azure_raw.lease(instance.url, path, action, **sent)
        history.http(client if action != "break" else f"breaker-{n}", path, action, sent_at, response,
                     lease_id=sent.get("lease_id"), proposed_id=sent.get("proposed_lease_id"),
                     duration=sent.get("duration"), break_period=sent.get("break_period"))
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

    with ThreadPoolExecutor(16) as pool:
        t = 0.0
        for _ in range(8):
            timeline.at(t)
            list(pool.map(lambda job: call(*job), [(p, n) for p in paths for n in range(4)]))
            t += rng.choice([1, 6, 14.9, 15.1])  # just before and after leases end
    assert set(statuses) <= {200, 201, 202, 409}, statuses
    assert statuses.get(201, 0) > len(paths), statuses
    for blob, events in _history(pg, "race-").items():
        assert not _double_holders(events), (blob, _double_holders(events))
    verdict = history.check()
    assert verdict, verdict.explain()
    print(verdict.explain())


STEPPED_BACK = re.compile(r"clock step: the database's clock went back by 3[56]\d\d\.\d s")


def _warnings(instance: Instance) -> list[str]:
    response = requests.get(f"{instance.url}/health/ready", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["warnings"]


def test_a_step_back_of_the_databases_clock_shortens_no_lease_and_is_reported(two_clocks):
    """The database's clock goes back an hour while X holds a lease: X's
    lease still holds a newcomer off after its own 15 s, X renews through
    the other instance without its deadline moving back, and each instance
    logs the step; /health/ready warns of it, /metrics counts it."""
    pg, a, b, _, timeline, scraper = two_clocks
    path = _blob(a.url, "step")
    time.sleep(1.2)  # the instances read the clock once a second: after any earlier move of it, not lease time
    before = value(scrape(a.url, scraper), "leasehold_clock_steps_total")
    timeline.begin()
    assert azure_raw.lease(a.url, path, "acquire", duration=15, proposed_lease_id=X).status_code == 201
    timeline.step(-3600)
    deadline = time.monotonic() + 10  # the instances read the clock once a second
    while not all(STEPPED_BACK.search(i.output()) for i in (a, b)):  # each instance logs the step
        assert time.monotonic() < deadline, [i.output()[-1000:] for i in (a, b)]
        time.sleep(0.1)  # waiting for the instances' clock readings, not for lease time
    assert all(any(STEPPED_BACK.search(w) for w in _warnings(i)) for i in (a, b))
    assert value(scrape(b.url, scraper), "leasehold_clock_steps_total") == before + 1  # seen by both, counted once
    assert any("held at its high-water mark" in w for w in _warnings(a)), _warnings(a)
    timeline.at(16)  # 16 s after the step: by the stepped clock, the lease ends an hour later
    assert azure_raw.error_code(azure_raw.lease(b.url, path, "acquire", duration=15, proposed_lease_id=Y)) == \
        "LeaseAlreadyPresent"
    assert azure_raw.lease(b.url, path, "renew", lease_id=X).status_code == 200
    events = _history(pg, "step")["step"]
    assert [e[0] for e in events] == ["acquire", "acquire", "renew"]
    assert events[2][5] >= events[0][5], events  # the renewal's deadline is not earlier
    assert not _double_holders(events), _double_holders(events)
