"""The history's sidebar filters, alone and in pairs, read by index on a history where an action is
rare (breaks) and an actor common, as a real one's are. An actor and an action together matched
1,800 of 10,000,000 events in bench/event_reads.py's history, and the list's capped count read every
one of the actor's 270,000 events to find them (each row looked up for its action): a 503 at the
read bound. ``event_actor_idx`` (actor, occurred_at, action) answers the pair's count from the index
alone and keeps an actor's events in the list's order, time then id (migration 0021). Both engines:
no statement reads the table whole and the list shows what the filters match, newest first; SQLite's
plans (its planner has no per-value statistics): the pair's count is index-only, and the pair's list
(with no LIMIT when it fits a page) and an actor's are read in the actor index's order, unsorted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from leases.models import LeaseEvent
from leases.services import selectors
from tests import query_plans

pytestmark = pytest.mark.also_postgres

HISTORY = "/admin/leases/leaseevent/"
START = datetime(2026, 1, 1, tzinfo=UTC)
EVENTS = 3000
ACTORS = 7


def _action(i: int) -> str:
    return "break" if i % 250 == 11 else ("acquire", "renew", "release")[i % 3]


def _event(i: int) -> LeaseEvent:
    # Two events an instant (i // 2): an actor's list orders by time, then id.
    return LeaseEvent(occurred_at=START + timedelta(seconds=i // 2), action=_action(i), outcome="success",
                      resource_type="blob", account="acct", container="jobs", blob=f"queue-{i // 3 % 100:03d}",
                      lease_fingerprint=f"{i // 3:012x}", state_before="leased", state_after="leased",
                      generation=i // 300 + 1, status_code=200, actor=f"account:app{i % ACTORS}", via="azure",
                      request_id=f"rq{i:08d}", client_request_id=f"req-{i}")


def with_columns(event: LeaseEvent, **columns) -> LeaseEvent:
    for name, value in columns.items():
        setattr(event, name, value)
    return event


@pytest.fixture
def history(db, monkeypatch):
    # Fewer than a break's 12 events are few here, as fewer than a break's 66,000 are at 10,000,000:
    # a pair of an action and an actor is read by the actor's index (selectors.ids_if_few).
    monkeypatch.setattr(selectors, "FEW", 5)
    LeaseEvent.objects.bulk_create([_event(i) for i in range(EVENTS)], batch_size=500)
    query_plans.analyze("leases_leaseevent")


def _list(client, query: dict):
    """The list's page for ``query``: the statements it ran on the events, and the events listed."""
    with query_plans.statements_on("leases_leaseevent") as seen:
        response = client.get(HISTORY, query)
    assert response.status_code == 200
    return seen, list(response.context["cl"].result_list)


QUERIES = {
    "action and actor": ({"action": "break", "actor": "account:app4"},
                         lambda i: _action(i) == "break" and i % ACTORS == 4),
    "action and actor, none": ({"action": "break", "actor": "user:alice"}, lambda i: False),
    "actor": ({"actor": "account:app4"}, lambda i: i % ACTORS == 4),
    "actor and account": ({"actor": "account:app4", "account": "acct"}, lambda i: i % ACTORS == 4),
    "action": ({"action": "break"}, lambda i: _action(i) == "break"),
}


@pytest.mark.parametrize("name", list(QUERIES))
def test_a_filter_or_pair_lists_its_events_newest_first_without_a_scan(superuser_client, history, name):
    query, wanted = QUERIES[name]
    statements, listed = _list(superuser_client, query)
    expected = [f"req-{i}" for i in reversed(range(EVENTS)) if wanted(i)][:100]
    assert [e.client_request_id for e in listed] == expected
    for sql, params in statements:
        plan = query_plans.plan(sql, params)
        assert not query_plans.scans(plan, "leases_leaseevent"), f"{sql}\n{plan}"


def _counted_and_listed(statements) -> tuple[tuple[str, tuple], tuple[str, tuple]]:
    """The list's capped count and its page among ``statements`` (each the one of its kind)."""
    counts = [s for s in statements if s[0].startswith("SELECT COUNT(*)") and "LIMIT 10001" in s[0]]
    pages = [s for s in statements if s[0].startswith('SELECT "leases_leaseevent"."id", ') and "ORDER BY" in s[0]]
    assert len(counts) == 1 and len(pages) == 1, statements
    return counts[0], pages[0]


def test_sqlite_counts_a_pair_from_the_actor_index_alone(superuser_client, history):
    """Without per-value statistics SQLite reads the pair by the actor's index (fewer events a value
    than an action's): its count must read no row of the table, only the index."""
    if connection.vendor != "sqlite":
        pytest.skip("a choice of SQLite's planner")
    statements, _ = _list(superuser_client, {"action": "break", "actor": "account:app4"})
    count, _ = _counted_and_listed(statements)
    plan = query_plans.plan(*count)
    assert "COVERING INDEX event_actor_idx" in plan, plan


@pytest.mark.parametrize("query", [{"actor": "account:app4"}, {"action": "break", "actor": "user:alice"}],
                         ids=["actor", "pair-none"])
def test_sqlite_lists_an_actor_in_its_index_order(superuser_client, history, monkeypatch, query):
    """An actor's list, and a pair's, is read in the actor index's order (time, then id), nothing
    sorted: with the id after the action, the id's part of the order was sorted and a pair that fits
    a page (read without a LIMIT) was planned on the action's index, every break looked up (263 ms at
    10,000,000 events); with the action before the time, an actor's list sorted all of its events."""
    if connection.vendor != "sqlite":
        pytest.skip("a choice of SQLite's planner")
    monkeypatch.setattr(selectors, "FEW", -1)  # none few: a pair with none in common, as at 10,000,000
    statements, _ = _list(superuser_client, query)
    _, page = _counted_and_listed(statements)
    plan = query_plans.plan(*page)
    assert "USING INDEX event_actor_idx" in plan and "TEMP B-TREE" not in plan, plan


def test_a_filter_matching_no_event_answers_a_pair_by_itself(superuser_client, history):
    """An actor with 430 events beside an account with none (at 10,000,000 events: 270,000, a 503 at
    the read bound, the count reading the actor's index and every event for its account): the
    account's own index finds no event, and no count or page statement runs."""
    statements, listed = _list(superuser_client, {"actor": "account:app4", "account": "other"})
    assert listed == []
    assert not [sql for sql, _ in statements
                if sql.startswith(("SELECT COUNT(*)", 'SELECT "leases_leaseevent"."id", '))], statements
    # nor does the sidebar list the account's containers from the history (a walk of the containers'
    # index looking for the account's events: 6 s for an account with none at 10,000,000)
    assert not [sql for sql, _ in statements if "MIN(" in sql and '"account" = ' in sql], statements


def test_a_pair_with_a_filter_matching_few_lists_them_by_their_ids(superuser_client, history):
    """A new actor's four events beside an action matching many: listed by their ids (no scan)."""
    LeaseEvent.objects.bulk_create([with_columns(_event(EVENTS + n), actor="account:rare", action=action)
                                    for n, action in enumerate(("acquire", "renew", "acquire", "acquire"))])
    statements, listed = _list(superuser_client, {"actor": "account:rare", "action": "acquire"})
    assert [e.client_request_id for e in listed] == [f"req-{EVENTS + n}" for n in (3, 2, 0)]
    for sql, params in statements:
        assert not query_plans.scans(query_plans.plan(sql, params), "leases_leaseevent"), sql
