"""The container and blob admins: lists, filters, search, sorting, and the
break and release flows with their permissions."""

from __future__ import annotations

import re

import pytest

from leases.domain import fingerprints, machine
from leases.models import Blob, LeaseEvent
from leases.services import Actor, ResourceRef, blob_put, container_create, lease_acquire, lease_release

from .helpers import ACCOUNT, CONTAINER, app

BLOBS = "/admin/leases/blob/"
CONTAINERS = "/admin/leases/container/"


def listed(response) -> list[str]:
    assert response.status_code == 200, response.status_code
    return [obj.name for obj in response.context["cl"].result_list]


def row(response, name: str) -> str:
    """The result-list row (HTML) of the object named ``name``."""
    rows = re.findall(r"<tr>.*?</tr>", response.content.decode(), re.DOTALL)
    matches = [r for r in rows if f">{name}</a>" in r]
    assert len(matches) == 1, f"{name}: {len(matches)} rows"
    return matches[0]


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


# ------------------------------------------------------------------ lists

def test_blob_list_shows_each_lease_as_it_is_now(superuser_client, estate):
    response = superuser_client.get(BLOBS)
    assert sorted(listed(response)) == sorted(f"{n}.txt" for n in estate.blobs)

    leased = row(response, "leased.txt")
    lease = estate.blobs["leased"]
    assert 'class="lease-badge lease-leased"' in leased
    assert "locked" in leased and "fixed, 60 s" in leased
    assert 'data-remaining="60.000" data-then="expired">60 s<' in leased
    assert f'title="fingerprint of the lease id">{fingerprints.of(lease.lease_id)}</code>' in leased
    assert str(lease.lease_id) not in leased
    assert "<strong>account:opsstore</strong>" in leased and "10.1.2.3" in leased and "client-req-1" in leased
    assert "opsstore/orders</a>" in leased
    assert '<time datetime="' in leased  # last modified, with seconds, localized by the page script

    expired = row(response, "expired.txt")
    assert "lease-expired" in expired and "unlocked" in expired and "fixed, 15 s" in expired
    assert "never (infinite)" in row(response, "infinite.txt")
    breaking = row(response, "breaking.txt")
    assert "lease-breaking" in breaking and 'breaks in <span class="lease-countdown" data-remaining="30.000"' in breaking
    assert "lease-broken" in row(response, "broken.txt")
    available = row(response, "available.txt")
    assert "lease-available" in available and "unlocked" in available


def test_container_list(superuser_client, estate):
    response = superuser_client.get(CONTAINERS)
    assert listed(response) == [CONTAINER]
    orders = row(response, CONTAINER)
    assert "lease-leased" in orders and ACCOUNT in orders and "fixed, 60 s" in orders


def test_container_page_history_is_the_containers_own(superuser_client, estate):
    page = superuser_client.get(f"{CONTAINERS}{estate.container.pk}/change/").content.decode()
    link = f"/admin/leases/leaseevent/?account={ACCOUNT}&amp;container={CONTAINER}&amp;blob="
    assert f'href="{link}"' in page
    events = superuser_client.get(link.replace("&amp;", "&")).context["cl"].result_list
    assert [(e.resource_type, e.action) for e in events] == [("container", "acquire")]


def test_state_is_judged_at_the_time_of_the_request(superuser_client, estate, clock):
    assert "lease-leased" in row(superuser_client.get(BLOBS), "leased.txt")
    clock.advance(61)
    response = superuser_client.get(BLOBS)
    assert "lease-expired" in row(response, "leased.txt")
    assert "lease-broken" in row(response, "breaking.txt")
    assert "lease-expired" in row(superuser_client.get(CONTAINERS), CONTAINER)


@pytest.mark.parametrize("state, names", [
    ("available", ["available.txt"]),
    ("leased", ["infinite.txt", "leased.txt"]),
    ("expired", ["expired.txt"]),
    ("breaking", ["breaking.txt"]),
    ("broken", ["broken.txt"]),
])
def test_filter_by_effective_state(superuser_client, estate, state, names):
    assert sorted(listed(superuser_client.get(BLOBS, {"state": state}))) == names


def test_state_filter_follows_the_clock(superuser_client, estate, clock):
    clock.advance(31)  # the break period ends; the 60 s lease has not
    assert listed(superuser_client.get(BLOBS, {"state": "broken"})) == ["breaking.txt", "broken.txt"]
    assert sorted(listed(superuser_client.get(BLOBS, {"state": "leased"}))) == ["infinite.txt", "leased.txt"]
    clock.advance(30)
    assert listed(superuser_client.get(BLOBS, {"state": "expired"})) == ["expired.txt", "leased.txt"]
    assert listed(superuser_client.get(CONTAINERS, {"state": "expired"})) == [CONTAINER]


