"""Who may break what: "Can break blob lease" and "Can break container lease"
are two permissions (admin and JSON API alike), and the migration that split
the old shared ``break_lease`` codename moves existing grants to the model
they were given for. Refusals are admin messages; breaks reach "Recent
actions"."""

from __future__ import annotations

import importlib

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from leases.domain import machine
from leases.models import LeaseEvent

from .helpers import VIEW_ALL, _staff

BLOBS = "/admin/leases/blob/"
CONTAINERS = "/admin/leases/container/"


@pytest.fixture
def blob_breaker(django_user_model):
    return _staff(django_user_model, "bob", *VIEW_ALL, "blob.break_blob_lease")


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def test_blob_break_permission_does_not_break_containers_in_the_admin(client, blob_breaker, estate):
    client.force_login(blob_breaker)
    container = estate.container
    assert blob_breaker.has_perm("leases.break_blob_lease")
    assert not blob_breaker.has_perm("leases.break_container_lease")

    page = client.get(f"{CONTAINERS}{container.pk}/change/").content.decode()
    assert "Break lease" not in page
    assert "break_leases" not in client.get(CONTAINERS).content.decode()  # no bulk action either
    response = client.post(f"{CONTAINERS}{container.pk}/break/",
                           {"when": "now", "seen": f"{container.pk}:{container.lease_generation}"})
    assert response.status_code == 302
    assert messages_of(client.get(response.url)) == [
        "You may not break container leases: that needs the “Can break container lease” permission."]
    client.post(CONTAINERS, {"action": "break_leases", "_selected_action": [str(container.pk)], "post": "yes",
                             "when": "now", "seen": f"{container.pk}:{container.lease_generation}"})
    container.refresh_from_db()
    assert container.lease_state == machine.LEASED
    assert not LeaseEvent.objects.filter(via="admin").exists()

    # The blob's lease it may break.
    blob = estate.blobs["leased"]
    client.post(f"{BLOBS}{blob.pk}/break/", {"when": "now", "seen": f"{blob.pk}:{blob.lease_generation}"})
    blob.refresh_from_db()
    assert blob.lease_state == machine.BROKEN


def test_blob_break_permission_does_not_break_containers_in_the_api(client, blob_breaker, estate):
    client.force_login(blob_breaker)  # the API takes an admin session too (with its CSRF check off in tests)
    refused = client.post("/api/v1/leases/break/opsstore/orders", {}, content_type="application/json")
    assert refused.status_code == 403, refused.content
    assert estate.container.__class__.objects.get(pk=estate.container.pk).lease_state == machine.LEASED
    allowed = client.post("/api/v1/leases/break/opsstore/orders/leased.txt", {"break_period": 0},
                          content_type="application/json")
    assert allowed.status_code == 202, allowed.content


def test_a_break_is_a_recent_action_of_the_admin_index(client, breaker, estate):
    client.force_login(breaker)
    blob = estate.blobs["leased"]
    client.post(f"{BLOBS}{blob.pk}/break/", {"when": "after", "seconds": "10", "reason": "node lost",
                                            "seen": f"{blob.pk}:{blob.lease_generation}"})
    entry = LogEntry.objects.get()
    assert (entry.user, entry.object_id, entry.action_flag) == (breaker, str(blob.pk), 2)
    assert entry.get_change_message() == "Broke the lease (after 10 s). Reason: node lost"
    index = client.get("/admin/").content.decode()
    assert "opsstore/orders/leased.txt" in index.split('id="recent-actions-module"')[1]


def test_view_site_link_is_gone(superuser_client, estate):
    page = superuser_client.get(BLOBS).content.decode()
    assert "View site" not in page


@pytest.mark.parametrize("when", ["now", "end"])
def test_seconds_typed_under_another_choice_break_nothing(client, breaker, estate, when):
    client.force_login(breaker)
    blob = estate.blobs["leased"]
    page = client.post(f"{BLOBS}{blob.pk}/break/", {"when": when, "seconds": "30",
                                                   "seen": f"{blob.pk}:{blob.lease_generation}"})
    assert page.status_code == 200
    assert "You gave a break period of 30 s but chose" in page.content.decode()
    blob.refresh_from_db()
    assert blob.lease_state == machine.LEASED and not LeaseEvent.objects.filter(via="admin").exists()


def test_the_seconds_field_has_a_label(client, breaker, estate):
    client.force_login(breaker)
    page = client.get(f"{BLOBS}{estate.blobs['leased'].pk}/break/").content.decode()
    assert '<label for="id_seconds"><span class="lease-sr-only">Break period in </span>seconds</label>' in page


# ------------------------------------------------------------------ the migration

@pytest.mark.django_db(transaction=True)
def test_migration_moves_old_grants_to_the_model_they_were_for(django_user_model):
    executor = MigrationExecutor(connection)
    executor.migrate([("leases", PARENT)])
    Permission.objects.filter(codename__in=["break_container_lease", "break_blob_lease"]).delete()
    # Migrating back brought the old shared codename back, on both models.
    old_blob = Permission.objects.get(content_type=_ct("blob"), codename="break_lease")
    old_container = Permission.objects.get(content_type=_ct("container"), codename="break_lease")
    blob_user = django_user_model.objects.create_user("blobs-only", is_staff=True)
    blob_user.user_permissions.add(old_blob)
    group = Group.objects.create(name="on-call")
    group.permissions.add(old_blob, old_container)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    blob_user = django_user_model.objects.get(pk=blob_user.pk)
    assert blob_user.has_perm("leases.break_blob_lease") and not blob_user.has_perm("leases.break_container_lease")
    assert sorted(group.permissions.values_list("codename", flat=True)) == [
        "break_blob_lease", "break_container_lease"]
    assert not Permission.objects.filter(codename="break_lease").exists()


# The migration this one follows (re-chained at merge time): migrate back to it, then forward.
PARENT = importlib.import_module("leases.migrations.0006_break_lease_permissions").Migration.dependencies[0][1]


def _ct(model):
    from django.contrib.contenttypes.models import ContentType

    return ContentType.objects.get_or_create(app_label="leases", model=model)[0]
