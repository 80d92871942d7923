"""The events API's filters on a column of few values (an action, an actor, an account) that match
few events or none: SQLite walked the primary key newest first and read the whole history to find
them (bench/event_reads.py: seconds at 10,000,000 events). A filter matching at most FEW events is
read first by its own index and its pages by their ids (leases.api.events.by_ids_if_few): on a
history of three actions and 40 actors, after ANALYZE, no statement of such a page is a full
scan of the table (nor of a filter on a door other than the Azure door's: event_via_idx holds
their events only), and every page and cursor walk lists what the filter alone would, newest first
or oldest first (on PostgreSQL too)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from leases.services import selectors
from leases.models import LeaseEvent
from tests import query_plans

pytestmark = pytest.mark.also_postgres

START = datetime(2026, 1, 1, tzinfo=UTC)
EVENTS = 3000
RARE = {i for i in range(EVENTS) if i % 500 == 11}  # six breaks, by account:rare through the admin


def _event(i: int) -> LeaseEvent:
    rare = i in RARE
    return LeaseEvent(occurred_at=START + timedelta(seconds=i), action="break" if rare else
                      ("acquire", "renew", "release")[i % 3], outcome="success", resource_type="blob",
                      account="acct", container="jobs", blob=f"queue-{i % 100:03d}",
                      lease_fingerprint=f"{i // 3:012x}", state_before="leased", state_after="leased",
                      generation=i // 300 + 1, status_code=200, actor="account:rare" if rare else f"account:app{i % 40}",
                      via="admin" if rare else "azure", request_id=f"rq{i:08d}", client_request_id=f"req-{i}")


@pytest.fixture
def history(db):
    LeaseEvent.objects.bulk_create([_event(i) for i in range(EVENTS)], batch_size=500)
    query_plans.analyze("leases_leaseevent")
    return {e.client_request_id: e.pk for e in LeaseEvent.objects.all()}


def _page(api, query: dict) -> tuple[list[tuple[str, tuple]], dict]:
    with query_plans.statements_on("leases_leaseevent") as seen:
        response = api.get("/api/v1/events/", query)
    assert response.status_code == 200, response.content
    return seen, response.json()




@pytest.mark.parametrize("query", [
    {"action": "break"},
    {"action": "ended-by-delete"},
    {"actor": "user:alice"},
    {"account": "other"},
    {"action": "break", "ordering": "id"},
    {"via": "admin"},
    {"via": "api"},
], ids=["few", "none", "no-actor", "no-account", "few-oldest-first", "via-few", "via-none"])
def test_a_filter_matching_few_events_reads_no_whole_table(api, history, query):
    statements, _ = _page(api, query)
    assert statements
    for sql, params in statements:
        plan = query_plans.plan(sql, params)
        assert not query_plans.scans(plan, "leases_leaseevent"), f"{sql}\n{plan}"


@pytest.mark.parametrize("query", [
    {"resource_type": "container"},
    {"error_code": "LeaseIdMismatchWithLeaseOperation"},
], ids=["container-events", "error-code"])
def test_an_unindexed_filter_is_found_by_the_index_its_value_implies(api, history, query):
    """resource_type and error_code have no index: a container's events name no blob, and only a
    refusal has an error code, so the resource index and the refusals' find them."""
    statements, page = _page(api, query)
    assert page["results"] == []
    for sql, params in statements:
        plan = query_plans.plan(sql, params)
        assert not query_plans.scans(plan, "leases_leaseevent"), f"{sql}\n{plan}"


@pytest.mark.parametrize("ordering", ["-id", "id"])
def test_a_filter_matching_many_is_read_by_a_walk_of_the_primary_key(api, history, monkeypatch, ordering):
    """More than FEW match (an actor's 75 of 3,000 here, FEW made 50): the page walks the primary
    key and stops at a page, as a cursor's next page does, instead of sorting every match (SQLite's
    choice; PostgreSQL's planner weighs the two itself)."""
    if connection.vendor != "sqlite":
        pytest.skip("a choice of SQLite's planner")
    monkeypatch.setattr(selectors, "FEW", 50)
    statements, page = _page(api, {"actor": "account:app3", "ordering": ordering})
    assert len(page["results"]) == 75
    listed = [s for s in statements if '"leases_leaseevent"."actor"' in s[0] and "LIMIT 101" in s[0]]
    assert len(listed) == 1, statements
    plan = query_plans.plan(*listed[0])
    assert "INTEGER PRIMARY KEY" in plan and "TEMP B-TREE" not in plan, plan


