"""Storage accounts as the configuration reference documents them
(docs/reference/configuration.md): LEASEHOLD_ACCOUNTS with a second key,
and LEASEHOLD_DEV_ACCOUNT=off, set in the environment of `make run`'s
commands and the production server. Key rotation is what a second key is
for: a client moved to key2 and one still on key1 are both served, on both
doors (Azure SharedKey, and the JSON API's SharedKey); a key of neither is
refused, and without the development account its well-known key opens
nothing."""

from __future__ import annotations

import base64
import json

import pytest
import requests

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests import azure_raw
from tests.api.helpers import shared_key_headers

from .test_processes import Server

pytestmark = pytest.mark.processes

ACCOUNT = "rotating"
KEY1, KEY2, OTHER = (base64.b64encode(bytes([n]) * 64).decode() for n in (1, 2, 3))


def _api(base: str, method: str, path: str, *, key: str, body: dict | None = None) -> requests.Response:
    url = f"{base}{path}"
    data = json.dumps(body).encode() if body is not None else b""
    headers = {"Content-Type": "application/json", "Content-Length": str(len(data))} if data else {}
    headers.update(shared_key_headers(method, url, account=ACCOUNT, key=key, headers=headers))
    return requests.request(method, url, data=data or None, headers=headers, timeout=30)


def test_both_keys_of_an_account_are_served_on_both_doors_and_the_dev_account_can_be_off(tmp_path):
    server = Server(tmp_path, workers=1)
    server.env.update(LEASEHOLD_ACCOUNTS=f"{ACCOUNT}:{KEY1}:{KEY2}", LEASEHOLD_DEV_ACCOUNT="off")
    server.migrate().start()
    try:
        base = server.url
        # Azure door: a container by key2, a blob by key1, a lease by key2, renewed by key1
        assert azure_raw.signed("PUT", base, f"/{ACCOUNT}/keys?restype=container", account=ACCOUNT,
                                key=KEY2).status_code == 201
        assert azure_raw.signed("PUT", base, f"/{ACCOUNT}/keys/b", account=ACCOUNT, key=KEY1, body=b"x",
                                headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
        held = azure_raw.signed("PUT", base, f"/{ACCOUNT}/keys/b?comp=lease", account=ACCOUNT, key=KEY2,
                                headers={"x-ms-lease-action": "acquire", "x-ms-lease-duration": "60"})
        assert held.status_code == 201, held.text
        lease_id = held.headers["x-ms-lease-id"]
        renewed = azure_raw.signed("PUT", base, f"/{ACCOUNT}/keys/b?comp=lease", account=ACCOUNT, key=KEY1,
                                   headers={"x-ms-lease-action": "renew", "x-ms-lease-id": lease_id})
        assert renewed.status_code == 200, renewed.text
        refused = azure_raw.signed("GET", base, f"/{ACCOUNT}/keys/b", account=ACCOUNT, key=OTHER)
        assert (refused.status_code, azure_raw.error_code(refused)) == (403, "AuthenticationFailed")
        # JSON API door, SharedKey: key2 and key1 both, a key of neither refused
        broken = _api(base, "POST", f"/api/v1/leases/break/{ACCOUNT}/keys/b", key=KEY2, body={"break_period": 0})
        assert broken.status_code == 202, broken.text
        listed = _api(base, "GET", "/api/v1/containers/", key=KEY1)
        assert listed.status_code == 200 and [c["name"] for c in listed.json()["results"]] == ["keys"], listed.text
        taken = _api(base, "POST", f"/api/v1/leases/acquire/{ACCOUNT}/keys/b", key=KEY1, body={"duration": 15})
        assert taken.status_code == 201, taken.text
        wrong = _api(base, "GET", "/api/v1/containers/", key=OTHER)
        assert (wrong.status_code, wrong.json()["code"]) == (401, "AuthenticationFailed"), wrong.text
        # LEASEHOLD_DEV_ACCOUNT=off: no devstoreaccount1, so its published key opens nothing
        dev = azure_raw.signed("PUT", base, f"/{DEV_ACCOUNT}/box?restype=container", account=DEV_ACCOUNT,
                               key=DEV_KEY)
        assert (dev.status_code, azure_raw.error_code(dev)) == (403, "AuthenticationFailed"), (dev.status_code, dev.text)
    finally:
        server.kill()
    assert "Traceback" not in server.output(), server.output()[-2000:]
