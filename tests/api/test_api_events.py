"""The lease history through the JSON API: filters, ordering, cursor
pages that hold still while events are appended, CSV and NDJSON exports,
and "who held R at T"."""

from __future__ import annotations

import base64
import csv
import io
import json
from datetime import timedelta, timezone

import pytest

from leases.domain import fingerprints, spreadsheet
from leases import services
from leases.api.serializers import EVENT_FIELDS
from leases.models import LeaseEvent
from leases.services import Actor, ResourceRef
from tests.api.helpers import API, DEV_ACCOUNT, OTHER_ACCOUNT, lease, make_blob, make_container

pytestmark = pytest.mark.also_postgres

ID1 = "11111111-1111-1111-1111-111111111111"
ID2 = "22222222-2222-2222-2222-222222222222"
BOX = f"{DEV_ACCOUNT}/box"


@pytest.fixture
def history(api, accounts, clock):
    """Six events, named e1..e6, the last five a minute after the first two."""
    t0 = clock.freeze()
    make_container("box")
    make_blob("box", "b")
    make_container("other", account=OTHER_ACCOUNT)
    lease(api, "acquire", BOX, {"duration": -1, "proposed_lease_id": ID1}, HTTP_X_CLIENT_REQUEST_ID="c-1")
    lease(api, "acquire", BOX, {"duration": 15})
    clock.advance(60)
    lease(api, "change", BOX, {"lease_id": ID1, "proposed_lease_id": ID2})
    services.lease_acquire(ref=ResourceRef(DEV_ACCOUNT, "box", "b"), duration=15,
                           actor=Actor(name=f"account:{DEV_ACCOUNT}", via="azure"))
    services.lease_acquire(ref=ResourceRef(OTHER_ACCOUNT, "other"), duration=15, actor=Actor(name="cli", via="cli"))
    lease(api, "release", BOX, {"lease_id": ID2})
    events = list(LeaseEvent.objects.order_by("id"))
    assert len(events) == 6
    return t0, {f"e{i}": event for i, event in enumerate(events, 1)}


def event_names(history, response) -> list[str]:
    assert response.status_code == 200, response.content
    by_id = {event.id: name for name, event in history[1].items()}
    return [by_id[item["id"]] for item in response.json()["results"]]


@pytest.mark.parametrize("query, expected", [
    ({}, ["e6", "e5", "e4", "e3", "e2", "e1"]),
    ({"ordering": "id"}, ["e1", "e2", "e3", "e4", "e5", "e6"]),
    ({"resource": BOX}, ["e6", "e3", "e2", "e1"]),
    ({"resource": f"{BOX}/b"}, ["e4"]),
    ({"account": OTHER_ACCOUNT}, ["e5"]),
    ({"container": "box"}, ["e6", "e4", "e3", "e2", "e1"]),
    ({"blob": "b"}, ["e4"]),
    ({"resource_type": "blob"}, ["e4"]),
    ({"lease_id": ID1}, ["e3", "e1"]),
    ({"lease_id": ID2}, ["e6", "e3"]),
    ({"lease_fingerprint": fingerprints.of(ID1)}, ["e3", "e1"]),
    ({"lease_fingerprint": fingerprints.of(ID2)}, ["e6", "e3"]),
    ({"action": "change,release"}, ["e6", "e3"]),
    ({"outcome": "refused"}, ["e2"]),
    ({"actor": "token:root"}, ["e6", "e3", "e2", "e1"]),
    ({"via": "azure"}, ["e4"]),
    ({"error_code": "LeaseAlreadyPresent"}, ["e2"]),
    ({"client_request_id": "c-1"}, ["e1"]),
    ({"account": DEV_ACCOUNT, "action": "acquire", "outcome": "success"}, ["e4", "e1"]),
])
def test_event_filters(api, history, query, expected):
    assert event_names(history, api.get(f"{API}/events/", query)) == expected


def test_events_by_request_id_and_time_range(api, history):
    t0, events = history
    assert event_names(history, api.get(f"{API}/events/", {"request_id": events["e3"].request_id})) == ["e3"]
    middle = (t0 + timedelta(seconds=30)).isoformat()
    assert event_names(history, api.get(f"{API}/events/", {"occurred_at_before": middle})) == ["e2", "e1"]
    assert event_names(history, api.get(f"{API}/events/", {"occurred_at_after": middle, "via": "api"})) == [
        "e6", "e3"]


def test_time_range_in_any_utc_offset_python_accepts(api, history):
    """PostgreSQL refuses offsets beyond 15:59, so the filter sends every
    time in UTC: never a 500."""
    t0, _ = history
    middle = t0 + timedelta(seconds=30)
    for hours in (-23, 20, 23):
        offset = timedelta(hours=hours, minutes=59 if hours > 0 else 0)
        local = middle.astimezone(timezone(offset)).isoformat()
        assert event_names(history, api.get(f"{API}/events/", {"occurred_at_before": local})) == ["e2", "e1"]


