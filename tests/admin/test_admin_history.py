"""The lease history admin (read-only, filters, search, dates, CSV), the
history and "who held it" panel of a blob's page, and the dashboard."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta, timezone
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leases.domain import fingerprints, machine
from leases.domain.errors import LeaseholdError
from leases.models import Blob, LeaseEvent
from leases.services import Actor, ResourceRef, lease_acquire, lease_break, lease_renew

from .helpers import ACCOUNT, CONTAINER, app

HISTORY = "/admin/leases/leaseevent/"
BLOBS = "/admin/leases/blob/"
DASHBOARD = "/admin/leases/leaseevent/dashboard/"


def listed(response) -> list[LeaseEvent]:
    assert response.status_code == 200, response.status_code
    return list(response.context["cl"].result_list)


def refuse_acquire(ref: ResourceRef, actor: Actor | None = None) -> None:
    with pytest.raises(LeaseholdError):
        lease_acquire(ref=ref, actor=actor or app(), duration=15)


# ------------------------------------------------------------------ read-only

def test_history_cannot_be_added_changed_or_deleted_even_by_a_superuser(superuser_client, estate):
    event = LeaseEvent.objects.first()
    assert superuser_client.get(f"{HISTORY}add/").status_code == 403
    assert superuser_client.post(f"{HISTORY}add/", {"action": "acquire"}).status_code == 403
    assert superuser_client.post(f"{HISTORY}{event.pk}/change/", {"action": "forged"}).status_code == 403
    assert superuser_client.get(f"{HISTORY}{event.pk}/delete/").status_code == 403
    assert superuser_client.post(f"{HISTORY}{event.pk}/delete/", {"post": "yes"}).status_code == 403
    listing = superuser_client.get(HISTORY).content.decode()
    assert 'class="action-select"' not in listing and "delete_selected" not in listing
    assert "Add lease event" not in listing
    superuser_client.post(HISTORY, {"action": "delete_selected", "_selected_action": [str(event.pk)], "post": "yes"})
    page = superuser_client.get(f"{HISTORY}{event.pk}/change/").content.decode()
    assert 'name="_save"' not in page and "Delete" not in page
    assert LeaseEvent.objects.filter(pk=event.pk, action=event.action).exists()
    assert LeaseEvent.objects.exclude(resource_type="history").count() == 8
    # The three POSTs that would add, change or delete an event are recorded as refused.
    assert sorted(LeaseEvent.objects.filter(resource_type="history", outcome="refused").values_list(
        "action", flat=True)) == ["history-change", "history-change", "history-delete"]


def test_history_lists_newest_first(superuser_client, estate):
    events = listed(superuser_client.get(HISTORY))
    assert [e.occurred_at for e in events] == sorted((e.occurred_at for e in events), reverse=True)
    assert events[0].action == "acquire" and events[0].resource_type == "container"
    assert events[-1].blob == "expired.txt"
    page = superuser_client.get(HISTORY).content.decode()
    assert "opsstore/<wbr>orders/<wbr>breaking.txt</a>" in page and "leased → breaking" in page
    assert 'account:opsstore <span class="lease-quiet">via azure</span>' in page


def test_event_page_links_to_its_resource_and_its_history(superuser_client, estate):
    event = LeaseEvent.objects.get(action="break", blob="broken.txt")
    page = superuser_client.get(f"{HISTORY}{event.pk}/change/").content.decode()
    assert f'href="{BLOBS}{estate.blobs["broken"].pk}/change/"' in page
    assert f'href="{HISTORY}?account={ACCOUNT}&amp;container={CONTAINER}&amp;blob=broken.txt"' in page
    assert "leased → broken" in page and "LeaseAlreadyPresent" not in page


# ------------------------------------------------------------------ filters

@pytest.fixture
def varied(estate):
    """The estate's events plus a refused acquire by an operator, and one
    event in a second account."""
    from leases.services import account_ensure, blob_put, container_create

    refuse_acquire(estate.ref("leased"), Actor(name="user:bob", via="api"))
    account_ensure(name="zeta", key1="a2V5")
    container_create(account="zeta", name="logs")
    ref = ResourceRef("zeta", "logs", "app.log")
    blob_put(ref=ref, actor=app(), content=b"")
    lease_acquire(ref=ref, actor=app(), duration=15)
    return estate


@pytest.mark.parametrize("params, expected", [
    ({"action": "break"}, {("break", "breaking.txt"), ("break", "broken.txt")}),
    ({"outcome": "refused"}, {("acquire", "leased.txt")}),
    ({"actor": "user:bob"}, {("acquire", "leased.txt")}),
    ({"account": "zeta"}, {("acquire", "app.log")}),
    ({"container": "logs"}, {("acquire", "app.log")}),
    ({"account": ACCOUNT, "container": CONTAINER, "blob": "breaking.txt"},
     {("acquire", "breaking.txt"), ("break", "breaking.txt")}),
])
def test_filters(superuser_client, varied, params, expected):
    assert {(e.action, e.blob) for e in listed(superuser_client.get(HISTORY, params))} == expected


def test_filter_choices_come_from_the_indexes(superuser_client, varied):
    cl = superuser_client.get(HISTORY).context["cl"]
    choices = {spec.title: [c[0] for c in spec.lookup_choices] for spec in cl.filter_specs
               if hasattr(spec, "lookup_choices")}  # outcome's come from the field's choices
    assert choices["action"] == ["acquire", "break"]
    assert choices["actor"] == ["account:opsstore", "user:bob"]
    assert choices["account"] == [ACCOUNT, "zeta"]
    assert choices["container"] == ["logs", CONTAINER]
    # With an account chosen: its containers (the Container rows: no index of the history is led by
    # account then container), and the chosen one if it has none now
    scoped = superuser_client.get(HISTORY, {"account": "zeta"}).context["cl"]
    assert [c[0] for c in scoped.filter_specs[-1].lookup_choices] == ["logs"]
    nobody = superuser_client.get(HISTORY, {"account": "nobody", "container": "gone"}).context["cl"]
    assert [c[0] for c in nobody.filter_specs[-1].lookup_choices] == ["gone"]


def test_distinct_values_reads_one_index_entry_per_value(varied):
    from leases.admin.filters import distinct_values

    assert distinct_values(LeaseEvent, "actor") == ["account:opsstore", "user:bob"]
    assert distinct_values(LeaseEvent, "actor", limit=1) == ["account:opsstore"]


# ------------------------------------------------------------------ search

def test_search(superuser_client, varied):
    leased = LeaseEvent.objects.get(blob="leased.txt", outcome="success")
    refused = LeaseEvent.objects.get(outcome="refused")

    def found(term):
        return {e.pk for e in listed(superuser_client.get(HISTORY, {"q": term}))}

    lease_id = Blob.objects.get(name="leased.txt").lease_id
    assert leased.lease_fingerprint == fingerprints.of(lease_id)
    assert found(leased.lease_fingerprint) == {leased.pk}  # by the fingerprint the pages show
    assert found(leased.lease_fingerprint.upper()) == {leased.pk}
    assert found(str(lease_id)) == {leased.pk}  # or by the full id, in any GUID spelling
    assert found("{" + str(lease_id).upper() + "}") == {leased.pk}
    assert found(str(lease_id)[:8]) == set()  # no id prefix: the pages show none
    assert found(leased.request_id) == {leased.pk}
    assert found("client-req-1") == set(LeaseEvent.objects.filter(client_request_id="client-req-1")
                                        .values_list("pk", flat=True))
    assert found("leased.txt") == {leased.pk, refused.pk}
    assert found(f"{ACCOUNT}/{CONTAINER}/leased.txt") == {leased.pk, refused.pk}
    assert found("leased") == {leased.pk, refused.pk}  # part of a name, any case (no exact match)
    assert found("EASED.T") == {leased.pk, refused.pk}
    assert found("opsstore leased") == {leased.pk, refused.pk}  # every word, in any column


def test_substring_search_reads_a_bounded_window_of_the_newest_events(superuser_client, varied, monkeypatch):
    """A substring is looked for in the newest SUBSTRING_WINDOW events of
    the filtered list; exact terms in all of it. The page says so."""
    monkeypatch.setattr("leases.admin.history.SUBSTRING_WINDOW", 2)
    newest_two = list(LeaseEvent.objects.order_by("-id")[:2])
    oldest = LeaseEvent.objects.order_by("id").first()

    def found(term):
        return {e.pk for e in listed(superuser_client.get(HISTORY, {"q": term}))}

    assert found("opsstore") == {e.pk for e in newest_two}
    assert found(oldest.request_id or oldest.lease_fingerprint) >= {oldest.pk}  # exact: all history
    help_text = superuser_client.get(HISTORY).content.decode()
    assert "in the newest 50,000 events" in help_text
    assert found("logs") == set(LeaseEvent.objects.filter(container="logs").values_list("pk", flat=True))
    assert found(f"{ACCOUNT}/{CONTAINER}") == {LeaseEvent.objects.get(resource_type="container").pk}


# ------------------------------------------------------------------ dates

@pytest.fixture
def spread(db, clock, settings):
    """Events on 10 and 12 March and 1 May 2025 (days cut in UTC)."""
    from leases.services import account_ensure, blob_put, container_create

    settings.TIME_ZONE = "UTC"
    clock.freeze(datetime(2025, 3, 10, 12, tzinfo=UTC))
    account_ensure(name=ACCOUNT, key1="a2V5")
    container_create(account=ACCOUNT, name=CONTAINER)
    ref = ResourceRef(ACCOUNT, CONTAINER, "a.txt")
    blob_put(ref=ref, actor=app(), content=b"")
    lease = lease_acquire(ref=ref, actor=app(), duration=machine.INFINITE)
    clock.advance(2 * 86400)
    lease_renew(ref=ref, actor=app(), lease_id=lease.lease_id)
    clock.freeze(datetime(2025, 5, 1, 8, tzinfo=UTC))
    lease_break(ref=ref, actor=app(), break_period=0)


def drilldown(response) -> list[str]:
    """The date drill-down's texts: the way back, then the periods."""
    nav = re.search(r'<nav class="toplinks">(.*?)</nav>', response.content.decode(), re.DOTALL)
    return [unescape(t.strip()) for t in re.split(r"<[^>]+>", nav.group(1)) if t.strip()] if nav else []