def test_filter_by_duration_type(superuser_client, estate):
    assert listed(superuser_client.get(BLOBS, {"duration": "infinite"})) == ["infinite.txt"]
    # An expired lease keeps its duration: renewing it resumes the same lease.
    assert listed(superuser_client.get(BLOBS, {"duration": "fixed"})) == ["expired.txt", "leased.txt"]


def test_filter_by_account_and_container(superuser_client, estate):
    from leases.services import account_ensure

    account_ensure(name="other", key1="a2V5")
    other = container_create(account="other", name="archive")
    blob_put(ref=ResourceRef("other", "archive", "old.txt"), actor=app(), content=b"")
    assert listed(superuser_client.get(BLOBS, {"account": other.account_id})) == ["old.txt"]
    assert listed(superuser_client.get(BLOBS, {"container": other.pk})) == ["old.txt"]
    assert len(listed(superuser_client.get(BLOBS, {"account": estate.container.account_id}))) == 6
    assert listed(superuser_client.get(CONTAINERS, {"account": other.account_id})) == ["archive"]

    # The container filter offers the chosen account's containers only.
    filters = superuser_client.get(BLOBS, {"account": other.account_id}).content.decode()
    assert "other/archive" in filters and f"{ACCOUNT}/{CONTAINER}" not in filters


def test_search_by_name_substring_and_lease_id(superuser_client, estate):
    lease_id = estate.blobs["leased"].lease_id
    assert listed(superuser_client.get(BLOBS, {"q": "lea"})) == ["leased.txt"]
    assert listed(superuser_client.get(BLOBS, {"q": "LEA"})) == ["leased.txt"]  # an operator's search ignores case
    assert listed(superuser_client.get(BLOBS, {"q": "ased.t"})) == ["leased.txt"]  # any part of the name
    assert sorted(listed(superuser_client.get(BLOBS, {"q": "ke .txt"}))) == ["broken.txt"]  # every word
    assert listed(superuser_client.get(BLOBS, {"q": str(lease_id)})) == ["leased.txt"]
    assert listed(superuser_client.get(BLOBS, {"q": str(lease_id)[:8]})) == []  # no prefix: no id is shown
    assert listed(superuser_client.get(BLOBS, {"q": "{" + str(lease_id).upper() + "}"})) == ["leased.txt"]
    assert listed(superuser_client.get(BLOBS, {"q": "ord"})) == []  # the container's name is not the blob's
    assert listed(superuser_client.get(CONTAINERS, {"q": str(estate.container.lease_id)})) == [CONTAINER]


def test_sort_by_time_left_puts_leases_without_any_last(superuser_client, estate, clock):
    from leases.admin.resources import BlobAdmin

    column = BlobAdmin.list_display.index("time_left") + 1  # after the action checkbox
    # A breaking lease sorts by its break end (30 s), before the 60 s lease; infinite has the most.
    assert listed(superuser_client.get(BLOBS, {"o": column}))[:3] == ["breaking.txt", "leased.txt", "infinite.txt"]
    assert listed(superuser_client.get(BLOBS, {"o": f"-{column}"}))[:3] == [
        "infinite.txt", "leased.txt", "breaking.txt"]
    # Expired, broken and available: no time left, last either way.
    rest = {"expired.txt", "broken.txt", "available.txt"}
    assert set(listed(superuser_client.get(BLOBS, {"o": column}))[3:]) == rest
    assert set(listed(superuser_client.get(BLOBS, {"o": f"-{column}"}))[3:]) == rest
    clock.advance(45)  # the break has ended: broken, so last
    assert listed(superuser_client.get(BLOBS, {"o": column}))[:2] == ["leased.txt", "infinite.txt"]


def test_holder_is_blank_when_nobody_holds_the_lease(superuser_client, estate):
    lease = estate.blobs["available"]
    lease_acquire(ref=estate.ref("available"), actor=app(), duration=15)
    lease_release(ref=estate.ref("available"), actor=app(), lease_id=Blob.objects.get(pk=lease.pk).lease_id)
    response = superuser_client.get(BLOBS)
    assert "account:opsstore" not in row(response, "available.txt").split("field-holder")[1]
    assert "account:opsstore" in row(response, "leased.txt").split("field-holder")[1]


def test_lists_say_when_their_state_was_read_and_refresh(superuser_client, estate):
    page = superuser_client.get(BLOBS).content.decode()
    assert 'data-lease-refresh="30"' in page and "Lease state as of" in page and "Refresh now" in page


