"""Prometheus metrics at /metrics: protected like the history API, and
reflecting a scripted sequence of lease requests exactly (the official SDK
against the live server, and the JSON API)."""

from __future__ import annotations

import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobLeaseClient
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from leases.operations import metrics
from leases.models import LeaseEvent
from leases.models.tokens import ApiToken
from tests.api.helpers import make_user

LEASE_ID_A = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
LEASE_ID_B = "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbb"


def bearer(*perms: str, superuser: bool = False, name: str = "scraper") -> dict:
    _, raw = ApiToken.issue(user=make_user(name, *perms, superuser=superuser), name=name)
    return {"Authorization": f"Bearer {raw}"}


def scrape(base: str, headers: dict) -> dict[tuple, float]:
    response = requests.get(f"{base}/metrics", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def requests_delta(before, after, action, door, outcome):
    key = dict(action=action, door=door, outcome=outcome)
    return value(after, "leasehold_lease_requests_total", **key) - value(before, "leasehold_lease_requests_total", **key)


def latency_count_delta(before, after, action, door):
    return (value(after, "leasehold_lease_request_seconds_count", action=action, door=door)
            - value(before, "leasehold_lease_request_seconds_count", action=action, door=door))


def test_metrics_are_protected_like_the_history(azure_server, transactional_db):
    assert requests.get(f"{azure_server}/metrics", timeout=30).status_code == 401
    assert requests.get(f"{azure_server}/metrics", headers=bearer(name="nobody"), timeout=30).status_code == 403
    assert requests.get(f"{azure_server}/metrics", headers=bearer("leases.view_leaseevent", name="auditor"),
                        timeout=30).status_code == 200


def test_metrics_name_the_instance(azure_server, transactional_db, leasehold_env):
    import os
    import socket

    leasehold_env(LEASEHOLD_INSTANCE="east-1")
    samples = scrape(azure_server, bearer(superuser=True, name="root"))
    assert value(samples, "leasehold_instance_info", instance="east-1", hostname=socket.gethostname(),
                 pid=str(os.getpid())) == 1


def test_metrics_reflect_a_scripted_sequence_exactly(azure_server, service, clock):
    headers = bearer(superuser=True)
    container = service.create_container("metered")
    before = scrape(azure_server, headers)

    lease = container.acquire_lease(lease_duration=15, lease_id=LEASE_ID_A)  # azure acquire: success
    with pytest.raises(HttpResponseError):
        container.acquire_lease(lease_duration=15)  # refused: LeaseAlreadyPresent
    lease.renew()  # success
    lease.change(LEASE_ID_B)  # success
    lease.release()  # success
    with pytest.raises(HttpResponseError):
        BlobLeaseClient(container, lease_id=LEASE_ID_B).renew()  # refused: the lease was released
    # The JSON API's door: acquire and break.
    api = f"{azure_server}/api/v1/leases"
    assert requests.post(f"{api}/acquire/devstoreaccount1/metered", json={"duration": -1}, headers=headers,
                         timeout=30).status_code == 201
    assert requests.post(f"{api}/break/devstoreaccount1/metered", json={"break_period": 60}, headers=headers,
                         timeout=30).status_code == 202
    after = scrape(azure_server, headers)

    expected = {
        ("acquire", "azure", "success"): 1, ("acquire", "azure", "refused"): 1,
        ("renew", "azure", "success"): 1, ("renew", "azure", "refused"): 1,
        ("change", "azure", "success"): 1, ("release", "azure", "success"): 1,
        ("acquire", "api", "success"): 1, ("break", "api", "success"): 1,
    }
    for action in sorted(metrics.ACTIONS | {"other"}):
        for door in sorted(metrics.DOORS | {"other"}):
            for outcome in ("success", "refused", "error"):
                assert requests_delta(before, after, action, door, outcome) == expected.get(
                    (action, door, outcome), 0), (action, door, outcome)
            assert latency_count_delta(before, after, action, door) == sum(
                n for (a, d, _), n in expected.items() if (a, d) == (action, door))
    # The database's gauges: the one container is breaking, no blob exists.
    assert value(after, "leasehold_leases", resource="container", state="breaking") == 1
    assert sum(value(after, "leasehold_leases", resource="container", state=s)
               for s in ("available", "leased", "expired", "broken")) == 0
    assert value(after, "leasehold_history_events") == LeaseEvent.objects.count()
    oldest = LeaseEvent.objects.order_by("occurred_at").first().occurred_at
    assert value(after, "leasehold_history_oldest_event_timestamp_seconds") == pytest.approx(oldest.timestamp())
    if connection.vendor == "sqlite":
        assert value(after, "leasehold_database_bytes") > 0
        # Every write took the writer lock.
        assert value(after, "leasehold_sqlite_writer_lock_wait_seconds_count") > value(
            before, "leasehold_sqlite_writer_lock_wait_seconds_count")


def test_503_answers_are_counted_by_door():
    def app(environ, start_response):
        start_response(environ["status"], [])
        return [b""]

    counted = metrics.counting_unavailable(app)
    before = {door: metrics.UNAVAILABLE.labels(door)._value.get() for door in ("azure", "api", "admin")}
    for path, status in (("/devstoreaccount1/c", "503 Service Unavailable"), ("/api/v1/blobs/", "503 Busy"),
                         ("/api/v1/blobs/", "200 OK"), ("/admin/", "500 Internal Server Error")):
        counted({"PATH_INFO": path, "status": status}, lambda *args: None)
    after = {door: metrics.UNAVAILABLE.labels(door)._value.get() for door in ("azure", "api", "admin")}
    assert {door: after[door] - before[door] for door in after} == {"azure": 1, "api": 1, "admin": 0}


@pytest.mark.processes
def test_metrics_add_up_the_worker_processes(tmp_path):
    """The production server with two worker processes: whichever worker
    answers a scrape, it reports the requests both workers served."""

    from tests import azure_raw
    from tests.processes.test_processes import Server
    from tests.server_process import admin_token

    server = Server(tmp_path, workers=2).migrate()
    token = admin_token(server.db, server.env)
    headers = {"Authorization": f"Bearer {token}"}
    server.start()
    try:
        base = server.url
        assert azure_raw.signed("PUT", base, "/devstoreaccount1/metered?restype=container").status_code == 201
        assert azure_raw.lease(base, "/devstoreaccount1/metered", "acquire",
                               duration=-1).status_code == 201
        for _ in range(20):  # each on a new connection: spread over the workers
            response = azure_raw.lease(base, "/devstoreaccount1/metered", "acquire", duration=-1)
            assert response.status_code == 409
        for _ in range(6):
            samples = scrape(base, headers)
            assert value(samples, "leasehold_lease_requests_total", action="acquire", door="azure",
                         outcome="success") == 1
            assert value(samples, "leasehold_lease_requests_total", action="acquire", door="azure",
                         outcome="refused") == 20
            assert value(samples, "leasehold_lease_request_seconds_count", action="acquire", door="azure") == 21
            assert value(samples, "leasehold_leases", resource="container", state="leased") == 1
    finally:
        server.kill()


def test_front_refusals_are_counted_by_status_and_logged_once_a_minute_per_status(caplog):
    """serving/front.py's refused_at_front: every refusal counted by status;
    a WARNING line for the first of a status, then none for that status for
    LOG_INTERVAL, the next one saying how many it did not log."""
    from serving import front

    front._logged.clear()
    before = {status: metrics.FRONT_REFUSALS.labels(str(status))._value.get() for status in (431, 413)}
    with caplog.at_level("WARNING", logger="leasehold.front"):
        front.refused_at_front(431, "RequestHeaderFieldsTooLarge", now=1000.0)
        front.refused_at_front(431, "RequestHeaderFieldsTooLarge", now=1001.0)
        front.refused_at_front(413, "Request body too large", now=1002.0)  # another status: its own line
        front.refused_at_front(431, "RequestHeaderFieldsTooLarge", now=1000.0 + front.LOG_INTERVAL - 0.1)
        front.refused_at_front(431, "RequestHeaderFieldsTooLarge", now=1000.0 + front.LOG_INTERVAL)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "leasehold.front"]
    assert lines == [
        ("WARNING", "Request refused by the front: 431, RequestHeaderFieldsTooLarge."),
        ("WARNING", "Request refused by the front: 413, Request body too large."),
        ("WARNING", "Request refused by the front: 431, RequestHeaderFieldsTooLarge (2 more since the last such "
                    "line)."),
    ]
    assert metrics.FRONT_REFUSALS.labels("431")._value.get() - before[431] == 4
    assert metrics.FRONT_REFUSALS.labels("413")._value.get() - before[413] == 1
    front._logged.clear()