def test_date_drilldown_without_scanning_the_table(superuser_client, spread):
    with CaptureQueriesContext(connection) as queries:
        response = superuser_client.get(HISTORY)
    sql = " ".join(q["sql"] for q in queries)
    assert "DISTINCT" not in sql and "django_datetime_trunc" not in sql and "MAX(" not in sql
    # One year: it starts with that year's months, from the first event's to the last's.
    assert drilldown(response) == ["‹ All dates", "March 2025", "April 2025", "May 2025"]
    assert len(listed(response)) == 3

    march = superuser_client.get(HISTORY, {"occurred_at__year": 2025, "occurred_at__month": 3})
    assert drilldown(march) == ["‹ 2025", "March 10", "March 11", "March 12"]
    assert [e.action for e in listed(march)] == ["renew", "acquire"]

    day = superuser_client.get(HISTORY, {"occurred_at__year": 2025, "occurred_at__month": 3, "occurred_at__day": 12})
    assert drilldown(day) == ["‹ March 2025", "March 12"]
    assert [e.action for e in listed(day)] == ["renew"]

    assert drilldown(superuser_client.get(HISTORY, {"occurred_at__year": 2024})) == ["‹ All dates"]
    # The periods come from the whole history, whatever else the list filters.
    assert drilldown(superuser_client.get(HISTORY, {"action": "break"}))[1:] == ["March 2025", "April 2025", "May 2025"]
    assert drilldown(superuser_client.get(HISTORY, {"q": "a.txt"})) == []


