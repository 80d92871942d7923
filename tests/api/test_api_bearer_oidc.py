"""The JSON API takes the same OpenID Connect bearer tokens as the Azure door, with the same roles,
beside its own ``lh_`` tokens: tokens from the real provider process (tests/oidc_provider.py). The
lean lease path (leases/api/lean.py) takes a contributor's lease request and answers and records
it exactly as the DRF view; a reader's is handed to the view, which refuses it (403); a token that
does not hold is 401 AuthenticationFailed with the reason, counted in /metrics by door and reason;
the collections and the history are no data role's."""

from __future__ import annotations

import time

import pytest
from rest_framework.test import APIClient

from leases.auth import bearer
from leases.conf.oidc import Oidc, rules
from leases.operations import metrics
from tests.api.test_api_lean import both_ways, environ
from tests.oidc_provider import OidcProvider

from .helpers import API, DEV_ACCOUNT, make_blob, make_container

pytestmark = pytest.mark.also_postgres
AUDIENCE = "https://storage.azure.com"
A = "ca761232-ed42-11ce-bacd-00aa0057b223"
BLOB = f"{DEV_ACCOUNT}/box/a.txt"


@pytest.fixture(scope="module")
def provider():
    with OidcProvider() as found:
        found.client("writer", claims={"roles": ["Leases.Write"], "name": "Nightly job"})
        found.client("reader", claims={"roles": ["Leases.Read"]})
        yield found


@pytest.fixture
def tokens(provider, settings, accounts):
    settings.LEASEHOLD_OIDC = Oidc(issuer=provider.issuer, audiences=(AUDIENCE,), leeway=30, refetch=(1 / 60, 3.0),
                                   rules=rules("roles:Leases.Write=contributor roles:Leases.Read=reader"))
    bearer._sets.clear()
    bearer._remembered.clear()
    make_container("box")
    make_blob("box", "a.txt", b"hello")
    return {name: provider.token(name, AUDIENCE + "/.default") for name in ("writer", "reader")}


def client(token: str) -> APIClient:
    found = APIClient()
    found.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return found


@pytest.fixture
def lean(tokens, requests_in_test_transaction):
    return tokens


def test_the_lean_path_takes_a_contributor_s_token_and_answers_as_the_view(lean, monkeypatch, provider):
    for number, (action, body) in enumerate((("acquire", {"duration": 15, "proposed_lease_id": A}),
                                             ("renew", {"lease_id": A}), ("release", {"lease_id": A}))):
        (view, lean_side), served = both_ways(monkeypatch, lambda: environ(action, BLOB, body, token=lean["writer"]),
                                              seed=number)
        assert view == lean_side, action
        assert served.taken and not served.handed_over, action
        answer, events = lean_side
        assert answer[0][:1] == "2", answer
        assert [event["actor"] for event in events] == [
            f"bearer:{bearer.fingerprint(provider.issuer)}:writer (Nightly job)"], events


def test_a_reader_s_lease_request_is_handed_to_the_view_which_refuses_it(lean, monkeypatch):
    (view, lean_side), served = both_ways(
        monkeypatch, lambda: environ("acquire", BLOB, {"duration": 15}, token=lean["reader"]), seed=7)
    assert view == lean_side and served.handed_over
    assert view[0][0].startswith("403") and view[1] == []  # nothing recorded: refused before the service


def test_a_reader_reads_and_a_contributor_writes(tokens):
    assert client(tokens["reader"]).get(f"{API}/blobs/{BLOB}").status_code == 200
    assert client(tokens["reader"]).put(f"{API}/containers/{DEV_ACCOUNT}/made").status_code == 403
    assert client(tokens["writer"]).put(f"{API}/containers/{DEV_ACCOUNT}/made").status_code in (200, 201)
    # The collections and the history are not a data role's.
    for path in ("blobs/", "containers/", "events/"):
        assert client(tokens["writer"]).get(f"{API}/{path}").status_code == 403, path


@pytest.mark.parametrize("case, reason", [("expired", "expired"), ("another audience", "audience"),
                                          ("unpublished key", "unknown_key")])
def test_a_token_that_does_not_hold_is_401_counted_by_reason(tokens, provider, case, reason):
    claims = {"sub": "writer", "roles": ["Leases.Write"]}
    token = {"expired": lambda: provider.mint(AUDIENCE, claims, override={"exp": int(time.time()) - 120}),
             "another audience": lambda: provider.mint("https://vault.azure.net", claims),
             "unpublished key": lambda: provider.mint(AUDIENCE, claims, unpublished=True)}[case]()
    counter = metrics.BEARER_REFUSALS.labels("api", reason)
    before = counter._value.get()
    answer = client(token).post(f"{API}/leases/acquire/{BLOB}", {"duration": 15}, format="json")
    assert answer.status_code == 401, answer.content
    assert answer.json()["code"] == "AuthenticationFailed"
    assert counter._value.get() - before == 1
