"""The lean lease path (leases/azure/lean.py) answers exactly as the
general Azure path (handler.AzureDoorHandler: Django's request, URL
resolver, DRF's view) and records exactly the same history.

Each request of a long script -- every action on blobs and containers, good
and bad lease ids, durations, break periods, versions (legacy ones too),
SharedKey failures, conditions, missing containers and blobs, client
request ids -- is sent to both, from the same database state (a savepoint,
rolled back after the general path), with the clock frozen and uuid4 and the
request ids drawn from the same seed, and both answers (status, every header, body) and the
history rows each appended must be identical. The script then goes on from
the lean path's state, so later steps meet leases in every state. The lean
path is taken both ways it is entered: by the WSGI application
(azure_lean.serve, a batch of one) and as a worker's batch answers
(azure_lean.answer_together).

The environ is built by serving/asgi.py from an ASGI scope, as served."""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import uuid
from datetime import timedelta
from email.utils import formatdate
from urllib.parse import quote

import pytest
from django.db import transaction

from leases.domain import clock as lease_clock, guids
from leases import services
from leases.azure import lean as azure_lean
from leases.azure.handler import AzureDoorHandler, LeaseholdWSGI
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from leases.models import LeaseEvent
from leases.services import Actor, ResourceRef

pytestmark = pytest.mark.also_postgres

OTHER_ACCOUNT, OTHER_KEY = "fastother", base64.b64encode(b"the other account's key").decode()
SLOTS = ["content-encoding", "content-language", "content-length", "content-md5", "content-type", "date",
         "if-modified-since", "if-match", "if-none-match", "if-unmodified-since", "range"]
A, B, C = "ca761232-ed42-11ce-bacd-00aa0057b223", "3c7e72eb-b430-4526-bc53-d8ecef03798f", \
    "{11111111-2222-3333-4444-555555555555}"
BLOB, CONTAINER = "/devstoreaccount1/fast/item.bin", "/devstoreaccount1/fast"


def environ(path: str, headers: dict, *, query: str | None = None, account: str = DEV_ACCOUNT,
            key: str = DEV_KEY, sign: bool = True, version: str | None = "2025-11-05", method: str = "PUT") -> dict:
    """A WSGI environ as serving/asgi.py builds it for this request, SharedKey
    signed from the documented algorithm (not the server's code)."""
    from serving.asgi import _environ

    if query is None:
        query = "comp=lease&restype=container" if path.count("/") == 2 else "comp=lease"
    hdrs = {k.lower(): v for k, v in headers.items() if v is not None}
    hdrs.setdefault("x-ms-date", formatdate(lease_clock.now().timestamp(), usegmt=True))
    if version:
        hdrs.setdefault("x-ms-version", version)
    raw_path = quote(path, safe="/~")
    if sign:
        ms = "".join(f"{k}:{hdrs[k].strip()}\n" for k in sorted(h for h in hdrs if h.startswith("x-ms-")))
        params = sorted(p.split("=", 1) for p in query.split("&") if p)
        resource = f"/{account}{raw_path}" + "".join(f"\n{k.lower()}:{v}" for k, v in params)
        text = f"{method}\n" + "\n".join(hdrs.get(n, "") for n in SLOTS) + "\n" + ms + resource
        mac = hmac.new(base64.b64decode(key), text.encode(), hashlib.sha256).digest()
        hdrs["authorization"] = f"SharedKey {account}:{base64.b64encode(mac).decode()}"
    scope = {"type": "http", "method": method, "path": path, "raw_path": raw_path.encode(),
             "query_string": query.encode(), "http_version": "1.1", "scheme": "http",
             "server": ("127.0.0.1", 10000), "client": ("10.9.8.7", 40123),
             "headers": [(k.encode(), v.encode("utf-8")) for k, v in
                         {"host": "127.0.0.1:10000", "user-agent": "lean-test/1.0", **hdrs}.items()]}
    return _environ(scope, b"", 0)


