"""The ASGI front (serving/asgi.py): which lane a request runs in, and how a
body is received (bounded in size and in how slowly it may come)."""

from __future__ import annotations

import asyncio

import pytest

from serving.asgi import LeaseholdASGI
from serving.bodies import SPOOL_BYTES, BodyRefused


def scope(method: str, path: str, query: bytes = b"", headers=()):
    return {"type": "http", "method": method, "path": path, "query_string": query, "headers": list(headers)}


@pytest.mark.parametrize("method, path, query, lane", [
    ("PUT", "/devstoreaccount1/c/b", b"comp=lease", "lease"),
    ("PUT", "/devstoreaccount1/c", b"restype=container&comp=lease", "lease"),
    ("POST", "/api/v1/leases/renew/devstoreaccount1/c/b", b"", "lease"),
    ("PUT", "/devstoreaccount1/c/b", b"", "other"),  # a small upload
    ("GET", "/devstoreaccount1/c", b"restype=container&comp=list", "read"),
    ("HEAD", "/devstoreaccount1/c/b", b"", "read"),
    ("GET", "/api/v1/events/export/", b"format=csv", "read"),
    ("POST", "/admin/login/", b"comp=lease", "other"),  # not a lease action, whatever its query says
    ("GET", "/admin/", b"comp=lease", "read"),
])
def test_lanes(method, path, query, lane):
    assert LeaseholdASGI.lane_name(scope(method, path, query)) == lane


@pytest.mark.parametrize("length, lane", [(1 << 20, "other"), ((1 << 20) + 1, "upload"), (64 << 20, "upload")])
def test_a_put_staged_in_chunks_has_a_lane_of_its_own(length, lane):
    headers = [(b"Content-Length", str(length).encode())]
    assert LeaseholdASGI.lane_name(scope("PUT", "/devstoreaccount1/c/b", headers=headers)) == lane


def test_the_long_reads_are_the_history_and_tenure_exports():
    from django.urls import reverse

    from serving.long_reads import LONG_READ_PATHS, is_long_read

    assert set(LONG_READ_PATHS) == {reverse("api-events-export"), reverse("admin:leases_leaseevent_export"),
                                    reverse("api-tenures-export")}
    assert is_long_read(scope("GET", reverse("api-events-export")))
    assert not is_long_read(scope("POST", reverse("api-events-export")))
    assert not is_long_read(scope("GET", "/api/v1/events/"))


@pytest.fixture
def front(leasehold_env):
    leasehold_env(LEASEHOLD_BODY_IDLE_TIMEOUT="0.2", LEASEHOLD_BODY_MIN_RATE="1000000")
    from config.asgi import build

    return build(None)


def read(front, headers, messages):
    async def receive():
        if not messages:
            await asyncio.Event().wait()  # the client sends nothing more
        return messages.pop(0)
    return asyncio.run(front.read_body(scope("PUT", "/a/b/c", headers=headers), receive))


def test_a_stalled_body_is_refused_with_408(front):
    with pytest.raises(BodyRefused) as refused:
        read(front, [(b"content-length", b"10")], [{"type": "http.request", "body": b"abc", "more_body": True}])
    assert refused.value.status == 408


def test_a_body_over_the_bound_is_refused_unread(front):
    messages = [{"type": "http.request", "body": b"x", "more_body": False}]
    with pytest.raises(BodyRefused) as refused:
        read(front, [(b"Content-Length", str(front.max_body + 1).encode())], messages)
    assert refused.value.status == 413 and messages  # nothing was received


