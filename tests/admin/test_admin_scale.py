"""The admin at scale: 25,000 blobs and 60,000 lease events, more than the
paginator's cap on every list, so that each count must be a capped one.

Every list page, filter and search must cost a few queries whatever the row
count (no per-row query), count at most up to the paginator's cap (never a
full COUNT(*)), and read no DISTINCT or date truncation over the history.
bench/admin_pages.py times the same pages over 100,000 blobs and 1,000,000
events."""

from __future__ import annotations

from datetime import datetime, timezone

import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leases.admin.paging import CappedCountPaginator
from leases.models import Blob, LeaseEvent

from .helpers import load_scale_data, scale_pages

pytestmark = pytest.mark.slow  # tens of thousands of rows to load
BLOBS, EVENTS = 25_000, 60_000

# Queries per page, session and user included: the list pages run their
# filters' choices, one capped count and one page of rows (with its
# containers and accounts joined in), and the history's list a seek of a
# chosen filter's ids (selectors.ids_if_few); the dashboard ten capped state counts.
MAX_QUERIES = {"dashboard": 20, "index": 3}  # the dashboard: 2 of them the ledger's last block and check
LIST_QUERIES = 11
PAGE_SECONDS = 5  # a backstop against full scans and sorts; bench/admin_pages.py measures


def test_admin_pages_at_scale(client, superuser, clock):
    # A fixed instant: which events fall on the day the pages are asked for must not depend on the
    # time of day the suite runs (a run at 23:50 UTC found no match among the day's newest events).
    load_scale_data(blobs=BLOBS, events=EVENTS, now=clock.freeze(datetime(2026, 11, 20, 18, 0, tzinfo=timezone.utc)))
    assert Blob.objects.count() >= BLOBS > 2 * CappedCountPaginator.CAP
    assert LeaseEvent.objects.order_by().count() >= EVENTS
    client.force_login(superuser)

    for label, url in scale_pages():
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            response = client.get(url)
            body = b"".join(response.streaming_content) if response.streaming else response.content
            elapsed = time.perf_counter() - started
        assert response.status_code == 200, (label, body[:500])
        sql = [q["sql"] for q in queries]
        assert len(sql) <= MAX_QUERIES.get(label, LIST_QUERIES), (label, sql)
        for statement in sql:
            if "COUNT(" in statement:  # capped, or grouped (holders, a page's blob counts): never a full count
                assert f"LIMIT {CappedCountPaginator.CAP + 1}" in statement or "GROUP BY" in statement, (
                    label, statement)
            assert "DISTINCT" not in statement and "django_datetime_trunc" not in statement, (label, statement)
        if response.context and "cl" in response.context and not label.endswith(("no match", "unknown state")):
            assert len(response.context["cl"].result_list) > 0, label  # rows shown, yet few queries
        assert elapsed < PAGE_SECONDS, (label, elapsed)
