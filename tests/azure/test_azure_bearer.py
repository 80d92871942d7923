"""OAuth bearer tokens on the Azure door, from a real OpenID provider in its own process
(tests/oidc_provider.py), through the live in-process server with raw requests (the SDK over https:
tests/processes/test_bearer_tls.py): the principal in the history, Azure's refusals for an expired
token, another audience, another issuer, a key the provider never published, an old x-ms-version;
roles (a reader may read but not lease or write; a role on one container); key rotation; a flood of
unknown key ids fetching the JWKS a bounded number of times; refusals counted in /metrics."""

from __future__ import annotations

import time

import jwt
import pytest

from leases.auth import bearer
from leases.conf.oidc import Oidc, rules
from leases.management.commands.leasehold_setup import DEV_ACCOUNT
from leases.models import LeaseEvent
from tests import azure_raw
from tests.oidc_provider import OidcProvider
from tests.serving.test_metrics import bearer as api_token, scrape, value

AUDIENCE = "https://storage.azure.com"
SCOPE = AUDIENCE + "/.default"
RULES = (f"roles:Leases.Write=contributor roles:Leases.Read=reader groups:g-jobs=contributor@{DEV_ACCOUNT}/jobs "
         "roles:Leases.Own=owner@otheraccount")
BLOB = f"/{DEV_ACCOUNT}/jobs/nightly"


@pytest.fixture(scope="module")
def provider():
    with OidcProvider() as found:
        found.client("writer", claims={"roles": ["Leases.Write"], "name": "Nightly job"})
        found.client("reader", claims={"roles": ["Leases.Read"]})
        found.client("jobs-only", claims={"groups": ["g-jobs"], "app_displayname": "Jobs app"})
        found.client("nobody", claims={"roles": ["Something.Else"]})
        yield found


@pytest.fixture
def oidc(provider, settings):
    settings.LEASEHOLD_OIDC = Oidc(issuer=provider.issuer, audiences=(AUDIENCE,), rules=rules(RULES), leeway=30,
                                   refetch=(1 / 60, 3.0))
    bearer._sets.clear()
    bearer._remembered.clear()
    return provider


@pytest.fixture
def blob(azure_server):
    assert azure_raw.signed("PUT", azure_server, f"/{DEV_ACCOUNT}/jobs?restype=container").status_code == 201
    assert azure_raw.signed("PUT", azure_server, BLOB, headers={"x-ms-blob-type": "BlockBlob"},
                            body=b"x").status_code == 201
    return azure_server


def call(base: str, method: str, path: str, token: str, *, version: str = "2021-08-06", **headers):
    return azure_raw.signed(method, base, path, headers={"Authorization": f"Bearer {token}", **headers},
                            version=version, sign=False)


def acquire(base: str, token: str, path: str = BLOB, **headers):
    return call(base, "PUT", path + "?comp=lease", token, **{"x-ms-lease-action": "acquire",
                                                               "x-ms-lease-duration": "15", **headers})


def lease_state(base: str) -> str:
    return azure_raw.signed("HEAD", base, BLOB).headers["x-ms-lease-state"]


def refused(response, detail: str) -> None:
    assert response.status_code == 401, response.text
    assert azure_raw.error_code(response) == "InvalidAuthenticationInfo"
    assert f"<AuthenticationErrorDetail>{detail}</AuthenticationErrorDetail>" in response.text
    assert "Please refer to the information in the www-authenticate header." in response.text
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer authorization_uri=") and challenge.endswith(f"resource_id={AUDIENCE}")


def test_a_token_from_the_issuer_leases_and_the_history_names_its_principal(oidc, blob):
    token = oidc.token("writer", SCOPE)
    answer = acquire(blob, token)
    assert answer.status_code == 201, answer.text
    assert lease_state(blob) == "leased"
    event = LeaseEvent.objects.filter(action="acquire").order_by("-id").first()
    assert event.actor == f"bearer:{bearer.fingerprint(oidc.issuer)}:writer (Nightly job)"
    assert token not in event.actor
    # Reads and writes too: what the role allows.
    assert call(blob, "GET", BLOB, token).content == b"x"
    assert call(blob, "PUT", f"/{DEV_ACCOUNT}/jobs/other", token, **{"x-ms-blob-type": "BlockBlob"}).status_code == 201


