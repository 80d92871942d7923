"""Bearer tokens through the production server over https: the official SDK with a TokenCredential
that gets its tokens from the real OpenID provider (tests/oidc_provider.py, its own process)
creates, uploads and leases, and the history names the principal; a reader's lease is refused with
the SDK's AuthorizationPermissionMismatch; an expired token is answered with the challenge the SDK
follows to a new token; a flood of made-up key ids at the admission check fetches the provider's
keys a bounded number of times per worker, answering each 401."""

from __future__ import annotations

import sqlite3
import time

import pytest
import requests
from azure.core.credentials import AccessToken
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobServiceClient

from leases.auth.bearer import fingerprint
from leases.management.commands.leasehold_setup import DEV_ACCOUNT
from tests.oidc_provider import OidcProvider
from tests.processes.test_tls import _certificates
from tests.sdk_errors import sdk_error_code
from tests.server_process import Instance, prepare

pytestmark = pytest.mark.processes
WORKERS = 2
AUDIENCE = "https://storage.azure.com"


class ProviderCredential:
    """A TokenCredential that asks the provider's token endpoint (client credentials), as
    ClientSecretCredential asks Entra ID's; ``stale`` tokens are handed out first."""

    def __init__(self, provider: OidcProvider, client_id: str, *, stale: list[str] | None = None):
        self.provider, self.client_id, self.stale = provider, client_id, list(stale or [])
        self.scopes: list[tuple] = []

    def get_token(self, *scopes, **kwargs) -> AccessToken:
        self.scopes.append(scopes)
        if self.stale:
            return AccessToken(self.stale.pop(0), int(time.time()) + 600)  # the SDK believes it fresh
        return AccessToken(self.provider.token(self.client_id, scopes[0]), int(time.time()) + 600)


@pytest.fixture(scope="module")
def bearer_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bearer")
    ca, cert, key = _certificates(tmp)
    database = tmp / "leasehold.sqlite3"
    prepare(str(database), tmp)
    with OidcProvider() as provider:
        provider.client("writer", claims={"roles": ["Leases.Write"], "name": "Nightly job"})
        provider.client("reader", claims={"roles": ["Leases.Read"]})
        server = Instance(str(database), tmp, "server", workers=WORKERS)
        server.env.update(LEASEHOLD_TLS_CERT=cert, LEASEHOLD_TLS_KEY=key, LEASEHOLD_OIDC_ISSUER=provider.issuer,
                          LEASEHOLD_OIDC_ROLES="roles:Leases.Write=contributor roles:Leases.Read=reader")
        server.url = server.url.replace("http://", "https://")
        server.start()
        try:
            yield server, database, ca, provider
        finally:
            server.stop()


def _service(server, ca, credential) -> BlobServiceClient:
    return BlobServiceClient(f"{server.url}/{DEV_ACCOUNT}", credential=credential, connection_verify=ca,
                             retry_total=0)


def test_the_sdk_leases_with_a_token_from_the_provider(bearer_server):
    server, database, ca, provider = bearer_server
    credential = ProviderCredential(provider, "writer")
    container = _service(server, ca, credential).create_container("bearer")
    blob = container.upload_blob("job.lock", b"x")
    lease = blob.acquire_lease(lease_duration=15)
    lease.renew()
    assert blob.get_blob_properties().lease.state == "leased"
    lease.release()
    assert credential.scopes[0] == (AUDIENCE + "/.default",)
    with sqlite3.connect(database) as conn:
        actors = {row[0] for row in conn.execute(
            "SELECT actor FROM leases_leaseevent WHERE container = 'bearer' AND action IN ('acquire', 'renew', "
            "'release')")}
    assert actors == {f"bearer:{fingerprint(provider.issuer)}:writer (Nightly job)"}


def test_a_reader_may_read_but_not_lease(bearer_server):
    server, _, ca, provider = bearer_server
    writer = _service(server, ca, ProviderCredential(provider, "writer")).get_container_client("readable")
    writer.create_container()
    writer.upload_blob("doc", b"content")
    blob = _service(server, ca, ProviderCredential(provider, "reader")).get_blob_client("readable", "doc")
    assert blob.download_blob().readall() == b"content"
    with pytest.raises(HttpResponseError) as refused:
        blob.acquire_lease(lease_duration=15)
    assert refused.value.status_code == 403 and sdk_error_code(refused.value) == "AuthorizationPermissionMismatch"
    assert blob.get_blob_properties().lease.state == "available"


def test_an_expired_token_gets_the_challenge_and_the_sdk_a_new_token(bearer_server):
    server, _, ca, provider = bearer_server
    expired = provider.mint(AUDIENCE, {"sub": "writer", "roles": ["Leases.Write"]},
                            override={"exp": int(time.time()) - 600, "nbf": int(time.time()) - 1200})
    credential = ProviderCredential(provider, "writer", stale=[expired])
    service = _service(server, ca, credential)
    service.create_container("challenged")  # 401 with WWW-Authenticate, then again with a new token
    assert len(credential.scopes) == 2 and credential.scopes[1] == (AUDIENCE + "/.default",)
    # The refusal itself, as Azure sends it.
    answer = requests.put(f"{server.url}/{DEV_ACCOUNT}/other?restype=container", verify=ca, timeout=30,
                          headers={"Authorization": f"Bearer {expired}", "x-ms-version": "2021-08-06"})
    assert answer.status_code == 401 and answer.headers["x-ms-error-code"] == "InvalidAuthenticationInfo"
    assert answer.headers["WWW-Authenticate"] == (
        f"Bearer authorization_uri={provider.issuer}/authorize resource_id={AUDIENCE}")


def test_a_flood_of_made_up_key_ids_is_refused_at_admission_with_bounded_fetches(bearer_server):
    server, _, ca, provider = bearer_server
    fetched = provider.control("stats")["jwks_fetches"]
    session = requests.Session()
    session.trust_env = False  # REQUESTS_CA_BUNDLE would win over session.verify
    session.verify = ca
    for n in range(60):
        token = provider.mint(AUDIENCE, {"sub": "writer", "roles": ["Leases.Write"]}, kid=f"made-up-{n}")
        answer = session.put(f"{server.url}/{DEV_ACCOUNT}/bearer?comp=lease&restype=container", timeout=30,
                             headers={"Authorization": f"Bearer {token}", "x-ms-version": "2021-08-06",
                                      "x-ms-lease-action": "acquire", "x-ms-lease-duration": "15"})
        # Refused (401), or past the address's allowance for refusals (503 ServerBusy): never leased.
        assert answer.status_code in (401, 503), answer.text
    # Each worker keeps its own keys: at most its bucket (3/minute, burst 3) each.
    assert provider.control("stats")["jwks_fetches"] - fetched <= 3 * WORKERS
