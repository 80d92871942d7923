"""Run by tests/azure/test_azure_legacy_sdk.py under the legacy Python SDK
(azure-storage-blob 1.x, x-ms-version 2018-03-28, which `make test-setup`
installs into .venv/legacy-sdk): the calls a lease client of that SDK makes,
one JSON line each, ``{"step": ..., "ok": true}`` or the error it raised."""

import json
import sys

from azure.storage.blob import BlockBlobService  # type: ignore[attr-defined]  # the 1.x SDK

url, account, key = sys.argv[1:4]
svc = BlockBlobService(account_name=account, account_key=key, custom_domain=f"{url}/{account}")
leases: dict[str, str] = {}


def steps():
    yield "create_container", lambda: svc.create_container("legacy", fail_on_exist=True)
    yield "container_exists", lambda: svc.exists("legacy")
    yield "get_container_properties", lambda: svc.get_container_properties("legacy").properties.etag
    yield "set_container_metadata", lambda: svc.set_container_metadata("legacy", {"owner": "legacy"})
    yield "get_container_metadata", lambda: svc.get_container_metadata("legacy")
    yield "acquire_container_lease", lambda: leases.setdefault("c", svc.acquire_container_lease("legacy", 15))
    yield "renew_container_lease", lambda: svc.renew_container_lease("legacy", leases["c"])
    yield "release_container_lease", lambda: svc.release_container_lease("legacy", leases["c"])
    yield "create_blob", lambda: svc.create_blob_from_bytes("legacy", "job", b"payload")
    yield "get_blob_properties", lambda: svc.get_blob_properties("legacy", "job").properties.content_settings.content_type
    yield "acquire_blob_lease", lambda: leases.setdefault("b", svc.acquire_blob_lease("legacy", "job", 15))
    yield "renew_blob_lease", lambda: svc.renew_blob_lease("legacy", "job", leases["b"])
    yield "change_blob_lease", lambda: leases.__setitem__("b", svc.change_blob_lease(
        "legacy", "job", leases["b"], "3c7e72eb-b430-4526-bc53-d8ecef03798f"))
    yield "get_blob_to_bytes", lambda: svc.get_blob_to_bytes("legacy", "job", lease_id=leases["b"]).content.decode()
    yield "break_blob_lease", lambda: svc.break_blob_lease("legacy", "job", lease_break_period=0)
    yield "delete_blob", lambda: svc.delete_blob("legacy", "job")
    yield "delete_container", lambda: svc.delete_container("legacy", fail_not_exist=True)


for name, call in steps():
    try:
        value = call()
        print(json.dumps({"step": name, "ok": True, "value": value if isinstance(value, (str, int, bool)) else None}))
    except Exception as exc:  # noqa: BLE001  # the test reports every step's error
        print(json.dumps({"step": name, "ok": False, "error": f"{type(exc).__name__}: {exc}"}))