def test_lists_do_not_count_past_the_cap(superuser_client, estate, monkeypatch):
    from leases.admin.paging import CappedCountPaginator

    monkeypatch.setattr(CappedCountPaginator, "CAP", 4)
    response = superuser_client.get(BLOBS)
    assert response.context["cl"].result_count == 4 and response.context["cl"].paginator.capped
    assert "4+ blobs" in response.content.decode()
    monkeypatch.setattr(CappedCountPaginator, "CAP", 6)
    response = superuser_client.get(BLOBS)
    assert not response.context["cl"].paginator.capped and "6 blobs" in response.content.decode()


def test_blob_page_shows_the_full_lease_but_not_its_id(superuser_client, estate):
    lease = estate.blobs["leased"]
    page = superuser_client.get(f"{BLOBS}{lease.pk}/change/").content.decode()
    assert fingerprints.of(lease.lease_id) in page and "lease-leased" in page and "client-req-1" in page
    assert str(lease.lease_id) not in page and lease.lease_id.hex not in page
    assert "Break lease" in page and "Release lease" in page


# ------------------------------------------------------------------ read-only rows

@pytest.mark.parametrize("model", ["blob", "container"])
def test_rows_cannot_be_added_changed_or_deleted_even_by_a_superuser(superuser_client, estate, model):
    obj = estate.blobs["leased"] if model == "blob" else estate.container
    base = f"/admin/leases/{model}/"
    assert superuser_client.get(f"{base}add/").status_code == 403
    assert superuser_client.post(f"{base}{obj.pk}/change/", {"name": "renamed"}).status_code == 403
    assert superuser_client.get(f"{base}{obj.pk}/delete/").status_code == 403
    assert superuser_client.post(f"{base}{obj.pk}/delete/", {"post": "yes"}).status_code == 403
    page = superuser_client.get(f"{base}{obj.pk}/change/").content.decode()
    assert 'name="_save"' not in page
    obj.refresh_from_db()
    assert obj.name in ("leased.txt", CONTAINER)


# ------------------------------------------------------------------ break

def action_post(client, pks, **form):
    data = {"action": "break_leases", "_selected_action": [str(pk) for pk in pks], **form}
    return client.post(BLOBS, data)


def test_break_selected_asks_first_then_breaks_as_the_staff_user(client, breaker, estate):
    client.force_login(breaker)
    leased, available = estate.blobs["leased"], estate.blobs["available"]
    page = action_post(client, [leased.pk, available.pk])
    assert page.status_code == 200 and page.templates[0].name == "admin/leases/lease_confirmation.html"
    html = page.content.decode()
    assert "This lease will be broken" in html and "opsstore/orders/leased.txt" in html
    assert "Skipped, with no lease to break" in html and "opsstore/orders/available.txt" in html
    assert not LeaseEvent.objects.filter(action="break", via="admin").exists()  # nothing yet

    seen = re.findall(r'name="seen" value="([^"]+)"', html)
    assert seen == [f"{leased.pk}:{leased.lease_generation}"]
    response = action_post(client, [leased.pk, available.pk], post="yes", seen=seen, when="after", seconds="10",
                           reason="deploy stuck on it", HTTP_USER_AGENT="pytest")
    assert response.status_code == 302
    assert messages_of(client.get(BLOBS)) == ["Broke the lease of 1 blob."]

    leased.refresh_from_db()
    assert leased.lease_state == machine.BREAKING
    event = LeaseEvent.objects.get(action="break", via="admin")
    assert (event.actor, event.reason, event.break_period, event.outcome) == (
        "user:alice", "deploy stuck on it", 10, "success")
    assert (event.blob, event.state_before, event.state_after, event.lease_time) == (
        "leased.txt", "leased", "breaking", 10)
    assert event.remote_addr == "127.0.0.1"
    available.refresh_from_db()
    assert available.lease_state == machine.AVAILABLE


@pytest.mark.parametrize("blob, when, period, state_after, lease_time", [
    ("leased", "now", 0, machine.BROKEN, 0),
    ("leased", "end", None, machine.BREAKING, 60),  # a fixed lease breaks at its expiry
    ("infinite", "end", None, machine.BROKEN, 0),  # an infinite one at once
    ("expired", "now", 0, machine.BROKEN, 0),  # its holder can no longer renew it
    ("breaking", "after", 5, machine.BREAKING, 5),  # a break period only shortens
])
def test_break_periods(client, breaker, estate, blob, when, period, state_after, lease_time):
    client.force_login(breaker)
    obj = estate.blobs[blob]
    action_post(client, [obj.pk], post="yes", seen=[f"{obj.pk}:{obj.lease_generation}"], when=when,
                seconds="5" if when == "after" else "")
    event = LeaseEvent.objects.get(action="break", via="admin")
    assert (event.break_period, event.state_after, event.lease_time) == (period, state_after, lease_time)