def lease(path: str, action: str | None, **kw) -> tuple[str, dict]:
    names = {"lease_id": "x-ms-lease-id", "duration": "x-ms-lease-duration", "proposed": "x-ms-proposed-lease-id",
             "break_period": "x-ms-lease-break-period"}
    options = {k: kw.pop(k) for k in ("account", "key", "sign", "version", "query") if k in kw}
    headers = {names.get(k, k.replace("_", "-")): (None if v is None else str(v)) for k, v in kw.items()}
    if action is not None:
        headers["x-ms-lease-action"] = action
    return path, {"headers": headers, **options}


def _answer(app, env: dict) -> tuple[str, list, bytes]:
    out = {}

    def start_response(status, headers, exc_info=None):
        out["status"], out["headers"] = status, headers

    result = app(env, start_response)
    try:
        body = b"".join(result)
    finally:
        result.close()
    return out["status"], list(out["headers"]), body


def _events_after(last_id: int) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "id"}
            for row in LeaseEvent.objects.filter(id__gt=last_id).order_by("id").values()]


def seed_ids(monkeypatch, seed: int) -> None:
    """uuid4 and the request ids drawn from ``seed``: a second draw from the
    same seed makes the same ids."""
    rng = random.Random(seed)
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=rng.getrandbits(128), version=4))
    monkeypatch.setattr(guids, "request_id", lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4)))


class Batched:
    """The lean path as a worker's lease batch answers: azure_lean.answer_together
    (here, inside the test's transaction, one savepoint per request)."""

    def __call__(self, env: dict, start_response):
        names = azure_lean.takes(dict(env))
        assert names is not None, f"not taken by the lean path: {env['PATH_INFO']}"
        response, = azure_lean.answer_together([(env, names)])
        start_response(f"{response.status_code} {response.reason_phrase}", list(response.items()))
        return response


def three_ways(monkeypatch, path: str, spec: dict, seed: int):
    """The general path's, the lean path's and the lean batch's answers and
    history rows, each from the same state; the batch's changes are kept."""
    results = []
    for app in (AzureDoorHandler(), LeaseholdWSGI(), Batched()):
        seed_ids(monkeypatch, seed)
        last = LeaseEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
        point = transaction.savepoint()
        env = environ(path, **spec)
        if isinstance(app, LeaseholdWSGI):
            assert azure_lean.takes(dict(env)) is not None, f"not taken by the lean path: {path} {spec}"
        results.append((_answer(app, env), _events_after(last)))
        if isinstance(app, Batched):
            transaction.savepoint_commit(point)
        else:
            transaction.savepoint_rollback(point)
    monkeypatch.undo()
    return results


# Names outside Latin-1, from several planes: CJK, an astral emoji, a combining mark.
UNICODE_NAMES = ("\u6587\u4ef6", "\U0001f600", "e\u0301/\U0002070e")