@pytest.mark.parametrize("query, field", [({"lease_id": "nope"}, "lease_id"), ({"outcome": "maybe"}, "outcome"),
                                          ({"occurred_at_after": "soon"}, "occurred_at"),
                                          ({"occurred_at_after": "0001-01-01T00:00:00+23:00"}, "occurred_at"),
                                          ({"occurred_at_before": "9999-12-31T23:59:59-23:00"}, "occurred_at"),
                                          ({"resource_type": "queue"}, "resource_type")])
def test_bad_event_queries(api, history, query, field):
    response = api.get(f"{API}/events/", query)
    assert (response.status_code, response.json()["code"], response.json()["field"]) == (
        400, "InvalidQueryParameterValue", field)


@pytest.mark.parametrize("position", [b"p=abc", b"p=1.5&r=1"])
def test_a_forged_cursor_is_400(api, history, position):
    response = api.get(f"{API}/events/", {"cursor": base64.b64encode(position).decode()})
    assert (response.status_code, response.json()["code"], response.json()["field"]) == (
        400, "InvalidQueryParameterValue", "cursor")


def test_the_api_never_writes_history(api, history):
    for method in (api.post, api.put, api.patch, api.delete):
        response = method(f"{API}/events/", {}, format="json")
        assert (response.status_code, response.json()["code"]) == (405, "UnsupportedHttpVerb")
    assert LeaseEvent.objects.exclude(resource_type="history").count() == 6
    # Each attempt is only recorded, as refused (tests/services/test_history_append_only.py).
    assert LeaseEvent.objects.filter(resource_type="history", outcome="refused").count() == 4


def renew(api):
    assert lease(api, "renew", BOX, {"lease_id": ID1}).status_code == 200


@pytest.mark.parametrize("ordering", ["-id", "id"])
def test_cursor_pages_hold_still_while_events_are_appended(api, accounts, clock, ordering):
    clock.freeze()  # every event gets the same occurred_at: a time-ordered cursor could not tell them apart
    make_container("box")
    lease(api, "acquire", BOX, {"duration": -1, "proposed_lease_id": ID1})
    for _ in range(4):
        renew(api)
    before = list(LeaseEvent.objects.values_list("id", flat=True).order_by(ordering))
    seen = []
    page = api.get(f"{API}/events/", {"page_size": 2, "ordering": ordering}).json()
    while True:
        seen += [event["id"] for event in page["results"]]
        renew(api)  # one event appended per page of two read: an oldest-first walk catches up
        if not page["next"]:
            break
        page = api.get(page["next"]).json()
    if ordering == "-id":
        assert seen == before  # newest first: what is appended is newer than the walk, never in it
    else:  # oldest first: the appended events come at the end, each once
        assert seen == list(LeaseEvent.objects.values_list("id", flat=True).order_by("id"))[:len(seen)]
        assert seen[:len(before)] == before and len(seen) > len(before)


# ------------------------------------------------------------------ exports

def export(api, **query_and_headers):
    headers = {k: v for k, v in query_and_headers.items() if k.startswith("HTTP_")}
    query = {k: v for k, v in query_and_headers.items() if not k.startswith("HTTP_")}
    response = api.get(f"{API}/events/export/", query, **headers)
    assert response.status_code == 200, response.content
    return response, b"".join(response.streaming_content).decode()


def test_csv_export_has_the_list_columns_and_values(api, history):
    response, text = export(api, format="csv", resource=BOX)
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="lease-events.csv"'
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == EVENT_FIELDS
    listed = api.get(f"{API}/events/", {"resource": BOX, "ordering": "id"}).json()["results"]
    assert len(rows) == len(listed) == 4
    for row, item in zip(rows, listed, strict=True):  # oldest first, formatted as in the JSON list
        assert row == {k: "" if v is None else str(v) for k, v in item.items()}


def test_ndjson_export_by_accept_header(api, history):
    response, text = export(api, HTTP_ACCEPT="application/x-ndjson", outcome="refused")
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines == api.get(f"{API}/events/", {"outcome": "refused"}).json()["results"]


def test_csv_cells_that_a_spreadsheet_would_run_are_defused(api, history):
    lease(api, "break", BOX, HTTP_USER_AGENT="=HYPERLINK(\"http://evil\")")
    _, text = export(api, format="csv", action="break")
    assert list(csv.DictReader(io.StringIO(text)))[0]["user_agent"] == "'=HYPERLINK(\"http://evil\")"
    _, text = export(api, format="ndjson", action="break")
    assert json.loads(text)["user_agent"] == "=HYPERLINK(\"http://evil\")"  # JSON needs no defusing


@pytest.mark.parametrize("reason", [" =1+1", "\u00a0=1+1", "\u3000=1+1", "\ufeff=1+1", "\uff1d1+1", " \uff0bcmd",
                                    "\uff0d1+1", "\uff20SUM(A1)", "\n=1+1", "|calc"])