def test_break_period_must_be_1_to_60_seconds(client, breaker, estate):
    client.force_login(breaker)
    obj = estate.blobs["leased"]
    seen = [f"{obj.pk}:{obj.lease_generation}"]
    for seconds, error in [("", "Give a break period of 1 to 60 seconds."), ("61", "less than or equal to 60")]:
        page = action_post(client, [obj.pk], post="yes", seen=seen, when="after", seconds=seconds)
        assert page.status_code == 200 and error in page.content.decode()
    assert not LeaseEvent.objects.filter(action="break").exclude(via="azure").exists()


def test_a_lease_taken_again_since_the_confirmation_is_not_broken(client, breaker, estate):
    client.force_login(breaker)
    obj = estate.blobs["leased"]
    seen = [f"{obj.pk}:{obj.lease_generation}"]
    ref = estate.ref("leased")
    lease_release(ref=ref, actor=app(), lease_id=obj.lease_id)
    lease_acquire(ref=ref, actor=Actor(name="account:someone-else", via="azure"), duration=30)
    action_post(client, [obj.pk], post="yes", seen=seen, when="now")
    assert messages_of(client.get(BLOBS)) == [
        "Not broken, a new lease was taken after you confirmed: opsstore/orders/leased.txt. Review again."]
    obj.refresh_from_db()
    assert obj.lease_state == machine.LEASED
    assert not LeaseEvent.objects.filter(action="break", via="admin").exists()


def test_a_lease_released_since_the_confirmation_is_a_recorded_refusal(client, breaker, estate):
    client.force_login(breaker)
    obj = estate.blobs["leased"]
    seen = [f"{obj.pk}:{obj.lease_generation}"]
    lease_release(ref=estate.ref("leased"), actor=app(), lease_id=obj.lease_id)
    action_post(client, [obj.pk], post="yes", seen=seen, when="now")
    assert messages_of(client.get(BLOBS)) == [
        "The break was refused: opsstore/orders/leased.txt (LeaseNotPresentWithLeaseOperation)."]
    refusal = LeaseEvent.objects.get(action="break", via="admin")
    assert (refusal.outcome, refusal.actor) == ("refused", "user:alice")


def test_bulk_break_reports_each_outcome_once(client, breaker, estate):
    from leases.services import blob_delete

    client.force_login(breaker)
    infinite, leased = estate.blobs["infinite"], estate.blobs["leased"]
    seen = [f"{o.pk}:{o.lease_generation}" for o in (infinite, leased)]
    blob_delete(ref=estate.ref("leased"), actor=app(), lease_id=leased.lease_id)
    action_post(client, [infinite.pk, leased.pk], post="yes", seen=seen, when="now")
    assert messages_of(client.get(BLOBS)) == ["Broke the lease of 1 blob.", "Not broken, deleted since: 1 blob."]


def test_break_a_whole_filtered_list_is_capped(client, breaker, estate, monkeypatch):
    monkeypatch.setattr("leases.admin.lease_actions.MAX_BREAK", 2)
    client.force_login(breaker)
    response = client.post(BLOBS, {"action": "break_leases", "select_across": "1", "index": "0",
                                   "_selected_action": [str(estate.blobs["leased"].pk)]})
    assert response.status_code == 302
    assert messages_of(client.get(BLOBS)) == ["Select at most 2 leases to break at a time."]


def test_break_button_on_the_blob_page(client, breaker, estate):
    client.force_login(breaker)
    obj = estate.blobs["infinite"]
    page = client.get(f"{BLOBS}{obj.pk}/change/").content.decode()
    assert f'href="{BLOBS}{obj.pk}/break/"' in page and "Release lease" not in page
    confirmation = client.get(f"{BLOBS}{obj.pk}/break/")
    assert "This lease will be broken" in confirmation.content.decode()
    response = client.post(f"{BLOBS}{obj.pk}/break/", {"when": "now", "reason": "handover",
                                                       "seen": f"{obj.pk}:{obj.lease_generation}"})
    assert response.status_code == 302 and response.url == f"{BLOBS}{obj.pk}/change/"
    obj.refresh_from_db()
    assert obj.lease_state == machine.BROKEN
    history = client.get(response.url).content.decode()
    assert "handover" in history and "user:alice" in history


