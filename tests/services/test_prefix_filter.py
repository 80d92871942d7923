"""The one case-sensitive prefix filter (``selectors.name_starts_with``),
used by the Azure listings and the JSON API's ``prefix``: exact on SQLite,
whose LIKE ignores ASCII case, and on PostgreSQL (run it there with
``python tests/pg_cluster.py .venv/bin/pytest tests/test_prefix_filter.py``)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from leases.models import Account, Blob, Container
from leases.services.selectors import name_starts_with

pytestmark = pytest.mark.also_postgres

NAMES = ["Logs/a", "logs/b", "logsx", "L", "l", "LOGS", "a%b", "a_b", "axb", "Ünï/1", "ünï/2", "é", "e"]


@pytest.fixture
def container(db):
    now = timezone.now()
    account = Account.objects.create(name="prefixes", key1="a2V5")
    box = Container.objects.create(account=account, name="box", etag='"0x1"', last_modified=now, created_at=now)
    for name in NAMES:
        Blob.objects.create(container=box, name=name, etag='"0x1"', last_modified=now, created_at=now)
    return box


@pytest.mark.parametrize("prefix", ["L", "l", "logs", "Logs/", "LOGS", "a%", "a_", "Ünï", "ünï", "é", "e", "zz",
                                    "logs/b", "logs/bc"])
def test_prefix_is_case_sensitive_and_literal(container, prefix):
    found = Blob.objects.filter(container=container).filter(name_starts_with(prefix)).values_list("name", flat=True)
    assert sorted(found) == sorted(n for n in NAMES if n.startswith(prefix))


def test_prefix_on_another_field(container):
    found = Container.objects.filter(name_starts_with("prefix", field="account__name"))
    assert list(found) == [container]
    assert not Container.objects.filter(name_starts_with("PREFIX", field="account__name")).exists()
