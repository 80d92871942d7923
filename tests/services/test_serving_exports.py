"""The history's exports read in short keyset-paged queries (leases/services/keyset.py):
the same rows in the same order as one query, whatever the ordering, ties
included, and nothing recorded after the export began."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leases import services
from leases.services.keyset import keyset_rows
from leases.models import LeaseEvent
from leases.services import Actor, ResourceRef

REF = ResourceRef("devstoreaccount1", "pages", "b")
ACTOR = Actor(name="account:devstoreaccount1", via="azure")
COLUMNS = ("id", "occurred_at", "action", "outcome")


@pytest.fixture
def history(make_blob, clock):
    """Events in runs that share a timestamp (the clock moves every third),
    so an ordering by time has ties that only the id breaks."""
    make_blob(REF, ACTOR)
    for i in range(10):
        lease_id = uuid.uuid4()
        services.lease_acquire(ref=REF, actor=ACTOR, duration=15, proposed_lease_id=lease_id)
        services.lease_release(ref=REF, actor=ACTOR, lease_id=lease_id)
        if i % 3 == 0:
            clock.advance(1)
    return LeaseEvent.objects.all()


@pytest.mark.parametrize("ordering", [["id"], ["-id"], ["-occurred_at", "-id"], ["occurred_at"],
                                      ["-occurred_at"], ["action", "-occurred_at"]])
def test_pages_give_the_rows_of_one_query(history, ordering):
    whole = list(history.order_by(*ordering).values_list(*COLUMNS))
    assert len(whole) >= 20
    with CaptureQueriesContext(connection) as queries:
        paged = list(keyset_rows(history.order_by(*ordering), COLUMNS, page_rows=3))
    assert paged == whole
    # one query for the bound, then one a page (the last one short)
    assert len(queries) == 1 + len(whole) // 3 + 1


def test_a_filtered_export_pages_within_its_filter(history):
    acquires = history.filter(action="acquire").order_by("-occurred_at", "-id")
    assert list(keyset_rows(acquires, COLUMNS, page_rows=4)) == list(acquires.values_list(*COLUMNS))


def test_no_transaction_is_held_between_pages(history):
    rows = keyset_rows(history.order_by("id"), COLUMNS, page_rows=5)
    for _ in range(12):
        next(rows)
        assert not connection.in_atomic_block


def test_events_recorded_after_the_start_are_left_out(history, clock):
    expected = list(history.order_by("id").values_list(*COLUMNS))
    rows = keyset_rows(history.order_by("id"), COLUMNS, page_rows=4)
    first = next(rows)
    lease_id = uuid.uuid4()
    services.lease_acquire(ref=REF, actor=ACTOR, duration=15, proposed_lease_id=lease_id)
    assert [first, *rows] == expected


def test_an_empty_history_exports_nothing(transactional_db):
    assert list(keyset_rows(LeaseEvent.objects.order_by("id"), COLUMNS)) == []