@pytest.mark.parametrize("case, detail", [
    ("expired", "Lifetime validation failed. The token is expired."),
    ("not yet valid", "Lifetime validation failed. The token is not yet valid."),
    ("another audience", "Audience validation failed. Audience did not match."),
    ("another issuer", "Issuer validation failed. Issuer did not match."),
    ("an unpublished key, a published key id", "Signature validation failed. Signature is invalid."),
    ("an unpublished key", "Signature validation failed. The signing key was not found."),
    ("not a JWT", "The token is not a well-formed JWT."),
])
def test_a_token_that_does_not_hold_is_refused_as_azure_does_and_changes_nothing(oidc, blob, case, detail):
    now = int(time.time())
    claims = {"sub": "writer", "roles": ["Leases.Write"]}
    good = oidc.token("writer", SCOPE)
    assert call(blob, "GET", BLOB, good).status_code == 200  # the issuer's keys known: each check is reached
    kid = jwt.get_unverified_header(good)["kid"]
    token = {
        "expired": lambda: oidc.mint(AUDIENCE, claims, override={"exp": now - 120, "nbf": now - 900}),
        "not yet valid": lambda: oidc.mint(AUDIENCE, claims, override={"nbf": now + 300}),
        "another audience": lambda: oidc.token("writer", "https://vault.azure.net/.default"),
        "another issuer": lambda: oidc.mint(AUDIENCE, claims, override={"iss": "https://elsewhere.example"}),
        "an unpublished key, a published key id": lambda: oidc.mint(AUDIENCE, claims, unpublished=True, kid=kid),
        "an unpublished key": lambda: oidc.mint(AUDIENCE, claims, unpublished=True),
        "not a JWT": lambda: "lh_not-a-jwt",
    }[case]()
    before = scrape(blob, api_token(superuser=True))
    events = LeaseEvent.objects.count()
    refused(acquire(blob, token), detail)
    assert lease_state(blob) == "available" and LeaseEvent.objects.count() == events
    after = scrape(blob, api_token(superuser=True, name="scraper2"))
    counted = {k[1]: v - before.get(k, 0.0) for k, v in after.items() if k[0] == "leasehold_bearer_refusals_total"}
    assert sum(counted.values()) == 1, counted


def test_refusals_are_counted_by_reason(oidc, blob):
    before = scrape(blob, api_token(superuser=True))
    expired = oidc.mint(AUDIENCE, {"sub": "x"}, override={"exp": int(time.time()) - 120})
    for _ in range(2):
        refused(acquire(blob, expired), "Lifetime validation failed. The token is expired.")
    after = scrape(blob, api_token(superuser=True, name="scraper2"))
    name, labels = "leasehold_bearer_refusals_total", {"door": "azure", "reason": "expired"}
    assert value(after, name, **labels) - value(before, name, **labels) == 2


def test_bearer_tokens_need_x_ms_version_2017_11_09(oidc, blob):
    token = oidc.token("writer", SCOPE)
    answer = acquire(blob, token, version="2017-07-29")
    assert answer.status_code == 403 and azure_raw.error_code(answer) == "AuthenticationFailed"
    assert "Authentication scheme Bearer is not supported in this version." in answer.text
    assert acquire(blob, token, version="2017-11-09").status_code == 201


def test_without_an_issuer_a_bearer_token_is_refused(oidc, blob, settings):
    token = oidc.token("writer", SCOPE)
    settings.LEASEHOLD_OIDC = None
    answer = acquire(blob, token)
    assert answer.status_code == 401 and azure_raw.error_code(answer) == "InvalidAuthenticationInfo"
    assert answer.headers["WWW-Authenticate"] == "Bearer"


def test_a_reader_may_read_but_not_lease_or_write(oidc, blob):
    token = oidc.token("reader", SCOPE)
    assert call(blob, "GET", BLOB, token).content == b"x"
    assert call(blob, "GET", f"/{DEV_ACCOUNT}/jobs?restype=container&comp=list", token).status_code == 200
    events = LeaseEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
    for answer in (acquire(blob, token),
                   call(blob, "PUT", BLOB, token, **{"x-ms-blob-type": "BlockBlob"}),
                   call(blob, "DELETE", BLOB, token),
                   call(blob, "PUT", BLOB + "?comp=lease", token, **{"x-ms-lease-action": "break"})):
        assert answer.status_code == 403, answer.text
        assert azure_raw.error_code(answer) == "AuthorizationPermissionMismatch"
    assert lease_state(blob) == "available"
    assert call(blob, "GET", BLOB, token).content == b"x"
    assert not LeaseEvent.objects.filter(id__gt=events, outcome="ok").exclude(action="create").exists()


