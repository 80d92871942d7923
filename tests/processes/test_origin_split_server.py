"""LEASEHOLD_ADMIN_HOSTS on the production server (docs/decisions/0038): lease requests the lean
paths would batch (the Azure door's PUT comp=lease, the JSON API's Bearer POST) are refused on the
wrong host as the general path refuses them, and served on the right one; Get Blob, sandboxed, on
the blob host only; the admin on its host only. ``localhost`` is the admin's host, ``127.0.0.1``
the tenants'. In-process, every kind of request: tests/serving/test_origin_split.py."""

from __future__ import annotations

import uuid

import pytest
import requests

from tests import azure_raw
from tests.processes.test_processes import Server
from tests.server_process import admin_token

pytestmark = pytest.mark.processes


def test_the_production_server_keeps_each_side_on_its_hosts(tmp_path):
    server = Server(tmp_path, workers=1).migrate()
    server.env["LEASEHOLD_ADMIN_HOSTS"] = "localhost"
    token = admin_token(server.db, server.env)
    server.start()
    try:
        blobs, admin = server.url, server.url.replace("127.0.0.1", "localhost")
        bearer = {"Authorization": f"Bearer {token}"}
        assert azure_raw.signed("PUT", blobs, "/devstoreaccount1/split?restype=container").status_code == 201
        for name in ("azure", "api"):
            assert azure_raw.signed("PUT", blobs, f"/devstoreaccount1/split/{name}", body=b"<script>1</script>",
                                    headers={"x-ms-blob-type": "BlockBlob",
                                             "x-ms-blob-content-type": "text/html"}).status_code == 201

        # The Azure door: refused on the admin's host, lean lease path included; served on its own.
        lease_id = str(uuid.uuid4())
        refused = azure_raw.lease(admin, "/devstoreaccount1/split/azure", "acquire", duration=15,
                                  proposed_lease_id=lease_id)
        assert (refused.status_code, azure_raw.error_code(refused)) == (400, "InvalidUri"), refused.text
        assert azure_raw.signed("GET", admin, "/devstoreaccount1/split/azure").status_code == 400
        taken = azure_raw.lease(blobs, "/devstoreaccount1/split/azure", "acquire", duration=15,
                                proposed_lease_id=lease_id)
        assert (taken.status_code, taken.headers["x-ms-lease-id"]) == (201, lease_id)
        read = azure_raw.signed("GET", blobs, "/devstoreaccount1/split/azure")
        assert (read.status_code, read.headers["Content-Security-Policy"]) == (200, "sandbox")

        # The JSON API's lean lease path: refused on the blob host, served on the admin's.
        url = "/api/v1/leases/acquire/devstoreaccount1/split/api"
        elsewhere = requests.post(blobs + url, json={"duration": 15}, headers=bearer, timeout=30)
        assert (elsewhere.status_code, elsewhere.json()["code"]) == (404, "ResourceNotFound"), elsewhere.text
        acquired = requests.post(admin + url, json={"duration": 15}, headers=bearer, timeout=30)
        assert acquired.status_code == 201, acquired.text
        export = requests.get(blobs + "/api/v1/events/export/", headers=bearer, timeout=30)  # a long read
        assert export.status_code == 404

        # The admin: on its host only; health on both.
        assert requests.get(admin + "/admin/login/", timeout=30).status_code == 200
        assert requests.get(blobs + "/admin/login/", timeout=30).status_code == 404
        assert requests.get(blobs + "/health/live", timeout=30).status_code == 200
        assert requests.get(admin + "/health/live", timeout=30).status_code == 200
    finally:
        server.kill()
