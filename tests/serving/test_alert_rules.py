"""The shipped Prometheus alert rules (docs/deploy/prometheus-rules.yml):
promtool checks them and runs their unit tests; then each alert is shown to
fire on what a live server reports when driven into its condition. The
series a Prometheus would have scraped are this test's scrapes of the
server's /metrics, one per scrape interval, handed to `promtool test rules`;
a control run with the condition absent must not fire."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobLeaseClient

from tests.serving.test_metrics import bearer, scrape, value

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy"
RULES = DEPLOY / "prometheus-rules.yml"

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None,
                                reason="promtool (Debian's prometheus package; `make test` installs it) is missing")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)


def test_the_rules_are_valid_and_their_unit_tests_pass():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0 and "SUCCESS: 6 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(DEPLOY / "prometheus-rules.test.yml"))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def _selector(name: str, labels: tuple) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels) + "}"


def firing(alert: str, scrapes: list[dict], interval: str, eval_time: str, tmp_path: Path) -> bool:
    """Whether ``alert`` fires at ``eval_time`` on the series of ``scrapes``
    (one every ``interval``), as promtool's rule engine evaluates it."""
    names = {key for samples in scrapes for key in samples}
    series = [{"series": _selector(name, labels),
               "values": " ".join(repr(samples.get((name, labels), 0.0)) for samples in scrapes)}
              for name, labels in sorted(names)]
    test = {"rule_files": [str(RULES)], "evaluation_interval": interval, "tests": [{
        "interval": interval, "input_series": series,
        "promql_expr_test": [{"expr": f'count(ALERTS{{alertname="{alert}", alertstate="firing"}}) or vector(0)',
                              "eval_time": eval_time, "exp_samples": [{"labels": "{}", "value": 1}]}]}]}
    path = tmp_path / f"{alert}.test.yml"
    path.write_text(yaml.safe_dump(test))
    result = promtool("test", "rules", str(path))
    said = result.stdout + result.stderr
    assert "SUCCESS" in said or "FAILED" in said, said  # ran, and said which
    return result.returncode == 0


def test_a_watched_lease_without_a_holder_fires(azure_server, service, clock, settings, tmp_path):
    """The server's clock moves 30 s per scrape, and only then (frozen in
    between: on a loaded machine the scrapes took seconds of real time); the
    alert reads the seconds without a holder the server reports."""
    settings.LEASEHOLD_WATCHED_LEASES = ["devstoreaccount1/leader/lock"]
    clock.freeze()
    headers = bearer(superuser=True)
    blob = service.create_container("leader").upload_blob("lock", b"")
    lease = blob.acquire_lease(lease_duration=40)
    held = []
    for _ in range(6):  # every 30 s, the leader renews
        held.append(scrape(azure_server, headers))
        clock.advance(30)
        lease.renew()
    assert not firing("LeaseholdWatchedLeaseUnheld", held, "30s", "2m30s", tmp_path)
    gone = []
    for _ in range(6):  # the leader died after its last renewal: its lease runs out 40 s later
        gone.append(scrape(azure_server, headers))
        clock.advance(30)
    unheld = [value(samples, "leasehold_watched_lease_unheld_seconds", lease="devstoreaccount1/leader/lock")
              for samples in gone]
    assert unheld == [0, 0, 20, 50, 80, 110]
    assert not firing("LeaseholdWatchedLeaseUnheld", gone[:4], "30s", "1m30s", tmp_path)
    assert firing("LeaseholdWatchedLeaseUnheld", gone, "30s", "2m30s", tmp_path)


def test_leases_running_out_fire(azure_server, service, clock, tmp_path):
    headers = bearer(superuser=True)
    container = service.create_container("jobs")
    blobs = [container.upload_blob(f"job-{n}", b"") for n in range(5)]
    released, ran_out = [scrape(azure_server, headers)], [scrape(azure_server, headers)]
    for blob in blobs:  # holders that release: nothing runs out
        blob.acquire_lease(lease_duration=15).release()
        released.append(scrape(azure_server, headers))
    assert not firing("LeaseholdLeasesRunningOut", released, "1m", "5m", tmp_path)
    for blob in blobs:  # holders that die; the next acquire finds each lease ran out
        blob.acquire_lease(lease_duration=15)
        clock.advance(16)
        BlobLeaseClient(blob).acquire(lease_duration=15)
        ran_out.append(scrape(azure_server, headers))
    assert firing("LeaseholdLeasesRunningOut", ran_out, "1m", "5m", tmp_path)