# ------------------------------------------------------------------ CSV

def test_csv_export_of_the_filtered_list(superuser_client, estate):
    lease_break(ref=estate.ref("leased"), actor=Actor(name="user:root", via="admin"), reason="=HYPERLINK(\"x\")")
    response = superuser_client.get(f"{HISTORY}export.csv", {"action": "break"})
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="lease-history-')
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [(r["blob"], r["actor"]) for r in rows] == [
        ("leased.txt", "user:root"), ("broken.txt", app().name), ("breaking.txt", app().name)]
    assert rows[0]["reason"] == "'=HYPERLINK(\"x\")"  # not a formula in a spreadsheet
    assert rows[0]["occurred_at"].endswith("+00:00") and \
        rows[0]["lease_fingerprint"] == fingerprints.of(estate.blobs["leased"].lease_id)

    page = superuser_client.get(HISTORY, {"action": "break"}).content.decode()
    assert f'href="{HISTORY}export.csv?action=break"' in page


def test_csv_export_of_a_bad_filter_goes_back_to_the_list(superuser_client, estate):
    response = superuser_client.get(f"{HISTORY}export.csv", {"occurred_at__year": "x"})
    assert response.status_code == 302 and response.url == f"{HISTORY}?e=1"


def test_csv_export_needs_the_view_permission(client, django_user_model, estate):
    client.force_login(django_user_model.objects.create_user("nobody", is_staff=True))
    assert client.get(f"{HISTORY}export.csv").status_code == 403


# ------------------------------------------------------------------ a resource's page

def test_blob_page_shows_recent_history_newest_first(superuser_client, estate, clock):
    obj = estate.blobs["infinite"]
    for _ in range(25):
        clock.advance(1)
        lease_renew(ref=estate.ref("infinite"), actor=app(), lease_id=obj.lease_id)
    page = superuser_client.get(f"{BLOBS}{obj.pk}/change/").content.decode()
    history = page[page.index('id="lease-history"'):page.index('id="lease-holder-at"')]
    actions = re.findall(r"<td>(acquire|renew)</td>", history)
    assert actions == ["renew"] * 20  # the 20 newest; the acquire is further back
    times = re.findall(r'<time datetime="([^"]+)"', history)
    assert times == sorted(times, reverse=True)
    assert f'href="{HISTORY}?account={ACCOUNT}&amp;container={CONTAINER}&amp;blob=infinite.txt"' in history


