"""The history's search for an exact term (a request id, a client request id, a fingerprint, a blob,
a container, a resource path) reads by index on a history whose events nearly all share one
container, as a real one's do: every statement the change list runs on the events is planned
without a full scan of the table (SQLite after ANALYZE; PostgreSQL with sequential scans priced
out), and the search finds the right events. Asked as one OR, the container's term (a value
every event has) made SQLite read all 10,000,000 events of bench/event_reads.py's history for
each search (bench/README.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from leases.models import LeaseEvent
from tests import query_plans

pytestmark = pytest.mark.also_postgres

HISTORY = "/admin/leases/leaseevent/"
START = datetime(2026, 1, 1, tzinfo=UTC)
EVENTS = 3000


def _event(i: int) -> LeaseEvent:
    return LeaseEvent(occurred_at=START + timedelta(seconds=i), action=("acquire", "renew", "release")[i % 3],
                      outcome="success", resource_type="blob", account="acct", container="jobs",
                      blob=f"queue-{i // 3 % 100:03d}", lease_fingerprint=f"{i // 3:012x}", state_before="leased",
                      state_after="leased", generation=i // 300 + 1, status_code=200,
                      actor=f"account:app{i % 7}", via="azure", request_id=f"rq{i:08d}",
                      client_request_id=f"req-{i}")


@pytest.fixture
def history(db):
    LeaseEvent.objects.bulk_create([_event(i) for i in range(EVENTS)], batch_size=500)
    query_plans.analyze("leases_leaseevent")


def _statements(client, term: str) -> tuple[list[tuple[str, tuple]], Any]:
    """The statements on the events the search's page runs, with their parameters, and the page."""
    with query_plans.statements_on("leases_leaseevent") as seen:
        response = client.get(HISTORY, {"q": term})
    assert response.status_code == 200
    return seen, response




TERMS = {
    "request id": ("rq00001234", lambda e: e.request_id == "rq00001234"),
    "client request id": ("req-2345", lambda e: e.client_request_id == "req-2345"),
    "fingerprint": (f"{777:012x}", lambda e: e.lease_fingerprint == f"{777:012x}"),
    "blob": ("queue-042", lambda e: e.blob == "queue-042"),
    "resource path": ("acct/jobs/queue-042", lambda e: e.blob == "queue-042"),
}


@pytest.mark.parametrize("name", list(TERMS))
def test_an_exact_search_reads_by_index(superuser_client, history, name):
    term, wanted = TERMS[name]
    statements, response = _statements(superuser_client, term)
    listed = list(response.context["cl"].result_list)
    assert listed and all(wanted(e) for e in listed), [(e.request_id, e.blob) for e in listed]
    assert len(listed) == sum(1 for i in range(EVENTS) if wanted(_event(i))) or len(listed) == 100
    for sql, params in statements:
        plan = query_plans.plan(sql, params)
        assert not query_plans.scans(plan, "leases_leaseevent"), f"{sql}\n{plan}"


def test_a_search_for_the_container_lists_its_events_newest_first(superuser_client, history):
    """The container's term matches every event: listed newest first, as the list is."""
    _, response = _statements(superuser_client, "jobs")
    listed = list(response.context["cl"].result_list)
    assert [e.client_request_id for e in listed[:3]] == [f"req-{EVENTS - 1}", f"req-{EVENTS - 2}",
                                                          f"req-{EVENTS - 3}"]