def _renewal_rounds(azure_server, blob, lease, headers, refused_per_round: int) -> list[dict]:
    scrapes = []
    for _ in range(16):  # a minute each: four renewals, some refused
        for _ in range(4 - refused_per_round):
            lease.renew()
        for _ in range(refused_per_round):
            with pytest.raises(HttpResponseError):
                BlobLeaseClient(blob, lease_id="bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb").renew()
        scrapes.append(scrape(azure_server, headers))
    return scrapes


def test_renewal_refusals_fire(azure_server, service, clock, tmp_path):
    headers = bearer(superuser=True)
    blob = service.create_container("renewing").upload_blob("job", b"")
    lease = blob.acquire_lease(lease_duration=60)
    assert not firing("LeaseholdRenewalRefusals", _renewal_rounds(azure_server, blob, lease, headers, 0),
                      "1m", "15m", tmp_path)
    assert firing("LeaseholdRenewalRefusals", _renewal_rounds(azure_server, blob, lease, headers, 1),
                  "1m", "15m", tmp_path)


def test_an_instance_that_cannot_serve_fires(azure_server, transactional_db, tmp_path):
    from django.db import connection

    from leases.models import history_triggers

    headers = bearer(superuser=True)
    ready = [scrape(azure_server, headers) for _ in range(5)]
    assert not firing("LeaseholdNotReady", ready, "30s", "2m", tmp_path)
    with connection.cursor() as cursor:  # the history is no longer append-only: not ready
        cursor.execute(f"DROP TRIGGER {history_triggers.TRIGGERS[connection.vendor][0]}")
    try:
        broken = ready[:1] + [scrape(azure_server, headers) for _ in range(4)]
    finally:
        history_triggers.ensure(connection)
    assert [s[("leasehold_ready", ())] for s in broken] == [1, 0, 0, 0, 0]
    assert firing("LeaseholdNotReady", broken, "30s", "2m", tmp_path)


def _metric_names(expr: str) -> set[str]:
    """The metric names an expression reads: its identifiers, less label
    matchers and groupings, strings, variables, functions and keywords."""
    import re

    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    expr = re.sub(r'"[^"]*"|\$\w+|\$\{\w+\}', "", expr)
    words = {"and", "or", "unless", "bool", "offset"}
    return {name for name in re.findall(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr)
            if name not in words}


def _exported(text: str) -> set[str]:
    """Every sample name the exposition can hold, from its TYPE lines (a
    labelled counter nobody has incremented yet has no samples)."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "gauge": ("",), "info": ("_info",)}
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            base = name.removesuffix("_total") if kind == "counter" else name
            names |= {base + suffix for suffix in suffixes.get(kind, ("",))}
    return names


def test_the_dashboard_and_the_rules_read_only_what_the_server_exports(azure_server, service, settings):
    import json

    settings.LEASEHOLD_WATCHED_LEASES = ["devstoreaccount1/exported"]
    blob = service.create_container("exported").upload_blob("b", b"")
    lease = blob.acquire_lease(lease_duration=15)
    lease.break_lease(lease_break_period=0)
    with pytest.raises(HttpResponseError):
        lease.renew()  # every family has a sample
    import requests

    text = requests.get(f"{azure_server}/metrics", headers=bearer(superuser=True), timeout=30).text
    exported = _exported(text) | {"up"}
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    rules = yaml.safe_load(RULES.read_text())
    exprs += [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    read = set().union(*map(_metric_names, exprs))
    assert {"leasehold_watched_lease_held", "leasehold_watched_lease_unheld_seconds", "leasehold_leases_ran_out_total",
            "leasehold_ready", "leasehold_lease_holder_changes_total"} <= read
    assert read <= exported, sorted(read - exported)
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
