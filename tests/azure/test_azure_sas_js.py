"""Shared access signatures made and used by the official JavaScript SDK
(@azure/storage-blob, ``make azurite`` installs it into bench/node_modules):
every lease action on blobs and containers under an account SAS, a blob SAS,
a container SAS and a stored access policy, for each permission set, allowed
exactly where Azure allows it; and the refusals. One node process runs every
case against the live server (tests/azure/sas_js_sdk.cjs)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest

from leases.auth import sas
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from leases.models import LeaseEvent

from tests.azure.test_azure_sas import ACTIONS, expected, refusal

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("sas_js_sdk.cjs")
JS_SDK = REPO / "bench" / "node_modules" / "@azure" / "storage-blob"
# Letters each SDK class accepts for a blob, a container and an account (no List: not a blob permission).
PERMISSION_SETS = ("w", "d", "r", "c", "racd")


def run_node(azure_server: str, cases: list[dict]) -> dict[str, dict]:
    node = shutil.which("node")
    if node is None or not JS_SDK.exists():
        pytest.fail("the JavaScript SDK is not installed: run `make azurite` (npm install in bench/)")
    payload = json.dumps({"url": azure_server, "account": DEV_ACCOUNT, "key": DEV_KEY, "cases": cases})
    done = subprocess.run([node, str(SCRIPT)], input=payload, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {line["id"]: line for line in map(json.loads, done.stdout.splitlines())}


def test_each_lease_action_under_each_sas_and_permission_set(azure_server):
    cases: list[dict[str, Any]] = []
    for noun, kinds in (("blob", ("account", "blob", "container", "policy")), ("container", ("account", "container"))):
        for kind in kinds:
            for action in ACTIONS:
                for letters in PERMISSION_SETS:
                    cases.append({"id": f"{noun}-{kind}-{action}-{letters}", "noun": noun, "kind": kind,
                                  "action": action, "letters": letters, "container": f"js-{len(cases)}",
                                  "blob": "item (1).txt" if noun == "blob" else None})
    results = run_node(azure_server, cases)
    assert len(results) == len(cases)
    for case in cases:
        got = results[case["id"]]
        if expected(case["noun"], case["kind"], case["action"], case["letters"]):
            assert got["ok"], (case["id"], got)
            event = LeaseEvent.objects.filter(container=case["container"], action=case["action"]).latest("id")
            identity = "lease-policy" if case["kind"] == "policy" else sas.fingerprint(dict(parse_qsl(got["sas"]))["sig"])
            assert event.actor == f"sas:{DEV_ACCOUNT}:{identity}", case["id"]
        else:
            assert (got["ok"], got.get("status"), got.get("code")) == \
                (False, 403, refusal(case["noun"], case["kind"])), (case["id"], got)


REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"expiresIn": -60}, "AuthenticationFailed"),
    ({"startsIn": 600}, "AuthenticationFailed"),
    ({"ip": "10.1.2.3"}, "AuthorizationSourceIPMismatch"),
    ({"protocol": "https"}, "AuthorizationProtocolMismatch"),
    ({"resourceTypes": "c"}, "AuthorizationResourceTypeMismatch"),
]


def test_refusals(azure_server):
    cases: list[dict[str, Any]] = [{"id": str(n), "noun": "blob", "kind": "account" if "resourceTypes" in extra else "blob",
              "action": "acquire", "letters": "w", "container": f"js-refused-{n}", "blob": "item.bin", **extra}
             for n, (extra, _) in enumerate(REFUSALS)]
    cases.append({"id": "fine", "noun": "blob", "kind": "blob", "action": "acquire", "letters": "w",
                  "container": "js-fine", "blob": "item.bin", "ip": "127.0.0.1", "protocol": "https,http"})
    results = run_node(azure_server, cases)
    for n, (_, code) in enumerate(REFUSALS):
        assert (results[str(n)]["status"], results[str(n)]["code"]) == (403, code), REFUSALS[n]
    assert results["fine"]["ok"], results["fine"]
    assert LeaseEvent.objects.filter(action="acquire", status_code=201).count() == 1


# The signed versions whose strings to sign differ (fields added in 2015-04-05, 2018-11-09, 2020-12-06),
# as the JavaScript SDK signs each when asked for it.
VERSIONS = ("2015-04-05", "2017-07-29", "2018-11-09", "2019-12-12", "2020-02-10", "2020-12-06")


def test_older_signed_versions(azure_server):
    cases = [{"id": f"{kind}-{version}", "noun": "blob", "kind": kind, "action": "acquire", "letters": "rw",
              "version": version, "container": f"js-v{n}", "blob": "item.bin"}
             for n, (kind, version) in enumerate((k, v) for k in ("account", "blob", "container", "policy")
                                                  for v in VERSIONS)]
    results = run_node(azure_server, cases)
    assert all(result["ok"] for result in results.values()), [r for r in results.values() if not r["ok"]]
    assert {dict(parse_qsl(r["sas"]))["sv"] for r in results.values()} == set(VERSIONS)
    # Delete breaks a lease from 2017-07-29 on, not before.
    cases = [{"id": version, "noun": "blob", "kind": "blob", "action": "break", "letters": "d", "version": version,
              "container": f"js-break-{n}", "blob": "item.bin"} for n, version in enumerate(("2015-04-05", "2017-07-29"))]
    results = run_node(azure_server, cases)
    assert (results["2015-04-05"]["code"], results["2017-07-29"]["ok"]) == ("AuthorizationPermissionMismatch", True)