def script():
    """(path, request) pairs, in order; each meets the state the ones before left."""
    blob, cont = BLOB, CONTAINER
    missing_blob, missing_cont = "/devstoreaccount1/fast/nothing", "/devstoreaccount1/nowhere"
    steps = []
    for path in (blob, cont):
        steps += [
            lease(path, "acquire", duration=15, proposed=A),
            lease(path, "acquire", duration=15, proposed=B),  # 409 LeaseAlreadyPresent
            lease(path, "renew", lease_id=A, x_ms_client_request_id="client-1"),
            lease(path, "renew", lease_id=B),  # 409 mismatch
            lease(path, "renew"),  # 400 missing lease id
            lease(path, "renew", lease_id="not-a-guid"),
            lease(path, "renew", lease_id=""),  # empty: refused, not ignored
            lease(path, "change", lease_id=A, proposed=C),
            lease(path, "change", lease_id=A),  # missing proposed id
            lease(path, "release", lease_id=B),
            lease(path, "release", lease_id="11111111-2222-3333-4444-555555555555"),
            lease(path, "acquire", duration=-1),
            lease(path, "break", break_period=70),
            lease(path, "break", break_period="soon"),
            lease(path, "break", break_period=10),
            lease(path, "acquire", duration=20),  # 409 breaking
            lease(path, "renew", lease_id="11111111-2222-3333-4444-555555555555"),
            lease(path, "break"),
            lease(path, "acquire", duration=10),  # out of range
            lease(path, "acquire", duration=61),
            lease(path, "acquire", duration="fifteen"),
            lease(path, "acquire"),  # no duration
            lease(path, "acquire", duration=60, x_ms_client_request_id="x" * 1025),
            lease(path, None),  # no action
            lease(path, "steal", lease_id=A),
            lease(path, "ACQUIRE", duration=15, proposed=B),  # case of the action
            lease(path, "release", lease_id=B, user_agent="u" * 600),
            lease(path, "acquire", duration=15, version="2010-01-01"),  # no such version
            lease(path, "acquire", duration=15, version="latest"),
            lease(path, "acquire", duration=15, version=None),
            lease(path, "acquire", duration=15, version="2011-08-18"),  # legacy
            lease(path, "break", version="2011-08-18"),
            lease(path, "break", version="2009-09-19"),
            lease(path, "acquire", duration=15, sign=False),  # 403 NoAuthenticationInformation
            lease(path, "acquire", duration=15, key=OTHER_KEY),  # wrong key
            lease(path, "acquire", duration=15, account=OTHER_ACCOUNT, key=OTHER_KEY),  # another account
            lease(path, "acquire", duration=15, x_ms_date="yesterday"),
            lease(path, "acquire", duration=15, x_ms_date="Mon, 01 Jan 2001 00:00:00 GMT"),
            lease(path, "acquire", duration=15, if_modified_since="Mon, 01 Jan 2001 00:00:00 GMT"),
            lease(path, "acquire", duration=15, if_unmodified_since="Mon, 01 Jan 2001 00:00:00 GMT"),
            lease(path, "acquire", duration=15, if_unmodified_since="not a date"),
            lease(path, "acquire", duration=15, if_match='"0x0000000000000"'),
            lease(path, "acquire", duration=15, if_none_match="*"),
            lease(path, "acquire", duration=15, if_match="\u201cquoted\u201d"),  # not visible ASCII
            lease(path, "acquire", duration=15, proposed=A, query="comp=lease&restype=container&timeout=30"
                  if path == cont else "comp=lease&timeout=30"),
            lease(path, "break", break_period=0),
            lease(path, "acquire", duration=-1, proposed=A),
            lease(path, "release", lease_id=A),
        ]
    steps += [
        lease(missing_blob, "acquire", duration=15),
        lease(missing_cont, "acquire", duration=15),
        lease(missing_cont + "/b", "acquire", duration=15),
        lease("/devstoreaccount1/fast/with\\back", "acquire", duration=15),
        lease("/devstoreaccount1/fast/nul\x00name", "acquire", duration=15),
        lease("/devstoreaccount1/fast/caf\u00e9 blob", "acquire", duration=15),
        *(lease(f"/devstoreaccount1/fast/{name}", "acquire", duration=15) for name in UNICODE_NAMES),
        *(lease(f"/devstoreaccount1/fast/{name}", "break") for name in UNICODE_NAMES),
    ]
    return steps + sas_steps()


