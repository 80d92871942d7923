"""Every lookup the history's auditors make (the JSON API's filters, the admin's exact search) and
the dashboard's expiring leases are answered from an index, not by reading the table: SQLite's
query plan for each names the index it searches (migration 0014 moved and dropped some)."""

import datetime as dt

import pytest
from django.db import connection
from django.db.models import Q

from leases.domain import machine
from leases.models import Blob, LeaseEvent

pytestmark = [pytest.mark.django_db,
              pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's query plans (rule-based)")]

NOW = dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)
# name: (query, the index it must search, whether that index also gives the order)
LOOKUPS = {
    "one resource, newest first": (LeaseEvent.objects.filter(account="a", container="c", blob="b")
                                   .order_by("-occurred_at", "-id"), "event_resource_idx", True),
    "a blob by its name alone": (LeaseEvent.objects.filter(blob="b"), "event_resource_idx", False),
    "a container and its blobs": (LeaseEvent.objects.filter(container="c"), "event_container_idx", False),
    "an account": (LeaseEvent.objects.filter(account="a"), "event_account_idx", False),
    "a request id": (LeaseEvent.objects.filter(request_id="r"), "event_request_id_idx", False),
    "a client request id": (LeaseEvent.objects.filter(client_request_id="r"), "event_client_request_id_idx", False),
    "a lease fingerprint": (LeaseEvent.objects.filter(Q(lease_fingerprint="f") | Q(proposed_lease_fingerprint="f")),
                            "event_lease_fp_idx", False),
    "an actor": (LeaseEvent.objects.filter(actor="x"), "event_actor_idx", False),
    "leases expiring soon": (Blob.objects.filter(lease_state=machine.LEASED, lease_expires_at__gt=NOW,
                                                 lease_expires_at__lte=NOW + dt.timedelta(minutes=1))
                             .order_by("lease_expires_at"), "blob_lease_idx", True),
}


@pytest.mark.parametrize("name", LOOKUPS)
def test_the_lookup_searches_an_index(name):
    queryset, index, ordered = LOOKUPS[name]
    plan = queryset.explain()
    assert f"USING INDEX {index}" in plan or f"USING COVERING INDEX {index}" in plan, plan
    assert "SCAN leases_leaseevent\n" not in plan + "\n" and "SCAN leases_blob\n" not in plan + "\n", plan
    if ordered:
        assert "USE TEMP B-TREE FOR ORDER BY" not in plan, plan