def test_who_held_it_at_a_given_time(superuser_client, estate):
    obj = estate.blobs["leased"]
    acquired = obj.lease_acquired_at
    url = f"{BLOBS}{obj.pk}/change/"

    def held(when: datetime, tz: str = "") -> str:
        page = superuser_client.get(url, {"held_at": when.strftime("%Y-%m-%dT%H:%M:%S"), "tz": tz}).content.decode()
        return page[page.index('id="lease-holder-at"'):]

    during = held(acquired + timedelta(seconds=10))
    assert "<dd>account:opsstore</dd>" in during and fingerprints.of(obj.lease_id) in during
    assert "client-req-1" in during and str(obj.lease_id) not in during
    assert "Nobody held a lease on it" in held(acquired - timedelta(seconds=10))
    assert "Nobody held a lease on it" in held(acquired + timedelta(seconds=61))  # expired by then
    # The browser sends its zone: 10 s after the acquire, in Tokyo's local time.
    tokyo = (acquired + timedelta(seconds=10)).astimezone(timezone(timedelta(hours=9))).replace(tzinfo=None)
    assert "<dd>account:opsstore</dd>" in held(tokyo, "Asia/Tokyo")
    assert "Nobody held a lease on it" in held(tokyo)  # the same wall time read as the server's (UTC)
    assert "<dd>account:opsstore</dd>" in held(acquired + timedelta(seconds=10), "Not/AZone")  # ignored


# ------------------------------------------------------------------ dashboard

def test_dashboard_counts_states_and_lists_what_ends_soon(superuser_client, estate):
    refuse_acquire(estate.ref("leased"))
    panel = superuser_client.get(DASHBOARD, {"embed": 1})
    html = panel.content.decode()
    assert "<html" not in html  # a fragment for the index page
    counts = {g["name"]: {s["state"]: s["count"] for s in g["states"]} for g in panel.context["counts"]}
    assert counts == {
        "containers": {"available": "0", "leased": "1", "expired": "0", "breaking": "0", "broken": "0"},
        "blobs": {"available": "1", "leased": "2", "expired": "1", "breaking": "1", "broken": "1"},
    }
    assert [str(row["obj"]) for row in panel.context["ending"]] == [
        "opsstore/orders/breaking.txt", "opsstore/orders", "opsstore/orders/leased.txt"]
    assert [e.blob for e in panel.context["breaks"]] == ["broken.txt", "breaking.txt"]
    assert [(e.blob, e.error_code) for e in panel.context["refusals"]] == [("leased.txt", "LeaseAlreadyPresent")]
    assert f'href="{BLOBS}?state=breaking"' in html and 'data-remaining="30.000"' in html

    full = superuser_client.get(DASHBOARD).content.decode()
    assert "<html" in full and "Lease dashboard" in full and "Ending within a minute" in full


def test_dashboard_counts_stop_at_the_cap(superuser_client, estate, monkeypatch):
    monkeypatch.setattr("leases.admin.paging.CappedCountPaginator.CAP", 1)
    panel = superuser_client.get(DASHBOARD, {"embed": 1})
    blobs = {s["state"]: s["count"] for s in panel.context["counts"][1]["states"]}
    assert blobs["leased"] == "1+" and blobs["available"] == "1"


def test_admin_index_loads_the_dashboard(superuser_client, estate):
    page = superuser_client.get("/admin/").content.decode()
    assert f'data-src="{DASHBOARD}?embed=1"' in page


def test_dashboard_shows_what_the_user_may_view(client, django_user_model, viewer, estate):
    from django.contrib.auth.models import Permission

    client.force_login(django_user_model.objects.create_user("nobody", is_staff=True))
    assert client.get(DASHBOARD).status_code == 403
    assert 'id="lease-dashboard"' not in client.get("/admin/").content.decode()

    history_only = django_user_model.objects.create_user("auditor", is_staff=True)
    history_only.user_permissions.add(Permission.objects.get(codename="view_leaseevent"))
    client.force_login(history_only)
    panel = client.get(DASHBOARD, {"embed": 1})
    assert panel.context["counts"] == [] and len(panel.context["breaks"]) == 2
    assert "Ending within a minute" not in panel.content.decode()

    client.force_login(viewer)
    assert len(client.get(DASHBOARD, {"embed": 1}).context["counts"]) == 2
