"""The JSON API's lean lease path (leases/api/lean.py) answers exactly as the DRF view (through
Django's handler and middleware) and records exactly the same history.

Each request of a script -- every action on blobs and containers, good and bad lease ids, durations,
break periods, reasons, conditions, missing resources, client request ids, and the refusals the lean
path hands to the view (a bad token, a missing permission, a value of the wrong JSON type, a header
the view refuses) -- is sent to both from the same database state (a savepoint, rolled back after
the view), with the clock frozen and uuid4 drawn from the same seed, and both answers (status, every
header, body) and the history rows each appended must be identical. The lean side is served as
serving/asgi.py serves it: ``takes``, then the batch's steps (the checks, the write with the queue,
the answer), the view when the lean path declines it (its answer None). The script goes on
from the lean side's state, so later steps meet leases in every state."""

from __future__ import annotations

import json

import pytest
from django.core import signals
from django.db import close_old_connections, transaction

from leases.api import lean as api_lean
from leases.azure import lean as azure_lean
from leases.azure.handler import LeaseholdWSGI
from leases.domain import clock as lease_clock
from leases.models import LeaseEvent
from leases.storage import queue_intake

from leases.models.tokens import ApiToken
from tests.azure.test_azure_lean import _answer, _events_after, seed_ids

from .helpers import API, DEV_ACCOUNT, make_blob, make_container, make_user

pytestmark = pytest.mark.also_postgres

A, B, C = "ca761232-ed42-11ce-bacd-00aa0057b223", "3c7e72eb-b430-4526-bc53-d8ecef03798f", \
    "{11111111-2222-3333-4444-555555555555}"
ALL = ("leases.change_blob", "leases.change_container", "leases.break_blob_lease", "leases.break_container_lease")
BLOB, CONTAINER = f"{DEV_ACCOUNT}/box/dir/a b.txt", f"{DEV_ACCOUNT}/box"


def environ(action: str, path: str, body, *, token: str, query: str = "", headers: dict | None = None,
            raw: bytes | None = None) -> dict:
    """A WSGI environ as serving/asgi.py builds it for this request."""
    from serving.asgi import _environ

    content = raw if raw is not None else json.dumps(body).encode()
    hdrs = {"host": "127.0.0.1:10000", "user-agent": "api-lean-test/1.0", "content-type": "application/json",
            "authorization": f"Bearer {token}", "content-length": str(len(content)), **(headers or {})}
    full = f"{API}/leases/{action}/{path}"
    scope = {"type": "http", "method": "POST", "path": full, "raw_path": full.encode(),
             "query_string": query.encode(), "http_version": "1.1", "scheme": "http",
             "server": ("127.0.0.1", 10000), "client": ("10.9.8.7", 40123),
             "headers": [(k.encode(), v.encode("utf-8")) for k, v in hdrs.items() if v is not None]}
    return _environ(scope, content, len(content))


class Served:
    """The lean side as serving/asgi.py serves a JSON lease request: the
    lean path if it takes it and answers it, else the view. ``taken`` and
    ``handed_over`` say which happened."""

    def __init__(self, monkeypatch, seed: int):
        self.monkeypatch, self.seed = monkeypatch, seed
        self.taken = self.handed_over = False

    def __call__(self, env: dict, start_response):
        lease = api_lean.takes(env, env["wsgi.input"].getvalue())
        self.taken = lease is not None
        if lease is not None:
            call, = api_lean.checked([(env, lease)])
            queue_intake.write_now([call])  # as the write queue writes a server's batch
            response = call.answer()
            if response is None:  # declined
                self.handed_over = True
            else:
                start_response(f"{response.status_code} {response.reason_phrase}", list(response.items()))
                return response
        # The view answers it, as a fresh request: its request id drawn anew.
        seed_ids(self.monkeypatch, self.seed)
        env["wsgi.input"].seek(0)
        return LeaseholdWSGI()(env, start_response)


