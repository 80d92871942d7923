"""Who may call the JSON API and what they may do: API tokens, SharedKey,
admin sessions, and model permissions mirroring the admin."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
import requests
from django.core.management import CommandError, call_command
from django.db import connection
from rest_framework.test import APIClient

from leases.models import LeaseEvent
from leases.models.tokens import ApiToken
from tests.api.helpers import (API, DEV_ACCOUNT, DEV_KEY, OTHER_ACCOUNT, OTHER_KEY, lease, make_blob,
    make_container, make_user, shared_key_headers, token_client)

BOX = f"{DEV_ACCOUNT}/box"


def code(response) -> tuple[int, str]:
    return response.status_code, response.json()["code"]


# ------------------------------------------------------------------ tokens

def test_no_credentials_is_401_with_a_challenge(accounts):
    response = APIClient().get(f"{API}/containers/")
    assert code(response) == (401, "NoAuthenticationInformation")
    assert response["WWW-Authenticate"] == 'Bearer realm="leasehold"'


@pytest.mark.parametrize("header", ["Bearer lh_not-a-real-token", "Bearer ", "bearer lh_x"])
def test_an_unknown_token_is_401(accounts, header):
    response = APIClient().get(f"{API}/containers/", HTTP_AUTHORIZATION=header)
    assert code(response) == (401, "AuthenticationFailed")
    assert response.json()["reason"] == "The token is unknown, expired or revoked."


def test_tokens_are_stored_only_as_digests(accounts):
    token, raw = ApiToken.issue(user=make_user("alice"), name="ci")
    assert raw.startswith("lh_") and len(raw) > 40 and token.key_prefix == raw[:12]
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM leases_apitoken")
        assert not any(raw in str(value) or raw[12:] in str(value) for value in cursor.fetchone())


def test_a_revoked_token_stops_working(accounts):
    user = make_user("alice", "leases.view_container")
    client = token_client(user, "ci")
    assert client.get(f"{API}/containers/").status_code == 200
    ApiToken.objects.get(name="ci").revoke()
    assert code(client.get(f"{API}/containers/")) == (401, "AuthenticationFailed")


def test_a_token_expires_on_the_lease_clock(accounts, clock):
    clock.freeze()
    client = token_client(make_user("alice", "leases.view_container"), "ci",
                          expires_at=clock.now() + timedelta(hours=1))
    assert client.get(f"{API}/containers/").status_code == 200
    clock.advance(3600)
    assert code(client.get(f"{API}/containers/")) == (401, "AuthenticationFailed")


def test_a_deactivated_users_tokens_stop_working(accounts):
    user = make_user("alice", "leases.view_container")
    client = token_client(user)
    user.is_active = False
    user.save()
    assert code(client.get(f"{API}/containers/")) == (401, "AuthenticationFailed")


def test_a_permission_taken_away_here_counts_at_once(accounts):
    user = make_user("alice", "leases.view_container")
    client = token_client(user)
    assert client.get(f"{API}/containers/").status_code == 200
    user.user_permissions.clear()
    assert code(client.get(f"{API}/containers/")) == (403, "AuthorizationPermissionMismatch")


def test_changes_made_by_another_process_count_within_the_bound(accounts, monkeypatch):
    """A valid token is remembered with its user's permissions for
    REMEMBER_SECONDS; what this process changes is seen at once (the tests
    above). What another process changes (here an UPDATE and a DELETE that
    tell this process nothing, as another worker's would not): a revoked
    token is refused at once (its state is read at every use), a permission
    taken away counts once the bound has passed."""
    from django.contrib.auth.models import User

    from leases.domain import clock
    from leases.api import authentication

    moment = [1000.0]
    monkeypatch.setattr(authentication, "_monotonic", lambda: moment[0])
    alice, bob = make_user("alice", "leases.view_container"), make_user("bob", "leases.view_container")
    alices, bobs = token_client(alice, "ci"), token_client(bob)
    assert alices.get(f"{API}/containers/").status_code == bobs.get(f"{API}/containers/").status_code == 200
    ApiToken.objects.filter(name="ci").update(revoked_at=clock.now())
    User.user_permissions.through.objects.filter(user=bob).delete()
    assert code(alices.get(f"{API}/containers/")) == (401, "AuthenticationFailed")
    moment[0] += authentication.REMEMBER_SECONDS * 0.9
    assert bobs.get(f"{API}/containers/").status_code == 200
    moment[0] += authentication.REMEMBER_SECONDS * 0.1
    assert code(bobs.get(f"{API}/containers/")) == (403, "AuthorizationPermissionMismatch")


def test_a_remembered_token_still_expires_on_time(accounts, clock):
    clock.freeze()
    client = token_client(make_user("alice", "leases.view_container"), "ci",
                          expires_at=clock.now() + timedelta(seconds=30))
    assert client.get(f"{API}/containers/").status_code == 200  # remembered from here
    clock.advance(30)
    assert code(client.get(f"{API}/containers/")) == (401, "AuthenticationFailed")


def test_the_history_names_the_token(accounts):
    make_container("box")
    client = token_client(make_user("alice", "leases.change_container"), "nightly-job")
    lease(client, "acquire", BOX, {"duration": 15})
    assert LeaseEvent.objects.get().actor == "token:nightly-job"


# ------------------------------------------------------------------ sessions (the admin's login)

def test_an_admin_session_acts_as_its_user(accounts):
    make_container("box")
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(make_user("alice", "leases.change_container", "leases.view_container"))
    assert client.get(f"{API}/containers/{BOX}").status_code == 200
    response = lease(client, "acquire", BOX, {"duration": 15})
    assert code(response) == (403, "AuthorizationPermissionMismatch")  # unsafe method, no CSRF token
    assert response.json()["reason"].startswith("CSRF Failed")
    client = APIClient()
    client.force_login(make_user("bob", "leases.change_container"))
    assert lease(client, "acquire", BOX, {"duration": 15}).status_code == 201
    assert LeaseEvent.objects.get(outcome="success").actor == "user:bob"


# ------------------------------------------------------------------ permissions

# allowed: the status the request answers once the permission lets it through, or False (403)
@pytest.mark.parametrize("perms, method, url, body, allowed", [
    (("leases.view_container",), "get", "containers/", None, 200),
    (("leases.view_blob",), "get", "containers/", None, False),
    (("leases.view_blob",), "get", "blobs/", None, 200),
    (("leases.view_container",), "get", f"containers/{BOX}", None, 200),
    (("leases.view_blob",), "get", f"containers/{BOX}", None, False),
    (("leases.view_blob",), "get", f"blobs/{BOX}/b", None, 200),
    (("leases.add_container",), "put", f"containers/{DEV_ACCOUNT}/newbox", {}, 201),
    (("leases.change_container",), "put", f"containers/{DEV_ACCOUNT}/newbox", {}, False),
    (("leases.add_blob", "leases.change_blob"), "put", f"blobs/{BOX}/new", {}, 201),
    (("leases.add_blob",), "put", f"blobs/{BOX}/new", {}, False),
    (("leases.delete_blob",), "delete", f"blobs/{BOX}/b", None, 202),
    (("leases.delete_container",), "delete", f"blobs/{BOX}/b", None, False),
    (("leases.delete_container",), "delete", f"containers/{BOX}", None, 202),
    (("leases.change_container",), "post", f"leases/acquire/{BOX}", {"duration": 15}, 201),
    (("leases.change_blob",), "post", f"leases/acquire/{BOX}", {"duration": 15}, False),
    (("leases.change_blob",), "post", f"leases/acquire/{BOX}/b", {"duration": 15}, 201),
    (("leases.view_blob",), "post", f"leases/acquire/{BOX}/b", {"duration": 15}, False),
    (("leases.break_blob_lease",), "post", f"leases/break/{BOX}/b", {}, 409),
    (("leases.break_blob_lease",), "post", f"leases/break/{BOX}", {}, False),
    (("leases.break_container_lease",), "post", f"leases/break/{BOX}", {}, 409),
    (("leases.break_container_lease",), "post", f"leases/break/{BOX}/b", {}, False),
    (("leases.change_blob", "leases.change_container"), "post", f"leases/break/{BOX}/b", {}, False),
    (("leases.break_blob_lease",), "post", f"leases/release/{BOX}/b", {"lease_id": "1" * 32}, False),
])
def test_model_permissions_mirror_the_admin(client_with, perms, method, url, body, allowed):
    make_container("box")
    make_blob("box", "b")
    response = getattr(client_with(*perms), method)(f"{API}/{url}", body, format="json")
    if allowed == 409:  # past the permission check to the lease rule: no lease to break
        assert code(response) == (409, "LeaseNotPresentWithLeaseOperation")
    elif allowed:  # the status the action answers
        assert response.status_code == allowed, response.content[:300]
    else:
        assert code(response) == (403, "AuthorizationPermissionMismatch")


def test_permission_is_checked_before_existence(client_with):
    response = client_with("leases.view_blob").get(f"{API}/containers/{DEV_ACCOUNT}/nothing")
    assert code(response) == (403, "AuthorizationPermissionMismatch")


# ------------------------------------------------------------------ SharedKey, over real HTTP

@pytest.fixture
def live(azure_server):
    """The live server with both storage accounts, a container in each."""
    from leases import services

    services.account_ensure(name=OTHER_ACCOUNT, key1=OTHER_KEY)
    make_container("box")
    make_container("theirs", account=OTHER_ACCOUNT)
    return azure_server


def signed(method: str, url: str, *, account: str = DEV_ACCOUNT, key: str = DEV_KEY, body: dict | None = None,
           extra: dict[str, str] | None = None) -> requests.Response:
    """``extra``: more headers, signed with the rest."""
    data = json.dumps(body).encode() if body is not None else b""
    headers = {"Content-Type": "application/json", "Content-Length": str(len(data))} if data else {}
    headers.update(shared_key_headers(method, url, account=account, key=key, headers={**headers, **(extra or {})}))
    return requests.request(method, url, data=data or None, headers=headers, timeout=10)


def test_an_account_signs_with_its_shared_key(live):
    response = signed("POST", f"{live}{API}/leases/acquire/{BOX}", body={"duration": 15},
                      extra={"x-ms-client-request-id": "signed-1"})
    assert response.status_code == 201, response.text
    event = LeaseEvent.objects.get()
    assert (event.actor, event.via, event.client_request_id) == (f"account:{DEV_ACCOUNT}", "api", "signed-1")
    listed = signed("GET", f"{live}{API}/containers/?lease_state=leased")
    assert [c["name"] for c in listed.json()["results"]] == ["box"]


def test_an_account_sees_only_its_own_resources_and_history(live):
    signed("POST", f"{live}{API}/leases/acquire/{BOX}", body={"duration": 15})
    signed("POST", f"{live}{API}/leases/acquire/{OTHER_ACCOUNT}/theirs", account=OTHER_ACCOUNT, key=OTHER_KEY,
           body={"duration": 15})
    assert [c["account"] for c in signed("GET", f"{live}{API}/containers/").json()["results"]] == [DEV_ACCOUNT]
    events = signed("GET", f"{live}{API}/events/").json()["results"]
    assert [e["account"] for e in events] == [DEV_ACCOUNT]
    assert [e["account"] for e in signed("GET", f"{live}{API}/events/?account={OTHER_ACCOUNT}").json()[
        "results"]] == []
    for response in (signed("GET", f"{live}{API}/containers/{OTHER_ACCOUNT}/theirs"),
                     signed("POST", f"{live}{API}/leases/break/{OTHER_ACCOUNT}/theirs", body={}),
                     signed("GET", f"{live}{API}/events/holder/?account={OTHER_ACCOUNT}&container=theirs")):
        assert code(response) == (403, "AuthorizationPermissionMismatch")


def test_a_bad_signature_is_401_with_the_reason(live):
    response = signed("GET", f"{live}{API}/containers/", key=OTHER_KEY)
    assert code(response) == (401, "AuthenticationFailed")
    assert "is not the same as any computed signature" in response.json()["reason"]
    stale = signed("GET", f"{live}{API}/containers/", extra={"x-ms-date": "Mon, 01 Jan 2024 00:00:00 GMT"})
    assert code(stale) == (401, "AuthenticationFailed")
    assert "too old" in stale.json()["reason"]


# ------------------------------------------------------------------ manage.py leasehold_token

def run(*args) -> str:
    out = io.StringIO()
    call_command("leasehold_token", *args, stdout=out)
    return out.getvalue()


def test_token_command_creates_lists_and_revokes(accounts, clock):
    clock.freeze()
    make_user("alice", "leases.view_container")
    raw = run("create", "--user", "alice", "--name", "deployer", "--expires-in-days", "30").strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get(f"{API}/containers/").status_code == 200
    listing = run("list")
    assert listing.startswith(f"deployer\talice\t{raw[:12]}...\texpires ") and raw not in listing
    assert run("revoke", "deployer") == "revoked deployer\n"
    run("create", "--user", "alice", "--name", "forever")
    run("create", "--user", "alice", "--name", "shortlived", "--expires-in-days", "1")
    clock.advance(86400)
    statuses = {line.split("\t")[0]: line.split("\t")[3].split()[0] for line in run("list").splitlines()}
    assert statuses == {"deployer": "revoked", "forever": "active", "shortlived": "expired"}
    assert client.get(f"{API}/containers/").status_code == 401


@pytest.mark.parametrize("args, message", [
    (("create", "--user", "nobody", "--name", "x"), "no user 'nobody'"),
    (("create", "--user", "alice", "--name", "has space"), "Token names use letters"),
    (("create", "--user", "alice", "--name", "taken"), "already exists"),
    (("create", "--user", "alice", "--name", "x", "--expires-in-days", "0"), "at least 1"),
    (("revoke", "nothing"), "no token 'nothing'"),
])
def test_token_command_refusals(accounts, args, message):
    ApiToken.issue(user=make_user("alice"), name="taken")
    with pytest.raises(CommandError, match=message):
        run(*args)