def test_a_next_page_is_bounded_by_its_cursor_alone(api, history, monkeypatch):
    """Beside the cursor's bound, another on the same side of the id would let SQLite start its walk at
    the history's end (a next page of 12.7 s at 10,000,000 events): the next page's statement bounds
    the id by the cursor only."""
    monkeypatch.setattr(selectors, "FEW", 50)
    first = _page(api, {"actor": "account:app3", "page_size": "10"})[1]
    seen: list[str] = []

    def capture(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        response = api.get(first["next"])
    assert response.status_code == 200 and len(response.json()["results"]) == 10
    pages = [sql for sql in seen if "LIMIT 11" in sql]
    assert len(pages) == 1 and pages[0].count('"leases_leaseevent"."id" <') == 1, pages


def _walk(api, query: dict) -> list[str]:
    """Every page of the filter, through the cursor: the client request ids in the order listed."""
    listed, page = [], _page(api, {**query, "page_size": "50"})[1]
    while True:
        listed += [row["client_request_id"] for row in page["results"]]
        if not page["next"]:
            return listed
        response = api.get(page["next"])
        assert response.status_code == 200, response.content
        page = response.json()


@pytest.mark.parametrize("few", [2, selectors.FEW], ids=["more-than-few", "few"])
@pytest.mark.parametrize("query, matches", [
    ({"action": "break"}, lambda i: i in RARE),
    ({"actor": "account:app3"}, lambda i: i % 40 == 3 and i not in RARE),
    ({"action": "ended-by-delete"}, lambda i: False),
    ({"via": "admin"}, lambda i: i in RARE),
    ({"via": "azure"}, lambda i: i not in RARE),
], ids=["breaks", "actor", "none", "via-admin", "via-azure"])
@pytest.mark.parametrize("ordering", ["-id", "id"])
def test_pages_list_what_the_filter_matches(api, history, monkeypatch, few, query, matches, ordering):
    """Whether the filter's ids are read first (few) or not (more than FEW), the same events."""
    monkeypatch.setattr(selectors, "FEW", few)
    wanted = [f"req-{i}" for i in range(EVENTS) if matches(i)]
    assert _walk(api, {**query, "ordering": ordering}) == (wanted[::-1] if ordering == "-id" else wanted)


TIMES = {"occurred_at_after": (START + timedelta(seconds=1000)).isoformat(),
         "occurred_at_before": (START + timedelta(seconds=1999)).isoformat()}


@pytest.mark.parametrize("ordering", ["-occurred_at", "occurred_at"])
def test_a_time_range_in_time_order_is_read_by_the_time_index(api, history, monkeypatch, ordering):
    """A time range away from the newest events, newest first by id, reads what is newer first, or
    sorts the range (seconds at 10,000,000 events): in time order (ties by id) it is a walk of the
    occurred_at index, every page of it what the range holds, on both engines. More than FEW match
    (1,000 here, FEW made 50), as an hour's do at 10,000,000."""
    monkeypatch.setattr(selectors, "FEW", 50)
    wanted = [f"req-{i}" for i in range(1000, 2000)]
    assert _walk(api, {**TIMES, "ordering": ordering}) == (wanted[::-1] if ordering.startswith("-") else wanted)
    statements, _ = _page(api, {**TIMES, "ordering": ordering})
    for sql, params in statements:
        plan = query_plans.plan(sql, params)
        assert not query_plans.scans(plan, "leases_leaseevent"), f"{sql}\n{plan}"
        if connection.vendor == "sqlite" and "ORDER BY" in sql:
            assert "TEMP B-TREE" not in plan and "occurred_at" in plan, f"{sql}\n{plan}"


def test_ties_in_time_are_split_by_id_on_every_page(api, db):
    """121 events of one instant, paged 50 at a time in time order: each listed once, by id."""
    events = [_event(i) for i in range(300)]
    for event in events[180:]:
        event.occurred_at = START
    LeaseEvent.objects.bulk_create(events, batch_size=100)
    same = list(LeaseEvent.objects.filter(occurred_at=START).order_by("-id").values_list("client_request_id",
                                                                                         flat=True))
    assert len(same) == 121
    assert _walk(api, {"ordering": "-occurred_at", "occurred_at_before": START.isoformat()}) == same
    assert _walk(api, {"ordering": "occurred_at", "occurred_at_before": START.isoformat()}) == same[::-1]