def sas_steps():
    """Lease requests under shared access signatures the SDK made (leases/auth/sas.py)."""
    from azure.storage.blob import (AccountSasPermissions, BlobSasPermissions, ContainerSasPermissions,
                                    ResourceTypes, generate_account_sas, generate_blob_sas, generate_container_sas)

    hour = lease_clock.now() + timedelta(hours=1)

    def account(letters, types=ResourceTypes(object=True, container=True), **kw):
        return generate_account_sas(DEV_ACCOUNT, DEV_KEY, types, AccountSasPermissions.from_string(letters),
                                    kw.pop("expiry", hour), **kw)

    def of_blob(letters, name="item.bin", **kw):
        return generate_blob_sas(DEV_ACCOUNT, "fast", name, account_key=DEV_KEY, expiry=kw.pop("expiry", hour),
                                 permission=BlobSasPermissions.from_string(letters), **kw)

    def of_container(letters, **kw):
        return generate_container_sas(DEV_ACCOUNT, "fast", account_key=DEV_KEY, expiry=hour,
                                      permission=ContainerSasPermissions.from_string(letters), **kw)

    def signed(path, action, token, **kw):
        query = ("comp=lease&restype=container&" if path == CONTAINER else "comp=lease&") + token
        return lease(path, action, sign=False, query=query, **kw)

    policy = generate_blob_sas(DEV_ACCOUNT, "fast", "item.bin", account_key=DEV_KEY, policy_id="fast-policy")
    steps = []
    for path in (BLOB, CONTAINER):
        steps += [
            signed(path, "break", account("w"), break_period=0),
            signed(path, "acquire", account("w"), duration=15, proposed=A),
            signed(path, "renew", account("r"), lease_id=A),  # 403 AuthorizationPermissionMismatch
            signed(path, "renew", account("w", types=ResourceTypes(service=True)), lease_id=A),  # resource type
            signed(path, "renew", account("w", expiry=lease_clock.now() - timedelta(seconds=1)), lease_id=A),
            signed(path, "renew", account("w", ip="127.0.0.1"), lease_id=A),  # the client is 10.9.8.7
            signed(path, "renew", account("w", protocol="https"), lease_id=A),
            signed(path, "renew", account("w").replace("sig=", "sig=AB"), lease_id=A),
            signed(path, "renew", account("w", ip="10.9.8.0-10.9.8.9", protocol="https,http"), lease_id=A),
            signed(path, "change", of_container("w"), lease_id=A, proposed=B),  # a container's: blobs only
            signed(path, "break", account("d"), break_period=0),
            signed(path, "acquire", account("w") + "&skoid=x", duration=15),  # user delegation: refused
        ]
    steps += [
        signed(BLOB, "acquire", of_blob("w"), duration=15, proposed=C),
        signed(BLOB, "renew", of_blob("w", name="with/back"), lease_id=C),  # another blob's SAS
        signed(BLOB, "renew", policy, lease_id=C),
        signed(BLOB, "release", of_blob("d"), lease_id=C),  # 403
        signed(BLOB, "release", of_container("rw"), lease_id=C),
    ]
    return steps


@pytest.fixture
def fast_state(db, requests_in_test_transaction):
    services.account_ensure(name=DEV_ACCOUNT, key1=DEV_KEY)
    services.account_ensure(name=OTHER_ACCOUNT, key1=OTHER_KEY)
    actor = Actor(name="test", via="cli")
    services.container_create(account=DEV_ACCOUNT, name="fast", actor=actor)
    services.blob_put(ref=ResourceRef(DEV_ACCOUNT, "fast", "item.bin"), actor=actor, content=b"x")
    services.blob_put(ref=ResourceRef(DEV_ACCOUNT, "fast", "with/back"), actor=actor, content=b"x")
    services.blob_put(ref=ResourceRef(DEV_ACCOUNT, "fast", "caf\u00e9 blob"), actor=actor, content=b"x")
    for name in UNICODE_NAMES:
        services.blob_put(ref=ResourceRef(DEV_ACCOUNT, "fast", name), actor=actor, content=b"x")
    services.container_set_acl(ref=ResourceRef(DEV_ACCOUNT, "fast"), actor=actor, identifiers=[
        services.SignedIdentifier("fast-policy", None, lease_clock.now() + timedelta(hours=1), "rw")])


def test_lean_path_answers_and_records_as_the_general_path(fast_state, monkeypatch):
    statuses: set[int] = set()
    codes: set[str] = set()
    actors: set[str] = set()
    for number, (path, spec) in enumerate(script()):
        (general, general_events), (lean, lean_events), (batched, batched_events) = \
            three_ways(monkeypatch, path, spec, seed=number)
        assert lean == general, f"step {number}: {path} {spec}"
        assert lean_events == general_events, f"step {number}: {path} {spec}"
        assert batched == general, f"step {number}, batched: {path} {spec}"
        assert batched_events == general_events, f"step {number}, batched: {path} {spec}"
        statuses.add(int(general[0][:3]))
        codes.update(value for name, value in general[1] if name == "x-ms-error-code")
        if general[0][:3] in ("200", "201", "202"):
            actors.update(event["actor"].split(":")[0] for event in general_events)
        if number % 7 == 0:
            lease_clock.advance(5)  # leases expire, breaks end, as the script goes on
    # the script did reach successes and refusals of every kind
    assert {200, 201, 202, 400, 403, 404, 409, 412} <= statuses
    assert {"AuthorizationPermissionMismatch", "AuthorizationResourceTypeMismatch", "AuthenticationFailed",
            "AuthorizationSourceIPMismatch", "AuthorizationProtocolMismatch"} <= codes
    assert actors == {"account", "sas"}  # SAS steps were granted too


