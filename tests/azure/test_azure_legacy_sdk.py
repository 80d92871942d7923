"""The legacy Python SDK (azure-storage-blob 1.x) and every bodiless answer of the Azure door.

Azure sends an answer without a body (properties, create, delete, metadata, every lease action, 304s and
the errors of HEAD) without a Content-Type; Django's HttpResponse would add text/html, which
the legacy SDK reads onto a container's properties and fails on (leases/azure/wire.Bodiless)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY

from tests import azure_raw

pytestmark = pytest.mark.also_postgres

REPO = Path(__file__).resolve().parents[2]
LEGACY_SDK = REPO / ".venv" / "legacy-sdk"
STEPS = Path(__file__).with_name("legacy_sdk_steps.py")


def test_the_legacy_python_sdk_leases_containers_and_blobs(azure_server):
    if not (LEGACY_SDK / "azure" / "storage" / "blob").is_dir():
        pytest.fail("the legacy SDK is not installed: run `make test-setup` (.venv/legacy-sdk)")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(LEGACY_SDK), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-S", str(STEPS), azure_server, DEV_ACCOUNT, DEV_KEY],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines()]
    failed = {r["step"]: r["error"] for r in results if not r["ok"]}
    assert not failed
    by_step = {r["step"]: r["value"] for r in results}
    assert by_step["get_blob_properties"] == "application/octet-stream"
    assert by_step["get_blob_to_bytes"] == "payload"
    assert len(results) == 17


def _answers(base: str) -> dict[str, requests.Response]:
    """One answer of each bodiless kind, in order on one container and blob."""
    c, b = f"/{DEV_ACCOUNT}/bare", f"/{DEV_ACCOUNT}/bare/item"
    answers = {"create container": azure_raw.signed("PUT", base, c + "?restype=container")}
    answers["container properties"] = azure_raw.signed("GET", base, c + "?restype=container")
    answers["container metadata"] = azure_raw.signed(
        "PUT", base, c + "?restype=container&comp=metadata", headers={"x-ms-meta-a": "1"})
    answers["put blob"] = azure_raw.signed("PUT", base, b, body=b"x", headers={"x-ms-blob-type": "BlockBlob"})
    answers["blob metadata"] = azure_raw.signed("PUT", base, b + "?comp=metadata", headers={"x-ms-meta-a": "1"})
    acquired = azure_raw.lease(base, b, "acquire", **{"x-ms-lease-duration": "15"})
    answers["acquire"] = acquired
    lease_id = acquired.headers["x-ms-lease-id"]
    answers["renew"] = azure_raw.lease(base, b, "renew", **{"x-ms-lease-id": lease_id})
    answers["break"] = azure_raw.lease(base, b, "break", **{"x-ms-lease-break-period": "0"})
    answers["head error"] = azure_raw.signed("HEAD", base, f"/{DEV_ACCOUNT}/bare/missing")
    answers["not modified"] = azure_raw.signed("GET", base, b, headers={"If-None-Match": answers["break"].headers["ETag"]})
    answers["delete blob"] = azure_raw.signed("DELETE", base, b)
    answers["delete container"] = azure_raw.signed("DELETE", base, c + "?restype=container")
    return {name: r for name, r in answers.items() if r is not None}


def test_no_bodiless_answer_carries_a_content_type(azure_server):
    answers = _answers(azure_server)
    statuses = {name: r.status_code for name, r in answers.items()}
    assert statuses == {"create container": 201, "container properties": 200, "container metadata": 200,
                        "put blob": 201, "blob metadata": 200, "acquire": 201, "renew": 200, "break": 202,
                        "head error": 404, "not modified": 304, "delete blob": 202, "delete container": 202}
    assert all(r.content == b"" for r in answers.values())
    assert {name: r.headers.get("Content-Type") for name, r in answers.items()
            if "Content-Type" in r.headers} == {}


def test_answers_with_a_body_keep_theirs(azure_server):
    base, c = azure_server, f"/{DEV_ACCOUNT}/typed"
    azure_raw.signed("PUT", base, c + "?restype=container")
    azure_raw.signed("PUT", base, c + "/page", body=b"<p>", headers={"x-ms-blob-type": "BlockBlob",
                                                                      "x-ms-blob-content-type": "text/plain"})
    assert azure_raw.signed("GET", base, c + "/page").headers["Content-Type"] == "text/plain"
    assert azure_raw.signed("HEAD", base, c + "/page").headers["Content-Type"] == "text/plain"
    assert azure_raw.signed("GET", base, c + "?restype=container&comp=list").headers["Content-Type"] == "application/xml"
    assert azure_raw.signed("GET", base, c + "/missing").headers["Content-Type"] == "application/xml"