def both_ways(monkeypatch, make_env, seed: int):
    """The view's and the served lean side's answers and history rows, each
    from the same state; the lean side's changes are kept."""
    results = []
    served = Served(monkeypatch, seed)
    for app in (LeaseholdWSGI(), served):
        seed_ids(monkeypatch, seed)
        last = LeaseEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
        point = transaction.savepoint()
        results.append((_answer(app, make_env()), _events_after(last)))
        if app is served:
            transaction.savepoint_commit(point)
        else:
            transaction.savepoint_rollback(point)
    monkeypatch.undo()
    return results, served


@pytest.fixture
def lean_state(accounts):
    # As Django's test client does: the requests run inside the test's
    # transaction, which close_old_connections would end.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    lease_clock.freeze()
    make_container("box")
    make_blob("box", "dir/a b.txt", b"hello")
    tokens = {}
    for name, perms in (("all", ALL), ("blobs", ("leases.change_blob",)), ("none", ())):
        _, tokens[name] = ApiToken.issue(user=make_user(f"lean-{name}", *perms), name=f"lean-{name}")
    yield tokens
    lease_clock.reset()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


LEAN, HANDED_OVER, VIEW = "lean", "handed over", "view"


def script():
    """(how the lean side answers, action, path, body, options), in order."""
    steps = []
    for path in (BLOB, CONTAINER):
        steps += [
            (LEAN, "acquire", path, {"duration": 15, "proposed_lease_id": A}, {}),
            (LEAN, "acquire", path, {"duration": 15, "proposed_lease_id": B}, {}),  # 409 LeaseAlreadyPresent
            (LEAN, "renew", path, {"lease_id": A}, {"headers": {"x-client-request-id": "client-1"}}),
            (LEAN, "renew", path, {"lease_id": A}, {"headers": {"x-ms-client-request-id": "client-2"}}),
            (LEAN, "renew", path, {"lease_id": A}, {"headers": {"content-type": "application/json; charset=utf-8"}}),
            (LEAN, "renew", path, {"lease_id": B}, {}),  # 409 LeaseIdMismatchWithLeaseOperation
            (LEAN, "renew", path, {}, {}),  # 400 missing lease id, recorded
            (LEAN, "renew", path, {"lease_id": "not-a-guid"}, {}),
            (LEAN, "renew", path, {"lease_id": ""}, {}),
            (LEAN, "renew", path, {"lease_id": None}, {}),
            (LEAN, "change", path, {"lease_id": A, "proposed_lease_id": C}, {}),
            (LEAN, "change", path, {"lease_id": A}, {}),  # missing proposed id
            (LEAN, "release", path, {"lease_id": B, "reason": "  not mine  "}, {}),
            (LEAN, "release", path, {"lease_id": C, "reason": "done", "unknown": [1]}, {}),
            (LEAN, "acquire", path, {"duration": -1}, {"headers": {"user-agent": "u" * 600}}),
            (LEAN, "break", path, {"break_period": 70}, {}),
            (LEAN, "break", path, {"break_period": 10, "reason": "maintenance"}, {}),
            (LEAN, "acquire", path, {"duration": 20}, {}),  # 409 breaking
            (LEAN, "renew", path, {"lease_id": "11111111-2222-3333-4444-555555555555"}, {}),
            (LEAN, "break", path, {}, {}),
            (LEAN, "acquire", path, {"duration": 10}, {}),  # out of range
            (LEAN, "acquire", path, {"duration": 61}, {}),
            (LEAN, "acquire", path, {}, {}),  # no duration
            (LEAN, "acquire", path, {"duration": 15},
             {"headers": {"if-modified-since": "Mon, 01 Jan 2001 00:00:00 GMT"}}),
            (LEAN, "acquire", path, {"duration": 15},
             {"headers": {"if-unmodified-since": "Mon, 01 Jan 2001 00:00:00 GMT"}}),  # 412
            (LEAN, "acquire", path, {"duration": 15}, {"headers": {"if-match": '"0x0000000000000"'}}),
            (LEAN, "acquire", path, {"duration": 15}, {"headers": {"if-none-match": "*"}}),
            (LEAN, "acquire", path, {"duration": 15}, {"headers": {"accept": "application/json"}}),
            (LEAN, "break", path, {"break_period": 0}, {}),
            (LEAN, "acquire", path, {"duration": -1, "proposed_lease_id": A}, {}),
            (LEAN, "release", path, {"lease_id": A}, {}),
            # Refused before the service: handed to the view, which answers them.
            (HANDED_OVER, "acquire", path, {"duration": 15}, {"headers": {"if-unmodified-since": "not a date"}}),
            (HANDED_OVER, "acquire", path, {"duration": 15}, {"token": "bad"}),  # 401
            (HANDED_OVER, "acquire", path, {"duration": 15}, {"token": "none"}),  # 403 no permission
            # Not of the lean shape: the view's.
            (VIEW, "acquire", path, {"duration": "fifteen"}, {}),
            (VIEW, "acquire", path, {"duration": True}, {}),
            (VIEW, "release", path, {"lease_id": A, "reason": 5}, {}),
            (VIEW, "release", path, {"lease_id": A, "reason": "r" * 501}, {}),
            (VIEW, "release", path, {"lease_id": A, "reason": None}, {}),
            (VIEW, "acquire", path, None, {"raw": b"{not json"}),
            (VIEW, "acquire", path, [1, 2], {}),
            (VIEW, "acquire", path, {"duration": 15}, {"headers": {"accept": "text/html"}}),
            (VIEW, "acquire", path, {"duration": 15}, {"query": "format=json"}),
            (VIEW, "acquire", path, {"duration": 15}, {"headers": {"content-type": "text/plain"}}),
        ]
    steps += [
        (HANDED_OVER, "acquire", CONTAINER, {"duration": 15}, {"token": "blobs"}),  # a permission, not the other
        (LEAN, "acquire", BLOB, {"duration": 15, "proposed_lease_id": B}, {"token": "blobs"}),
        (LEAN, "release", BLOB, {"lease_id": B}, {"token": "blobs"}),
        (HANDED_OVER, "break", BLOB, {}, {"token": "blobs"}),  # breaking needs its own permission
        (LEAN, "acquire", f"{DEV_ACCOUNT}/box/nothing", {"duration": 15}, {}),  # 404 BlobNotFound
        (LEAN, "acquire", f"{DEV_ACCOUNT}/nowhere", {"duration": 15}, {}),  # 404 ContainerNotFound
        (LEAN, "acquire", f"{DEV_ACCOUNT}/nowhere/b", {"duration": 15}, {}),
        (LEAN, "acquire", "otheraccount/box", {"duration": 15}, {}),
        (LEAN, "acquire", f"{DEV_ACCOUNT}/box/caf\u00e9 \U0001f600/x", {"duration": 15}, {}),
        (LEAN, "acquire", f"{DEV_ACCOUNT}/box/dir\\a b.txt", {"duration": 15}, {}),  # '\' is '/'
        (VIEW, "steal", BLOB, {"lease_id": A}, {}),  # no such action: the view's 404
        (VIEW, "acquire", f"{DEV_ACCOUNT}/box/", {"duration": 15}, {}),
    ]
    return steps