@pytest.mark.parametrize("query, method, body_length", [
    ("comp=lease&comp=lease", "PUT", 0),  # a parameter twice
    ("comp=Lease", "PUT", 0),
    ("comp=lease&snapshot=2020-01-01T00:00:00Z", "PUT", 0),
    ("comp=%6cease", "PUT", 0),  # percent-encoded
    ("comp=lease&timeout=x", "PUT", 0),
    ("comp=lease&restype=container", "PUT", 0),  # restype on a blob
    ("comp=lease", "GET", 0),
    ("comp=lease", "PUT", 3),  # a body
])
def test_unusual_shapes_go_the_general_way(query, method, body_length):
    env = {"REQUEST_METHOD": method, "PATH_INFO": BLOB, "QUERY_STRING": query, "SCRIPT_NAME": ""}
    if body_length:
        env["CONTENT_LENGTH"] = str(body_length)
    assert azure_lean.takes(env) is None
    assert azure_lean.takes({**env, "REQUEST_METHOD": "PUT", "QUERY_STRING": "comp=lease",
                           "CONTENT_LENGTH": "0"}) == ("devstoreaccount1", "fast", "item.bin")


def test_container_lease_needs_restype_to_be_lean():
    env = {"REQUEST_METHOD": "PUT", "PATH_INFO": CONTAINER, "QUERY_STRING": "comp=lease", "SCRIPT_NAME": ""}
    assert azure_lean.takes(env) is None  # answered by the general path: 400 for the missing restype
    env["QUERY_STRING"] = "restype=container&comp=lease"
    assert azure_lean.takes(env) == ("devstoreaccount1", "fast", None)


@pytest.mark.parametrize("path", [BLOB, CONTAINER])
@pytest.mark.parametrize("action, header, value", [
    ("acquire", "duration", "--15"), ("acquire", "duration", "+15"), ("acquire", "duration", "1" * 40),
    ("acquire", "duration", "1.5"), ("break", "break_period", "--0"), ("break", "break_period", "-" * 9 + "1"),
])
def test_malformed_numbers_are_400_and_recorded_on_every_lease_path(fast_state, monkeypatch, path, action,
                                                                      header, value):
    """A number that looks like digits but is none ("--15") is 400 on every
    lease path, recorded, never a 500 from int()."""
    _, spec = lease(path, action, **{header: value})
    for (status, headers, body), events in three_ways(monkeypatch, path, spec, seed=1):
        assert status.startswith("400") and b"<Code>InvalidHeaderValue</Code>" in body, (status, body)
        assert [(e["action"], e["outcome"], e["error_code"]) for e in events] == \
            [(action, "refused", "InvalidHeaderValue")]


@pytest.mark.django_db(transaction=True)
def test_a_connection_an_outage_broke_is_replaced_before_the_checks():
    """The lean path's checks read the database now and then (an account's
    keys, once remembered long enough): a connection a database outage broke
    (on PostgreSQL the clock watcher shuts every connection of the process
    down) must be replaced before them, as Django's handlers do at a
    request's start. Used by the checks, it failed every request after it
    with "the connection is closed": a worker answered 503 for good after a
    failover."""
    from django.db import connection

    from leases.auth import sharedkey

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's connections, shut down by engines.postgres.drop_all")
    from engines import postgres

    services.account_ensure(name=DEV_ACCOUNT, key1=DEV_KEY)
    services.container_create(account=DEV_ACCOUNT, name="outage", actor=Actor(name="test", via="cli"))
    path = "/devstoreaccount1/outage"
    headers = {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15", "x-ms-proposed-lease-id": A}
    connection.ensure_connection()
    assert postgres.drop_all("a test's outage") >= 1
    sharedkey._known_keys.clear()  # the checks read the account's keys from the database
    target = azure_lean.takes(environ(path, headers))
    assert target is not None  # a lease request the lean path takes
    response = azure_lean.answer(environ(path, headers), target)
    assert response.status_code == 201, response.content