def test_a_chunked_body_over_the_bound_is_refused(front):
    piece = b"x" * (1 << 20)
    messages = [{"type": "http.request", "body": piece, "more_body": True}
                for _ in range(front.max_body // len(piece) + 2)]
    with pytest.raises(BodyRefused) as refused:
        read(front, [(b"transfer-encoding", b"chunked")], messages)
    assert refused.value.status == 413


def test_a_bad_content_length_is_a_400(front):
    with pytest.raises(BodyRefused) as refused:
        read(front, [(b"content-length", b"12x")], [])
    assert refused.value.status == 400


def test_small_bodies_in_memory_large_ones_in_a_file(front):
    small, length = read(front, [(b"content-length", b"6")],
                         [{"type": "http.request", "body": b"abc", "more_body": True},
                          {"type": "http.request", "body": b"def", "more_body": False}])
    assert (small, length) == (b"abcdef", 6)
    data = bytes(range(256)) * (SPOOL_BYTES // 256 + 10)
    pieces = [data[i:i + 65536] for i in range(0, len(data), 65536)]
    messages = [{"type": "http.request", "body": p, "more_body": i < len(pieces) - 1} for i, p in enumerate(pieces)]
    spooled, length = read(front, [(b"content-length", str(len(data)).encode())], messages)
    assert length == len(data) and not isinstance(spooled, bytes)
    assert spooled.read() == data


def test_no_body_is_not_waited_for(front):
    assert read(front, [], []) == (b"", 0)


def test_a_body_below_the_minimum_rate_is_refused(front):
    """Pieces come more often than the idle timeout, but too slowly on
    average once the grace period is over."""
    async def run():
        sent = 0

        async def receive():
            nonlocal sent
            await asyncio.sleep(0.05)
            sent += 1
            return {"type": "http.request", "body": b"u", "more_body": sent < 100}
        return await front.read_body(scope("PUT", "/a/b/c", headers=[(b"content-length", b"100")]), receive)

    with pytest.raises(BodyRefused) as refused:
        asyncio.run(run())
    assert refused.value.status == 408


def test_what_the_worker_loaded_at_startup_is_kept_out_of_the_collectors_scans(front):
    """A full collection scans only what requests made since the worker
    started: a scan of all of Django is a long pause of the event loop
    (docs/decisions/0003)."""
    import gc

    sent = []
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message["type"])

    gc.unfreeze()
    try:
        asyncio.run(front.lifespan(receive, send))
        assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
        assert gc.get_freeze_count() > 10_000  # Django and the app, at least
    finally:
        gc.unfreeze()


def test_a_stopped_server_leaves_no_duty_thread_behind(front):
    """The pruner and the ledger's sealer a server's start begins end with its stop: an
    in-process server's threads must not go on touching the database after it."""
    import threading

    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

    async def receive():
        return messages.pop(0)

    async def send(message):
        pass

    asyncio.run(front.lifespan(receive, send))
    duties = [t for t in threading.enumerate() if t.name in ("leasehold-retention", "leasehold-ledger")]
    for thread in duties:
        thread.join(timeout=30)
    assert not [t.name for t in duties if t.is_alive()]


def _served_until_told(front, *, stop_server: bool) -> dict:
    """A request served in a lane by an application that waits (30 s at most) to be told no one
    will read its answer: its client goes away, or the server begins to stop."""
    import threading

    from django.http import HttpResponse

    from serving import front as front_module

    seen: dict = {}
    loop_ready = threading.Event()
    state: dict = {}

    def app(environ, start_response):
        abandoned = environ["leasehold.abandoned"]
        seen["before"] = abandoned.is_set()
        loop_ready.wait(10)
        if stop_server:
            front_module.STOPPING.set()
        else:
            state["loop"].call_soon_threadsafe(state["gone"].set)
        seen["told"] = _until(abandoned.is_set, 30)
        start_response("200 OK", [("Content-Length", "0")])
        return HttpResponse(b"")

    async def run():
        state["loop"], state["gone"] = asyncio.get_running_loop(), asyncio.Event()
        messages = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive():
            if messages:
                return messages.pop(0)
            loop_ready.set()
            await state["gone"].wait()
            return {"type": "http.disconnect"}

        sent: list = []

        async def send(message):
            sent.append(message)

        await front.http(scope("GET", "/admin/leases/leaseevent/"), receive, send)
        return sent

    front.app = app
    try:
        if stop_server:
            # Nothing tells the loop; the request is answered once the application returns.
            loop_ready.set()
        asyncio.run(run())
    finally:
        front_module.STOPPING.clear()
    return seen


def _until(condition, ceiling: float) -> bool:
    import time

    deadline = time.monotonic() + ceiling
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_request_whose_client_went_away_is_told_so_in_its_thread(front):
    """What a long read checks to stop (leases/admin/queries.py's bounded_reads)."""
    assert _served_until_told(front, stop_server=False) == {"before": False, "told": True}


def test_a_request_being_served_is_told_when_the_server_begins_to_stop(front):
    assert _served_until_told(front, stop_server=True) == {"before": False, "told": True}


def test_the_http_front_marks_the_server_stopping_when_told_to_shut_down(leasehold_env):
    """uvicorn tells each connection's protocol to shut down when the server stops: that is what
    sets STOPPING, which every request still being served then sees (Abandoned)."""
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    from serving import front as front_module

    class Transport(asyncio.Transport):  # the socket's stand-in: what the protocol asks of it
        def __init__(self):
            super().__init__()
            self.closed = False

        def get_extra_info(self, name, default=None):
            return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 10000)}.get(name, default)

        def close(self):
            self.closed = True

        def is_closing(self):
            return self.closed

    async def run():
        config = Config(app=lambda scope, receive, send: None, log_level="warning")
        config.load()
        protocol = front_module.LeaseholdHttpProtocol(config, ServerState(), {}, asyncio.get_running_loop())
        protocol.connection_made(Transport())
        assert not front_module.Abandoned().is_set()
        protocol.shutdown()
        return front_module.Abandoned().is_set()

    try:
        assert asyncio.run(run()) is True
    finally:
        front_module.STOPPING.clear()