def test_csv_cells_a_spreadsheet_would_run_after_white_space_or_in_full_width_are_defused(api, history, reason):
    """A spreadsheet skips leading spaces and reads full-width ＝ as =. (The
    API trims a reason's white space; the user agent keeps it.)"""
    lease(api, "break", BOX, {"reason": reason}, HTTP_USER_AGENT=" =1+1")
    _, text = export(api, format="csv", action="break")
    row = list(csv.DictReader(io.StringIO(text)))[0]
    assert row["reason"] == "'" + reason.strip() and row["user_agent"] == "' =1+1"
    assert spreadsheet.defused(reason) == "'" + reason  # white space kept, as other columns may


@pytest.mark.parametrize("reason", ["plain", "a=1", "1+1", "\uff21=1"])
def test_csv_cells_a_spreadsheet_would_not_run_are_left_alone(api, history, reason):
    lease(api, "break", BOX, {"reason": reason})
    _, text = export(api, format="csv", action="break")
    assert list(csv.DictReader(io.StringIO(text)))[0]["reason"] == reason


def test_export_format_negotiation_failures(api, history):
    response = api.get(f"{API}/events/export/", HTTP_ACCEPT="application/json")
    assert (response.status_code, response.json()["code"]) == (406, "NotAcceptable")
    response = api.get(f"{API}/events/export/", {"format": "xml"})
    assert (response.status_code, response.json()["code"]) == (404, "ResourceNotFound")


def test_export_refusals_are_json(api, history):
    response = api.get(f"{API}/events/export/", {"format": "csv", "lease_id": "nope"})
    assert response["Content-Type"] == "application/json"
    assert (response.status_code, response.json()["code"]) == (400, "InvalidQueryParameterValue")


# ------------------------------------------------------------------ who held R at T

def holder(api, **query):
    response = api.get(f"{API}/events/holder/", query)
    assert response.status_code == 200, response.content
    return response.json()["holder"]


def test_who_held_a_resource_at_a_time(api, accounts, clock):
    t0 = clock.freeze()
    make_container("box")
    lease(api, "acquire", BOX, {"duration": 15, "proposed_lease_id": ID1}, HTTP_X_CLIENT_REQUEST_ID="job-7")
    clock.advance(10)
    lease(api, "change", BOX, {"lease_id": ID1, "proposed_lease_id": ID2})
    at = lambda seconds: (t0 + timedelta(seconds=seconds)).isoformat()  # noqa: E731
    assert holder(api, account=DEV_ACCOUNT, container="box", at=at(-1)) is None
    held = holder(api, account=DEV_ACCOUNT, container="box", at=at(5))
    assert (held["holder"], held["lease_fingerprint"], held["client_request_id"], held["state"],
            held["generation"]) == ("token:root", fingerprints.of(ID1), "job-7", "leased", 1)
    assert held["since"].startswith(t0.strftime("%Y-%m-%dT%H:%M:%S"))
    assert holder(api, account=DEV_ACCOUNT, container="box", at=at(12))["lease_fingerprint"] == fingerprints.of(ID2)
    assert holder(api, account=DEV_ACCOUNT, container="box", at=at(16)) is None  # expired at t0+15
    assert holder(api, account=DEV_ACCOUNT, container="box", blob="")["lease_fingerprint"] == \
        fingerprints.of(ID2)  # default: now


def test_holder_answer_echoes_the_question(api, accounts, clock):
    now = clock.freeze()
    body = api.get(f"{API}/events/holder/", {"account": DEV_ACCOUNT, "container": "box", "blob": "b"}).json()
    assert (body["account"], body["container"], body["blob"], body["holder"]) == (DEV_ACCOUNT, "box", "b", None)
    assert body["at"].startswith(now.strftime("%Y-%m-%dT%H:%M:%S"))


@pytest.mark.parametrize("query, field", [({"account": DEV_ACCOUNT}, "container"),
                                          ({"account": DEV_ACCOUNT, "container": "box", "at": "noon"}, "at")])
def test_holder_query_refusals(api, accounts, query, field):
    response = api.get(f"{API}/events/holder/", query)
    assert (response.status_code, response.json()["code"], response.json()["field"]) == (
        400, "InvalidQueryParameterValue", field)


def test_history_needs_view_permission(client_with, history):
    assert client_with("leases.view_blob").get(f"{API}/events/").status_code == 403
    assert client_with("leases.view_leaseevent").get(f"{API}/events/").status_code == 200
    for url in ("events/export/?format=csv", f"events/holder/?account={DEV_ACCOUNT}&container=box"):
        response = client_with("leases.view_container").get(f"{API}/{url}")
        assert (response.status_code, response.json()["code"]) == (403, "AuthorizationPermissionMismatch")
        assert client_with("leases.view_leaseevent").get(f"{API}/{url}").status_code == 200