def test_break_a_container_lease(client, breaker, estate):
    client.force_login(breaker)
    container = estate.container
    client.post(f"{CONTAINERS}{container.pk}/break/", {"when": "now", "seen": f"{container.pk}:{container.lease_generation}"})
    event = LeaseEvent.objects.get(action="break", via="admin")
    assert (event.resource_type, event.container, event.blob, event.state_after) == (
        "container", CONTAINER, "", machine.BROKEN)


def test_no_break_button_for_a_blob_without_a_lease(client, breaker, estate):
    client.force_login(breaker)
    obj = estate.blobs["available"]
    assert "Break lease" not in client.get(f"{BLOBS}{obj.pk}/change/").content.decode()
    assert "There is no lease to break here" in client.get(f"{BLOBS}{obj.pk}/break/").content.decode()


def test_staff_without_the_permission_see_leases_but_cannot_break(client, viewer, estate):
    client.force_login(viewer)
    obj = estate.blobs["leased"]
    listing = client.get(BLOBS)
    assert listed(listing) and "break_leases" not in listing.content.decode()
    assert "Break lease" not in client.get(f"{BLOBS}{obj.pk}/change/").content.decode()
    for method, data in (("get", None), ("post", {"when": "now"})):
        response = getattr(client, method)(f"{BLOBS}{obj.pk}/break/", data)
        # An admin message on the blob's page, not a bare 403.
        assert response.status_code == 302 and response.url == f"{BLOBS}{obj.pk}/change/"
        assert messages_of(client.get(response.url)) == [
            "You may not break blob leases: that needs the “Can break blob lease” permission."]
    action_post(client, [obj.pk], post="yes", seen=[f"{obj.pk}:{obj.lease_generation}"], when="now")
    obj.refresh_from_db()
    assert obj.lease_state == machine.LEASED
    assert not LeaseEvent.objects.filter(via="admin").exists()


# ------------------------------------------------------------------ release

def test_release_is_for_superusers(client, breaker, estate):
    client.force_login(breaker)
    obj = estate.blobs["leased"]
    for method, data in (("get", None), ("post", {"fingerprint": fingerprints.of(obj.lease_id)})):
        response = getattr(client, method)(f"{BLOBS}{obj.pk}/release/", data)
        assert response.status_code == 302 and response.url == f"{BLOBS}{obj.pk}/change/"
        assert messages_of(client.get(response.url)) == [
            "Only a superuser may release a lease; you may break it instead if you have the permission."]
    obj.refresh_from_db()
    assert obj.lease_state == machine.LEASED


def test_superuser_releases_a_lease_and_it_is_recorded(superuser_client, estate):
    obj = estate.blobs["leased"]
    page = superuser_client.get(f"{BLOBS}{obj.pk}/release/").content.decode()
    assert "This lease will be released at once" in page and f'value="{fingerprints.of(obj.lease_id)}"' in page
    assert str(obj.lease_id) not in page
    response = superuser_client.post(f"{BLOBS}{obj.pk}/release/", {"fingerprint": fingerprints.of(obj.lease_id),
                                                                   "reason": "owner gone"})
    assert response.status_code == 302
    obj.refresh_from_db()
    assert obj.lease_state == machine.AVAILABLE
    event = LeaseEvent.objects.get(action="release", via="admin")
    assert (event.actor, event.reason, event.outcome) == ("user:root", "owner gone", "success")


def test_release_of_a_lease_that_changed_is_refused(superuser_client, estate):
    obj = estate.blobs["leased"]
    stale = obj.lease_id
    ref = estate.ref("leased")
    lease_release(ref=ref, actor=app(), lease_id=stale)
    lease_acquire(ref=ref, actor=app(), duration=30)
    superuser_client.post(f"{BLOBS}{obj.pk}/release/", {"fingerprint": fingerprints.of(stale)})
    assert messages_of(superuser_client.get(BLOBS)) == [
        ("opsstore/orders/leased.txt: the release was refused (LeaseIdMismatchWithLeaseOperation); "
        "the lease changed after you looked.")]
    obj.refresh_from_db()
    assert obj.lease_state == machine.LEASED
    assert LeaseEvent.objects.get(action="release", via="admin").outcome == "refused"


def test_snapshots_are_listed_without_a_lease(superuser_client, estate):
    from leases.services import blob_snapshot

    snap = blob_snapshot(ref=estate.ref("leased"), actor=app())
    response = superuser_client.get(BLOBS, {"q": "leased"})
    assert f"leased.txt?snapshot={snap.snapshot}" in response.content.decode()
    assert Blob.objects.get(pk=snap.pk).lease_state == machine.AVAILABLE
