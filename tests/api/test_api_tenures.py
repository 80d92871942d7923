"""Tenures through the JSON API: through both doors (the API's lease routes and the Azure door's
service path) and the admin's service, listed with filters and cursor pages, exported as CSV and
NDJSON, with the history's permission; and "who held R at T" after retention pruned the renewals
(issue 49's reproduction, through GET /api/v1/events/holder/)."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.core.management import call_command

from leases import services
from leases.domain import fingerprints
from leases.api.tenures import TENURE_FIELDS
from leases.models import LeaseEvent, Tenure
from leases.services import Actor, ResourceRef
from tests.api.helpers import API, DEV_ACCOUNT, OTHER_ACCOUNT, lease, make_blob, make_container

pytestmark = pytest.mark.also_postgres

ID1 = "11111111-1111-1111-1111-111111111111"
ID2 = "22222222-2222-2222-2222-222222222222"
BOX = f"{DEV_ACCOUNT}/box"
ADMIN = Actor(name="user:admin", via="admin")


@pytest.fixture
def tenures(api, accounts, clock):
    """Four tenures, t1..t4: t1 on box (API door: acquire, change, release), t2 on box/b (Azure's
    service path, expired), t3 on other (broken by the admin at once), t4 on box (held, infinite)."""
    t0 = clock.freeze()
    make_container("box")
    make_blob("box", "b")
    make_container("other", account=OTHER_ACCOUNT)
    lease(api, "acquire", BOX, {"duration": 15, "proposed_lease_id": ID1}, HTTP_X_CLIENT_REQUEST_ID="c-1")
    services.lease_acquire(ref=ResourceRef(DEV_ACCOUNT, "box", "b"), duration=15,
                           actor=Actor(name=f"account:{DEV_ACCOUNT}", via="azure"))
    clock.advance(5)
    lease(api, "change", BOX, {"lease_id": ID1, "proposed_lease_id": ID2})
    services.lease_acquire(ref=ResourceRef(OTHER_ACCOUNT, "other"), duration=-1, actor=Actor(name="cli", via="cli"))
    clock.advance(5)
    services.lease_break(ref=ResourceRef(OTHER_ACCOUNT, "other"), actor=ADMIN, break_period=0, reason="stuck")
    lease(api, "release", BOX, {"lease_id": ID2})
    clock.advance(20)
    lease(api, "acquire", BOX, {"duration": -1})
    rows = list(Tenure.objects.order_by("id"))
    assert len(rows) == 4
    return t0, {f"t{i}": row for i, row in enumerate(rows, 1)}


def names(tenures, response) -> list[str]:
    assert response.status_code == 200, response.content
    by_id = {row.id: name for name, row in tenures[1].items()}
    return [by_id[item["id"]] for item in response.json()["results"]]


def test_tenures_through_the_doors_and_the_admin(api, tenures):
    t0, rows = tenures
    items = {item["id"]: item for item in api.get(f"{API}/tenures/").json()["results"]}
    t1, t2, t3, t4 = (items[rows[f"t{i}"].id] for i in range(1, 5))
    assert (t1["holder"], t1["via"], t1["client_request_id"], t1["end"], t1["ended_by"]) == (
        "token:root", "api", "c-1", "released", "token:root")
    assert t1["fingerprints"].split()[0] == t1["lease_fingerprint"] == fingerprints.of(ID1)
    assert t1["fingerprints"].split()[1].startswith(fingerprints.of(ID2) + "@")
    assert (t2["holder"], t2["via"], t2["end"], t2["ended_by"], t2["settled_by"]) == (
        f"account:{DEV_ACCOUNT}", "azure", "expired", "", "")  # nothing wrote since: expired by its deadline
    assert t2["ended_at"] == t2["deadline"]
    assert (t3["end"], t3["ended_by"], t3["settled_by"], t3["deadline"]) == ("broken", "user:admin", "break", None)
    assert (t4["end"], t4["ended_at"], t4["deadline"], t4["generation"]) == ("held", None, None, 2)


@pytest.mark.parametrize("query, expected", [
    ({}, ["t4", "t3", "t2", "t1"]),
    ({"ordering": "id"}, ["t1", "t2", "t3", "t4"]),
    ({"resource": BOX}, ["t4", "t1"]),
    ({"resource": f"{BOX}/b"}, ["t2"]),
    ({"account": OTHER_ACCOUNT}, ["t3"]),
    ({"container": "box"}, ["t4", "t2", "t1"]),
    ({"blob": "b"}, ["t2"]),
    ({"resource_type": "container"}, ["t4", "t3", "t1"]),
    ({"lease_id": ID2}, ["t1"]),  # the id a change gave it
    ({"lease_fingerprint": fingerprints.of(ID1)}, ["t1"]),
    ({"holder": "cli"}, ["t3"]),
    ({"via": "azure"}, ["t2"]),
    ({"client_request_id": "c-1"}, ["t1"]),
    ({"generation": "2"}, ["t4"]),
    ({"end": "held"}, ["t4"]),
    ({"end": "expired,broken"}, ["t3", "t2"]),
    ({"end": "released"}, ["t1"]),
])
def test_tenure_filters(api, tenures, query, expected):
    assert names(tenures, api.get(f"{API}/tenures/", query)) == expected


def test_tenures_by_time(api, tenures):
    t0, _ = tenures
    at = lambda seconds: (t0 + timedelta(seconds=seconds)).isoformat()  # noqa: E731
    assert names(tenures, api.get(f"{API}/tenures/", {"held_at": at(7)})) == ["t3", "t2", "t1"]
    assert names(tenures, api.get(f"{API}/tenures/", {"held_at": at(12)})) == ["t2"]  # t2 expires at 15
    assert names(tenures, api.get(f"{API}/tenures/", {"held_at": at(16)})) == []
    assert names(tenures, api.get(f"{API}/tenures/", {"began_at_after": at(1)})) == ["t4", "t3"]


def test_cursor_pages(api, tenures):
    first = api.get(f"{API}/tenures/", {"page_size": 3}).json()
    second = api.get(first["next"]).json()
    assert names(tenures, api.get(f"{API}/tenures/", {"page_size": 3})) == ["t4", "t3", "t2"]
    assert [item["id"] for item in second["results"]] == [tenures[1]["t1"].id] and second["next"] is None


@pytest.mark.parametrize("query, field", [({"lease_fingerprint": "xyz"}, "lease_fingerprint"),
                                          ({"lease_id": "nope"}, "lease_id"), ({"end": "gone"}, "end"),
                                          ({"held_at": "noon"}, "held_at"), ({"ordering": "holder"}, "ordering"),
                                          ({"generation": "two"}, "generation"), ({"page_size": "0"}, "page_size")])
def test_bad_tenure_queries(api, tenures, query, field):
    response = api.get(f"{API}/tenures/", query)
    assert (response.status_code, response.json()["code"], response.json()["field"]) == (
        400, "InvalidQueryParameterValue", field)


def test_a_sharedkey_account_sees_only_its_own(tenures):
    # Scoped as the events are (leases.api.selectors).
    from leases.api.selectors import tenures_for
    from leases.auth.sharedkey import AccountPrincipal
    assert {t.account for t in tenures_for(AccountPrincipal(OTHER_ACCOUNT))} == {OTHER_ACCOUNT}


def export(api, **query_and_headers):
    headers = {k: v for k, v in query_and_headers.items() if k.startswith("HTTP_")}
    query = {k: v for k, v in query_and_headers.items() if not k.startswith("HTTP_")}
    response = api.get(f"{API}/tenures/export/", query, **headers)
    assert response.status_code == 200, response.content
    return response, b"".join(response.streaming_content).decode()


def test_csv_export(api, tenures):
    response, text = export(api, format="csv", resource=BOX)
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="lease-tenures.csv"'
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == TENURE_FIELDS
    assert [int(r["id"]) for r in rows] == [tenures[1]["t1"].id, tenures[1]["t4"].id]  # oldest first
    assert (rows[0]["end"], rows[0]["ended_by"], rows[1]["end"], rows[1]["deadline"]) == (
        "released", "token:root", "", "")


def test_ndjson_export_by_accept_header(api, tenures):
    response, text = export(api, HTTP_ACCEPT="application/x-ndjson", end="broken")
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    [line] = [json.loads(line) for line in text.splitlines()]
    assert (line["account"], line["end"], line["holder"]) == (OTHER_ACCOUNT, "broken", "cli")


def test_export_refusals_are_json(api, tenures):
    response = api.get(f"{API}/tenures/export/", {"format": "csv", "end": "gone"})
    assert (response.status_code, response.json()["code"]) == (400, "InvalidQueryParameterValue")
    response = api.get(f"{API}/tenures/export/", HTTP_ACCEPT="application/json")
    assert (response.status_code, response.json()["code"]) == (406, "NotAcceptable")


def test_tenures_need_the_history_permission(client_with, tenures):
    for url in ("tenures/", "tenures/export/?format=csv"):
        response = client_with("leases.view_blob", "leases.break_blob_lease").get(f"{API}/{url}")
        assert (response.status_code, response.json()["code"]) == (403, "AuthorizationPermissionMismatch")
        assert client_with("leases.view_leaseevent").get(f"{API}/{url}").status_code == 200


def test_tenures_are_read_only_and_attempts_are_recorded(api, tenures):
    response = api.delete(f"{API}/tenures/")
    assert response.status_code == 405
    assert LeaseEvent.objects.filter(action="history-delete", outcome="refused").count() == 1
    assert Tenure.objects.count() == 4


def renewed(api, clock, *, every: int, times: int):
    """A 15-s lease on box from now (returned), renewed ``times`` every ``every`` seconds."""
    t0 = clock.freeze()
    make_container("box")
    lease(api, "acquire", BOX, {"duration": 15, "proposed_lease_id": ID1})
    for _ in range(times):
        clock.advance(every)
        lease(api, "renew", BOX, {"lease_id": ID1})
    return t0


def test_holder_after_pruning_the_renewals(api, accounts, clock):
    """Issue 49, as an auditor tried it: 15-s lease, renewed every 5 s for 20 s, renewals pruned."""
    t0 = renewed(api, clock, every=5, times=4)
    clock.advance(10)
    call_command("leasehold_prune", "--renewals", "2s", "--no-pause", stdout=io.StringIO())
    assert not LeaseEvent.objects.filter(action="renew").exists()
    response = api.get(f"{API}/events/holder/", {"account": DEV_ACCOUNT, "container": "box",
                                                 "at": (t0 + timedelta(seconds=17)).isoformat()})
    assert response.json()["holder"]["holder"] == "token:root"


def test_a_renewed_tenure_shows_its_latest_deadline(api, accounts, clock):
    """Renewals write no tenure (decision 0052): the list, its filters and the export read the
    deadline from the lease row."""
    t0 = renewed(api, clock, every=10, times=3)
    clock.advance(5)
    deadline = (t0 + timedelta(seconds=45)).isoformat().replace("+00:00", "Z")
    at = (t0 + timedelta(seconds=40)).isoformat()
    for query in ({}, {"end": "held"}, {"held_at": at}):
        [row] = api.get(f"{API}/tenures/", query).json()["results"]
        assert (row["deadline"], row["end"]) == (deadline, "held"), query
    assert api.get(f"{API}/tenures/", {"end": "expired"}).json()["results"] == []
    [row] = csv.DictReader(io.StringIO(export(api, format="csv")[1]))
    assert row["deadline"] == deadline