def test_lean_path_answers_and_records_as_the_view(lean_state, monkeypatch):
    tokens = {**lean_state, "bad": "lh_not-a-token"}
    statuses: set[int] = set()
    codes: set[str] = set()
    for number, (how, action, path, body, options) in enumerate(script()):
        token = tokens[options.get("token", "all")]

        def make_env():
            return environ(action, path, body, token=token, query=options.get("query", ""),
                           headers=options.get("headers"), raw=options.get("raw"))

        ((view, view_events), (lean, lean_events)), served = both_ways(monkeypatch, make_env, seed=number)
        where = f"step {number}: {how} {action} {path} {body} {options}"
        assert lean == view, where
        assert lean_events == view_events, where
        assert (LEAN if served.taken and not served.handed_over else HANDED_OVER if served.taken else VIEW) == how, where
        statuses.add(int(view[0][:3]))
        content = json.loads(view[2]) if view[2].startswith(b"{") else {}
        codes.add(content.get("code", ""))
        if number % 7 == 0:
            lease_clock.advance(5)  # leases expire, breaks end, as the script goes on
    # the script did reach successes and refusals of every kind
    assert {200, 201, 202, 400, 401, 403, 404, 409, 412} <= statuses
    assert {"LeaseAlreadyPresent", "LeaseIdMismatchWithLeaseOperation", "MissingRequiredHeader",
            "InvalidHeaderValue", "ContainerNotFound", "BlobNotFound", "ConditionNotMet",
            "AuthenticationFailed", "AuthorizationPermissionMismatch"} <= codes


