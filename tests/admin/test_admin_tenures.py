"""The admin's tenures list: read-only, shown to whoever may read the lease history (no break right
needed, no tenure permission to hand out), its filters, one resource's tenures from its page."""

from __future__ import annotations

import pytest

from leases.models import Tenure
from leases.services import ResourceRef, lease_release

from .helpers import ACCOUNT, CONTAINER, _staff, app

pytestmark = pytest.mark.also_postgres

TENURES = "/admin/leases/tenure/"


def listed(response) -> list[str]:
    assert response.status_code == 200, response.status_code
    return [str(t) for t in response.context["cl"].result_list]


def test_auditors_with_view_events_see_tenures_and_nothing_more(client, django_user_model, estate):
    auditor = _staff(django_user_model, "audrey", "leaseevent.view_leaseevent")
    client.force_login(auditor)
    page = client.get(TENURES)
    assert len(listed(page)) == Tenure.objects.count() == 6  # the estate's leases: five blobs, the container
    tenure = Tenure.objects.order_by("id").first()
    assert client.get(f"{TENURES}{tenure.pk}/change/").status_code == 200
    assert client.post(f"{TENURES}{tenure.pk}/change/", {"holder": "user:mallory"}).status_code == 403
    assert client.post(f"{TENURES}{tenure.pk}/delete/").status_code == 403
    assert Tenure.objects.get(pk=tenure.pk).holder == tenure.holder
    assert "/admin/leases/tenure/" in client.get("/admin/").content.decode()


def test_staff_without_view_events_do_not(client, django_user_model, estate):
    breaker = _staff(django_user_model, "bob", "blob.view_blob", "blob.break_blob_lease", "container.view_container")
    client.force_login(breaker)
    assert client.get(TENURES).status_code == 403
    assert "/admin/leases/tenure/" not in client.get("/admin/").content.decode()


@pytest.mark.parametrize("query, expected", [
    ({"end": "held"}, {"leased.txt", "infinite.txt", "breaking.txt", ""}),
    ({"end": "broken"}, {"broken.txt"}),
    ({"end": "expired"}, {"expired.txt"}),
    ({"end": "released"}, {"available.txt"}),
    ({"account": ACCOUNT, "container": CONTAINER, "blob": "leased.txt"}, {"leased.txt"}),
    ({"account": "nobody"}, set()),
])
def test_filters(superuser_client, estate, query, expected):
    ref = ResourceRef(ACCOUNT, CONTAINER, "available.txt")
    from leases.services import lease_acquire
    lease_release(ref=ref, actor=app(), lease_id=lease_acquire(ref=ref, actor=app(), duration=15).lease_id)
    response = superuser_client.get(TENURES, query)
    assert {row.blob for row in response.context["cl"].result_list} == expected


def test_an_unknown_end_says_so(superuser_client, estate):
    response = superuser_client.get(TENURES, {"end": "gone"})
    assert response.status_code == 200 and list(response.context["cl"].result_list) == []


def test_a_resource_page_links_to_its_tenures(superuser_client, estate):
    blob = estate.blobs["leased"]
    page = superuser_client.get(f"/admin/leases/blob/{blob.pk}/change/").content.decode()
    link = f"{TENURES}?account={ACCOUNT}&amp;container={CONTAINER}&amp;blob=leased.txt"
    assert link in page
    response = superuser_client.get(TENURES, {"account": ACCOUNT, "container": CONTAINER, "blob": "leased.txt"})
    [row] = response.context["cl"].result_list
    assert (row.holder, row.end) == ("account:opsstore", "")


def test_a_renewed_tenure_shows_its_latest_deadline(superuser_client, estate, clock):
    """Renewals write no tenure (decision 0052): the list, its end filter and the tenure's page read
    the deadline its renewals left in the lease row."""
    from datetime import timedelta

    from leases.admin import display
    from leases.services import lease_renew

    ref = ResourceRef(ACCOUNT, CONTAINER, "leased.txt")
    clock.advance(50)
    lease_renew(ref=ref, actor=app(), lease_id=estate.blobs["leased"].lease_id)  # its deadline: now + 60
    renewed = display.timestamp(clock.now() + timedelta(seconds=60))
    clock.advance(30)  # past the acquire's deadline
    response = superuser_client.get(TENURES, {"end": "held", "account": ACCOUNT, "container": CONTAINER,
                                              "blob": "leased.txt"})
    [row] = response.context["cl"].result_list
    assert renewed in response.content.decode()
    assert renewed in superuser_client.get(f"{TENURES}{row.pk}/change/").content.decode()
