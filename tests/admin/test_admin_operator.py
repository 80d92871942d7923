"""The operator's admin without a browser: filter chips, resource links from
the history, "who held it" with how the lease ended (deleted blobs too),
the lease section above file metadata, unknown filter values, substring
search, the holder filter, containers' blob counts, and the per-holder view
with its bulk break."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from leases.domain import machine
from leases.models import Blob, LeaseEvent
from leases.services import Actor, blob_delete, lease_acquire, lease_release

from .helpers import ACCOUNT, CONTAINER, app

BLOBS = "/admin/leases/blob/"
CONTAINERS = "/admin/leases/container/"
HISTORY = "/admin/leases/leaseevent/"


def listed(response) -> list[str]:
    assert response.status_code == 200, response.status_code
    return [getattr(obj, "name", None) or obj.blob for obj in response.context["cl"].result_list]


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def held_at(client, url, when, **params):
    return client.get(url, {"held_at": when.strftime("%Y-%m-%dT%H:%M:%S"), **params}).content.decode()


# ------------------------------------------------------------------ history: chips and links

def test_history_shows_its_filters_as_removable_chips(superuser_client, estate):
    response = superuser_client.get(HISTORY, {"action": "break", "account": ACCOUNT, "q": "orders"})
    chips = response.context["filter_chips"]
    assert [(c["name"], c["value"]) for c in chips] == [("action", "break"), ("account", ACCOUNT),
                                                        ("search", "orders")]
    remove_action = chips[0]["remove"]
    assert "action=" not in remove_action and "account=opsstore" in remove_action
    assert 'aria-label="Remove action filter"' in response.content.decode()


def test_history_rows_link_to_their_resource_which_may_be_gone(superuser_client, estate):
    page = superuser_client.get(HISTORY, {"action": "break"}).content.decode()
    found = re.search(r'<a href="(/admin/leases/leaseevent/resource/\?[^"]+blob=broken.txt)">', page)
    assert found, page
    link = found.group(1)
    response = superuser_client.get(link.replace("&amp;", "&"))
    assert response.status_code == 302 and response.url == f"{BLOBS}{estate.blobs['broken'].pk}/change/"

    blob_delete(ref=estate.ref("broken"), actor=app())
    response = superuser_client.get(link.replace("&amp;", "&"), follow=True)
    assert messages_of(response) == [
        "The blob opsstore/orders/broken.txt no longer exists; its lease history remains."]
    assert response.templates[0].name == "admin/leases/leaseevent/holder.html"
    assert "broken.txt" in response.content.decode()


def test_holder_lookup_says_how_the_lease_ended_and_works_after_delete(superuser_client, estate, clock):
    blob = estate.blobs["leased"]
    acquired = blob.lease_acquired_at
    clock.advance(5)
    lease_release(ref=estate.ref("leased"), actor=app(), lease_id=blob.lease_id, reason="job done")
    page = held_at(superuser_client, f"{BLOBS}{blob.pk}/change/", acquired + timedelta(seconds=2))
    assert "account:opsstore" in page and "How it ended" in page
    assert re.search(r'class="lease-ending">released <time[^>]*>[^<]*</time> by account:opsstore '
                     r'\(reason: job done\)', page)
    # Asked after the release: nobody held it, and the one before was released.
    page = held_at(superuser_client, f"{BLOBS}{blob.pk}/change/", acquired + timedelta(seconds=10))
    assert "Nobody held a lease on it" in page and "The lease before had ended: released" in page

    # The expired one: it ran out.
    expired = estate.blobs["expired"]
    page = held_at(superuser_client, f"{BLOBS}{expired.pk}/change/", clock.now())
    assert "The lease before had ended: expired" in page

    # The blob is deleted: the history's page answers the same.
    blob_delete(ref=estate.ref("leased"), actor=app())
    page = held_at(superuser_client, f"{HISTORY}holder/", acquired + timedelta(seconds=2), account=ACCOUNT,
                   container=CONTAINER, blob="leased.txt")
    assert "does not exist now" in page and "account:opsstore" in page and "released" in page


def test_lease_section_comes_before_file_metadata(superuser_client, estate):
    page = superuser_client.get(f"{BLOBS}{estate.blobs['leased'].pk}/change/").content.decode()
    assert page.index("<h2") < page.index("field-content_type")
    assert page.index(">Lease</h2>") < page.index("field-content_type")


# ------------------------------------------------------------------ unknown filter values

@pytest.mark.parametrize("url, params, says", [
    (BLOBS, {"state": "bogus"}, "Unknown lease state “bogus”"),
    (BLOBS, {"duration": "forever"}, "Unknown duration type “forever”"),
    (BLOBS, {"container": "x"}, "Unknown container “x”"),
    (BLOBS, {"account": "99999"}, "Unknown account “99999”"),
    (CONTAINERS, {"state": "bogus"}, "Unknown lease state “bogus”"),
    (HISTORY, {"outcome": "maybe"}, "Unknown outcome “maybe”"),
])
def test_unknown_filter_values_are_answered_clearly(superuser_client, estate, url, params, says):
    response = superuser_client.get(url, params)
    assert response.status_code == 200
    assert any(m.startswith(says) for m in messages_of(response)), messages_of(response)
    assert list(response.context["cl"].result_list) == []  # not silently everything


# ------------------------------------------------------------------ search, holder filter, container counts

def test_container_list_counts_its_blobs_one_click_from_them(superuser_client, estate):
    page = superuser_client.get(CONTAINERS).content.decode()
    link = f'href="{BLOBS}?container={estate.container.pk}"'
    assert link + ' title="The blobs of opsstore/orders">6</a>' in page
    assert len(listed(superuser_client.get(BLOBS, {"container": estate.container.pk}))) == 6
    detail = superuser_client.get(f"{CONTAINERS}{estate.container.pk}/change/").content.decode()
    assert f'<a href="{BLOBS}?container={estate.container.pk}">Its 6 blobs</a>' in detail


def test_holder_filter_lists_what_a_holder_holds_now(superuser_client, estate):
    other = Actor(name="account:node-7", via="azure", remote_addr="10.9.9.9")
    lease_acquire(ref=estate.ref("available"), actor=other, duration=60)
    assert listed(superuser_client.get(BLOBS, {"holder": "account:node-7"})) == ["available.txt"]
    # Held now: leased or breaking; not the expired or broken leases it took.
    assert sorted(listed(superuser_client.get(BLOBS, {"holder": "account:opsstore"}))) == [
        "breaking.txt", "infinite.txt", "leased.txt"]
    assert listed(superuser_client.get(CONTAINERS, {"holder": "account:opsstore"})) == [CONTAINER]


# ------------------------------------------------------------------ holders

def test_holders_page_counts_leases_per_holder_since_when(superuser_client, estate):
    other = Actor(name="account:node-7", via="azure")
    lease_acquire(ref=estate.ref("available"), actor=other, duration=60)
    response = superuser_client.get(f"{BLOBS}holders/")
    assert response.status_code == 200
    rows = response.context["rows"]
    assert [(r["holder"], r["blob"]["leases"], (r["container"] or {}).get("leases")) for r in rows] == [
        ("account:opsstore", 3, 1), ("account:node-7", 1, None)]
    assert rows[0]["blob"]["breaking"] == 1
    opsstore = rows[0]["blob"]
    assert opsstore["since"] == min(estate.blobs[n].lease_acquired_at for n in ("leased", "infinite", "breaking"))
    page = response.content.decode()
    assert f'href="{BLOBS}?holder=account%3Anode-7"' in page
    assert f'href="{BLOBS}holders/break/?holder=account%3Aopsstore+from+10.1.2.3" class="lease-holder-break">' \
           'Break all 3…' in page
    assert (f'href="{CONTAINERS}holders/break/?holder=account%3Aopsstore+from+10.1.2.3" class="lease-holder-break">'
            'Break all 1…' in page)


def test_break_every_lease_of_one_holder_with_confirmation_and_reason(client, breaker, estate):
    client.force_login(breaker)
    other = Actor(name="account:node-7", via="azure")
    lease_acquire(ref=estate.ref("available"), actor=other, duration=60)
    url = f"{BLOBS}holders/break/?holder=account:opsstore"
    page = client.get(url)
    html = page.content.decode()
    assert page.templates[0].name == "admin/leases/lease_confirmation.html"
    assert "Break every blob lease that account:opsstore holds" in html
    assert "These 3 leases will be broken" in html and "available.txt" not in html
    seen = re.findall(r'name="seen" value="([^"]+)"', html)
    assert len(seen) == 3 and not LeaseEvent.objects.filter(via="admin").exists()  # nothing yet

    response = client.post(url, {"post": "yes", "seen": seen, "when": "now", "reason": "node-3 crashed"})
    assert response.status_code == 302 and response.url == f"{BLOBS}holders/"
    assert messages_of(client.get(response.url)) == ["Broke the lease of 3 blobs."]
    events = LeaseEvent.objects.filter(via="admin", action="break")
    assert sorted(e.blob for e in events) == ["breaking.txt", "infinite.txt", "leased.txt"]
    assert {(e.actor, e.reason, e.outcome) for e in events} == {("user:alice", "node-3 crashed", "success")}
    assert Blob.objects.get(name="available.txt").lease_state == machine.LEASED  # another holder's: untouched
    assert estate.container.__class__.objects.get(pk=estate.container.pk).lease_state == machine.LEASED


def test_services_sharing_one_account_key_are_told_apart_and_broken_apart(client, breaker, estate):
    """Every service on the dev account signs with one key: the holder is the
    account and the address the acquire came from, and "Break all" breaks the
    leases of that address only, exactly those its confirmation listed."""
    client.force_login(breaker)
    for name, address in (("available", "10.9.0.1"), ("expired", "10.9.0.1"), ("broken", "10.9.0.2")):
        lease_acquire(ref=estate.ref(name), actor=Actor(name="account:shared", via="azure", remote_addr=address),
                      duration=60)
    rows = client.get(f"{BLOBS}holders/").context["rows"]
    shared = {r["address"]: r["blob"]["leases"] for r in rows if r["holder"] == "account:shared"}
    assert shared == {"10.9.0.1": 2, "10.9.0.2": 1}
    url = f"{BLOBS}holders/break/?holder=account:shared from 10.9.0.1"
    html = client.get(url).content.decode()
    assert "Break every blob lease that account:shared holds from 10.9.0.1" in html
    seen = re.findall(r'name="seen" value="([^"]+)"', html)
    assert len(seen) == 2 and "available.txt" in html and "expired.txt" in html and "broken.txt" not in html
    # A lease the same service takes after the page was shown is not broken by it.
    from leases.services import ResourceRef, blob_put

    late = ResourceRef(ACCOUNT, CONTAINER, "late.txt")
    blob_put(ref=late, actor=app(), content=b"x")
    lease_acquire(ref=late, actor=Actor(name="account:shared", via="azure", remote_addr="10.9.0.1"), duration=60)
    response = client.post(url, {"post": "yes", "seen": seen, "when": "now", "reason": "host 1 died"})
    assert response.status_code == 302
    states = {b.name: b.lease_state for b in Blob.objects.filter(name__in=["available.txt", "expired.txt",
                                                                        "broken.txt", "late.txt"])}
    assert states == {"available.txt": machine.BROKEN, "expired.txt": machine.BROKEN,
                      "broken.txt": machine.LEASED, "late.txt": machine.LEASED}


def test_holder_break_needs_the_models_break_permission(client, viewer, estate):
    client.force_login(viewer)
    response = client.get(f"{BLOBS}holders/break/?holder=account:opsstore", follow=True)
    assert messages_of(response) == ["You may not break blob leases: that needs the “Can break blob lease” "
                                     "permission."]
    assert "lease-holder-break" not in client.get(f"{BLOBS}holders/").content.decode()


# ------------------------------------------------------------------ one time zone

def test_the_operators_zone_cuts_days_and_renders_times(superuser_client, estate):
    superuser_client.cookies["leasehold_tz"] = "Asia/Tokyo"
    response = superuser_client.get(HISTORY)
    assert response.context["date_drilldown"]["zone"] == "Asia/Tokyo"
    page = response.content.decode()
    assert "days in Asia/Tokyo" in page and '<meta name="leasehold-zone" content="Asia/Tokyo">' in page
    assert re.search(r"<time datetime=\"[^\"]+\" data-local>[^<]+ JST</time>", page)

    superuser_client.cookies["leasehold_tz"] = "Mars/Olympus_Mons"  # unknown: the server's zone
    response = superuser_client.get(HISTORY)
    assert response.context["date_drilldown"]["zone"] == "UTC"


# ------------------------------------------------------------------ hostile input: times past the calendar's edge

@pytest.mark.parametrize("when, zone", [("9999-12-31T23:59:59", "Etc/GMT+12"), ("0001-01-01T00:00:00", "Etc/GMT-14")])
def test_a_time_past_the_calendars_edge_is_a_form_error(superuser_client, estate, when, zone):
    blob = estate.blobs["leased"]
    for url in (f"{BLOBS}{blob.pk}/change/", f"{HISTORY}holder/"):
        response = superuser_client.get(url, {"held_at": when, "tz": zone, "account": ACCOUNT,
                                              "container": CONTAINER, "blob": "leased.txt"})
        assert response.status_code == 200
        assert "Give a time between the years 1 and 9999 in UTC." in response.content.decode()


@pytest.mark.parametrize("seen", ["9223372036854775808:1", "1:9223372036854775808", "-1:1", "1:x"])
def test_an_altered_confirmation_is_refused_not_a_500(client, breaker, estate, seen):
    client.force_login(breaker)
    blob = estate.blobs["leased"]
    response = client.post(f"{BLOBS}{blob.pk}/break/", {"post": "yes", "seen": [seen], "when": "now"})
    assert response.status_code == 200
    assert "The confirmation page was altered; start again." in response.content.decode()
    assert Blob.objects.get(pk=blob.pk).lease_state == machine.LEASED


@pytest.mark.parametrize("value", ["\u00b2", "9223372036854775808", "-1", "1e3"])
def test_account_and_container_filters_take_only_whole_ids(superuser_client, estate, value):
    for name in ("account", "container"):
        assert superuser_client.get(BLOBS, {name: value}).status_code == 200