def test_a_role_on_one_container_is_that_container_s_alone(oidc, blob):
    token = oidc.token("jobs-only", SCOPE)
    assert azure_raw.signed("PUT", blob, f"/{DEV_ACCOUNT}/other?restype=container").status_code == 201
    assert acquire(blob, token).status_code == 201
    answer = call(blob, "PUT", f"/{DEV_ACCOUNT}/other/x", token, **{"x-ms-blob-type": "BlockBlob"})
    assert answer.status_code == 403 and azure_raw.error_code(answer) == "AuthorizationPermissionMismatch"
    # Listing the account's containers is the account's, not the container's.
    assert call(blob, "GET", f"/{DEV_ACCOUNT}?comp=list", token).status_code == 403
    # A principal no rule names may do nothing.
    nobody = oidc.token("nobody", SCOPE)
    assert call(blob, "GET", BLOB, nobody).status_code == 403


def test_key_rotation_at_the_provider(oidc, blob):
    old = oidc.token("writer", SCOPE)
    assert call(blob, "GET", BLOB, old).status_code == 200
    oidc.control("rotate")  # the old key still published
    new = oidc.token("writer", SCOPE)
    assert jwt.get_unverified_header(new)["kid"] != jwt.get_unverified_header(old)["kid"]
    assert call(blob, "GET", BLOB, new).status_code == 200  # the new key fetched
    assert call(blob, "GET", BLOB, old).status_code == 200
    oidc.control("rotate", drop=True, alg="ES256")  # only the newest published, an EC key
    newest = oidc.token("writer", SCOPE)
    assert jwt.get_unverified_header(newest)["alg"] == "ES256"
    assert call(blob, "GET", BLOB, newest).status_code == 200
    refused(call(blob, "GET", BLOB, old), "Signature validation failed. The signing key was not found.")


def test_a_flood_of_unknown_key_ids_fetches_the_keys_a_bounded_number_of_times(oidc, blob):
    assert call(blob, "GET", BLOB, oidc.token("writer", SCOPE)).status_code == 200
    fetched = oidc.control("stats")["jwks_fetches"]
    claims = {"sub": "writer", "roles": ["Leases.Write"]}
    for n in range(40):
        token = oidc.mint(AUDIENCE, claims, kid=f"made-up-{n}")
        refused(acquire(blob, token), "Signature validation failed. The signing key was not found.")
    # The bucket holds 3 fetches (refetch=1/minute, burst 3), one of them taken by the first token.
    assert oidc.control("stats")["jwks_fetches"] - fetched <= 2


def test_the_admission_check_never_fetches_keys_on_the_event_loop(oidc, blob):
    from leases.auth import principals

    token = oidc.token("writer", SCOPE)
    environ = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_X_MS_VERSION": "2021-08-06",
               "PATH_INFO": BLOB, "QUERY_STRING": "comp=lease", "REQUEST_METHOD": "PUT"}
    fetched = oidc.control("stats")["jwks_fetches"]
    with pytest.raises(principals.Unreadable):  # keys to fetch: the admission thread's to do
        principals.identify(dict(environ), door="azure", may_look_up=lambda: True, may_read=False)
    with pytest.raises(principals.Refused) as throttled:  # the address's allowance used up: no fetch at all
        principals.identify(dict(environ), door="azure", may_look_up=lambda: False, may_read=True)
    assert throttled.value.throttled
    assert oidc.control("stats")["jwks_fetches"] == fetched
    key = f"bearer:{bearer.fingerprint(oidc.issuer)}:writer"
    assert principals.identify(dict(environ), door="azure", may_look_up=lambda: True) == key  # fetched here
    assert principals.identify(dict(environ), door="azure", may_look_up=lambda: False, may_read=False) == key
    expired = oidc.mint(AUDIENCE, {"sub": "writer"}, override={"exp": int(time.time()) - 120})
    with pytest.raises(principals.Refused) as refusal:
        principals.identify({**environ, "HTTP_AUTHORIZATION": f"Bearer {expired}"}, door="azure",
                            may_look_up=lambda: True, may_read=False)
    assert (refusal.value.status, refusal.value.code, refusal.value.bearer) == (401, "InvalidAuthenticationInfo",
                                                                                "expired")