class DecliningCall:
    """A lean call whose door declines it after its checks (as leases/api/lean.py does a request
    whose token is not remembered): nothing to write, no answer of its own."""

    def __init__(self, environ):
        self.environ = environ

    def writes(self):
        return None  # nothing to write

    def written(self, result, error):
        raise AssertionError("a declined call is not written")

    def answer(self):
        return None


def test_a_lean_call_its_door_declines_is_answered_by_the_general_path(leasehold_env, monkeypatch):
    from django.http import HttpResponse

    from config.asgi import DATABASE, DOORS
    from serving.doors import LeanDoor
    from engines import postgres
    from leases.storage import queue_intake

    monkeypatch.setattr(postgres, "SERVING", postgres.SERVING)  # building a front marks a server process
    general = []

    def app(environ, start_response):
        general.append(environ["PATH_INFO"])
        response = HttpResponse(b'{"by": "the view"}', status=401, content_type="application/json")
        start_response("401 Unauthorized", list(response.items()))
        return response

    def checked(requests):
        return [DecliningCall(environ) for environ, _ in requests]

    async def answer(environ, names, *, principal, idle, finish):
        return await queue_intake.written(checked, (environ, names), principal=principal,
                                          received_at=environ["leasehold.received_at"], idle=idle, finish=finish)

    from leases.api import refusals

    path = LeanDoor(name="api", takes=lambda environ, body: "names", answer=answer, refusal=refusals.refusal,
                    asks_wait=lambda environ, body: False)
    azure = next(door for door in DOORS if door.name == "azure")
    front = LeaseholdASGI(app, doors=[azure, path], database=DATABASE)
    environ = {"PATH_INFO": "/api/v1/leases/renew/devstoreaccount1/c/b", "REQUEST_METHOD": "POST",
               "leasehold.received_at": 0.0}
    try:
        status, headers, content = asyncio.run(front.batched(environ, (path, "names"), front.lanes["lease"]))
    finally:
        for lane in front.lanes.values():
            lane.shutdown()
        front.admission.close()
    assert (status, content, general) == (401, b'{"by": "the view"}', [environ["PATH_INFO"]])
