"""The operator's admin without a browser: filter chips, resource links from
the history, "who held it" with how the lease ended (deleted blobs too),
the lease section above file metadata, unknown filter values, substring
search, the holder filter, containers' blob counts, and the per-holder view
with its bulk break."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from leases import machine
from leases.models import Blob, LeaseEvent
from leases.services import Actor, ResourceRef, blob_delete, lease_acquire, lease_break, lease_release

from .admin_fixtures import ACCOUNT, CONTAINER, app

pytest_plugins = ["tests.admin_fixtures"]  # its fixtures

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
    link = re.search(r'<a href="(/admin/leases/leaseevent/resource/\?[^"]+blob=broken.txt)">', page).group(1)
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
