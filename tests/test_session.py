"""The test process itself, as tests/conftest.py sets it up for every test:
its garbage collector, the flush after each transactional test."""

from __future__ import annotations

import gc

import pytest

from leases.services import Actor

ACTOR = Actor(name="cli", via="cli")

# the flush is DELETE on PostgreSQL, with its own statements for the history
pytestmark = pytest.mark.also_postgres


def test_the_garbage_collector_runs_during_tests_with_the_collected_suite_frozen():
    # conftest.py turns the collector off while the suite is collected: a
    # test must find it on again (or cycles would pile up for the whole run),
    # and the collected suite frozen out of its scans
    assert gc.isenabled()
    assert gc.get_freeze_count() > 10_000


@pytest.mark.django_db(transaction=True)
def test_the_flush_after_a_transactional_test_empties_every_table_but_content_types_and_permissions(make_blob):
    # what tests/conftest.py runs in Django's place after each transactional
    # test, on a database a test left with history, an open tenure and a user
    from django.apps import apps
    from django.contrib.auth.models import Permission, User
    from django.contrib.contenttypes.models import ContentType
    from django.test import TransactionTestCase

    from leases import services
    from leases.models import LeaseEvent, Tenure

    ref = make_blob(services.ResourceRef("flushed", "box", "b.txt"), ACTOR)
    services.lease_acquire(ref=ref, actor=ACTOR, duration=-1)
    User.objects.create_user("someone")
    assert LeaseEvent.objects.exists() and Tenure.objects.filter(ended_at=None).exists()
    kept = (ContentType.objects.count(), Permission.objects.count())

    TransactionTestCase("run")._fixture_teardown()

    left = {model.__name__: model.objects.count() for model in apps.get_models()
            if model not in (ContentType, Permission) and model._meta.managed and model.objects.exists()}
    assert left == {}
    assert (ContentType.objects.count(), Permission.objects.count()) == kept