def test_the_rate_limit_is_counted_once_and_refused_by_the_view(lean_state, monkeypatch, settings):
    """Counted by the lean path as by the view (a limit under 100 is counted
    exactly); past it the request is handed to the view, which refuses it
    429 with Retry-After, recorded nowhere, changing nothing."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api": "3/minute"}}
    from rest_framework.settings import api_settings

    api_settings.reload()
    try:
        answers = []
        for number in range(4):
            served = Served(monkeypatch, number)
            env = environ("acquire", BLOB, {"duration": 15, "proposed_lease_id": A}, token=lean_state["all"])
            last = LeaseEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
            answers.append((_answer(served, env), _events_after(last), served.taken, served.handed_over))
        assert [int(status[:3]) for (status, _, _), _, _, _ in answers] == [201, 201, 201, 429]  # acquiring again: 201
        assert [len(events) for _, events, _, _ in answers] == [1, 1, 1, 0]
        assert [(taken, handed) for _, _, taken, handed in answers] == [(True, False)] * 3 + [(True, True)]
        (_, headers, body), _, _, _ = answers[3]
        assert json.loads(body)["code"] == "TooManyRequests"
        assert int(dict(headers)["Retry-After"]) >= 1
    finally:
        monkeypatch.undo()
        api_settings.reload()


def test_a_request_that_fails_in_a_batch_fails_alone(lean_state, monkeypatch):
    """Requests of both doors' lean paths written together: one whose write
    fails by a bug fails alone (500, its own), the others are written and
    answered as if alone."""
    from leases.services import lease_actions

    requests = [environ("acquire", BLOB, {"duration": 15, "proposed_lease_id": A}, token=lean_state["all"]),
                environ("acquire", CONTAINER, {"duration": 15, "proposed_lease_id": B}, token=lean_state["all"]),
                environ("acquire", f"{DEV_ACCOUNT}/box/nothing", {"duration": 15}, token=lean_state["all"])]
    leases = [api_lean.takes(env, env["wsgi.input"].getvalue()) for env in requests]
    calls = api_lean.checked([(env, lease) for env, lease in zip(requests, leases) if lease is not None])
    real = lease_actions._lease_write

    def failing(**arguments):
        if arguments["ref"].noun == "container":
            raise RuntimeError("a bug in one request's write")
        return real(**arguments)

    monkeypatch.setattr(lease_actions, "_lease_write", failing)
    queue_intake.write_now(calls)
    monkeypatch.undo()
    answers = [call.answer() for call in calls]
    assert None not in answers  # none declined
    assert [answer.status_code for answer in answers if answer is not None] == [201, 500, 404]
    assert json.loads(getattr(answers[1], "content"))["code"] == "InternalError"
    written = LeaseEvent.objects.filter(action="acquire").values_list("resource_type", "blob", "outcome")
    assert sorted(written) == [("blob", "dir/a b.txt", "success"), ("blob", "nothing", "refused")]


@pytest.mark.parametrize("change", [
    {"REQUEST_METHOD": "PUT"}, {"QUERY_STRING": "x=1"}, {"CONTENT_TYPE": "application/x-www-form-urlencoded"},
    {"HTTP_ACCEPT": "text/html"}, {"HTTP_AUTHORIZATION": "SharedKey devstoreaccount1:abc"},
    {"PATH_INFO": f"{API}/leases/acquire/{DEV_ACCOUNT}"}, {"PATH_INFO": f"{API}/leases/acquire/{DEV_ACCOUNT}//x"},
    {"PATH_INFO": f"{API}/leases/acquire/{DEV_ACCOUNT}/box/"}, {"SCRIPT_NAME": "/prefix"},
])
def test_unusual_shapes_go_to_the_view(change):
    env = environ("acquire", BLOB, {"duration": 15}, token="lh_x")
    body = env["wsgi.input"].getvalue()
    assert api_lean.takes(dict(env), body) is not None
    assert api_lean.takes({**env, **change}, body) is None
    assert api_lean.takes(env, b"") is None
    assert api_lean.takes(dict(env), b'{"duration": 15, "wait": 5}') is None  # a waiting acquire


def test_a_request_checked_again_is_counted_once(lean_state, monkeypatch, settings):
    """A request the event loop checked but could not write at once (the
    writer not free that moment) is checked again by the write queue's
    thread: the rate limit counts it once."""
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"api": "2/minute"}}
    from rest_framework.settings import api_settings

    api_settings.reload()
    try:
        statuses = []
        for number in range(3):
            env = environ("acquire", BLOB, {"duration": 15, "proposed_lease_id": A}, token=lean_state["all"])
            lease = api_lean.takes(env, env["wsgi.input"].getvalue())
            assert lease is not None
            call, = api_lean.checked([(env, lease)])
            if number == 0:  # counted, not written: checked again, as the queue's thread does
                assert call.arguments is not None
                call, = api_lean.checked([(env, lease)])
            queue_intake.write_now([call])
            response = call.answer()
            if response is None:  # past the limit: declined, the view's
                env["wsgi.input"].seek(0)
                statuses.append(int(_answer(LeaseholdWSGI(), env)[0][:3]))
            else:
                statuses.append(response.status_code)
        assert statuses == [201, 201, 429]
    finally:
        api_settings.reload()


def test_a_batch_of_both_doors_is_checked_by_each_requests_own_lean_path(lean_state, monkeypatch):
    """Requests of both doors received together, taken as the server does
    (the wiring's doors, serving/asgi.py's ``lean``) and submitted to the
    write queue together: each request's call is made by the door that took
    it (queue_intake's ``_checked``, in the batch's order), and the batch,
    written together, answers each as its own door would."""
    from engines import postgres

    # Importing the wiring builds the served application, which marks this
    # process as a server's (bounded statements on PostgreSQL): undone after.
    monkeypatch.setattr(postgres, "SERVING", postgres.SERVING)
    from config.asgi import build
    from leases.storage.queue_intake import _checked, _Entry
    from tests.azure.test_azure_lean import environ as azure_environ

    make_blob("box", "azure.txt", b"x")
    azure_acquire = {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15", "x-ms-proposed-lease-id": A}
    requests = [azure_environ(f"/{DEV_ACCOUNT}/box/azure.txt", azure_acquire),
                environ("acquire", BLOB, {"duration": 15, "proposed_lease_id": B}, token=lean_state["all"]),
                azure_environ(f"/{DEV_ACCOUNT}/box", {**azure_acquire, "x-ms-proposed-lease-id": B})]
    app = build(None)
    taken = [app.lean({"path": env["PATH_INFO"]}, env, env["wsgi.input"].getvalue()) for env in requests]
    assert [pair and pair[0].name for pair in taken] == ["azure", "api", "azure"]
    doors = {"azure": azure_lean.checked, "api": api_lean.checked}
    entries = [_Entry(doors[pair[0].name], (env, pair[1]), "", 0.0, None)  # type: ignore[arg-type]
               for env, pair in zip(requests, taken) if pair is not None]
    calls = _checked(entries)
    assert [type(call) for call in calls] == [azure_lean.LeaseCall, api_lean.ApiLeaseCall, azure_lean.LeaseCall]
    assert [getattr(call, "environ") for call in calls] == requests
    queue_intake.write_now(calls)
    answers = [call.answer() for call in calls]
    assert [answer.status_code for answer in answers] == [201, 201, 201]
    assert answers[0]["x-ms-lease-id"] == A and answers[2]["x-ms-lease-id"] == B
    assert json.loads(answers[1].content)["lease_id"] == B
