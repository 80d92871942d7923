"""The tenure filters that scanned the table (issue 49: 0.3-0.5 s at 1,000,000 events) are answered
from an index (migration 0017): by fingerprint (first or after a change), end=held and generation.
On a table of released tenures with a few held, broken and changed ones, as a busy history has, each
filter's SQL, as the API builds it, is planned without a full scan of the table (SQLite, after ANALYZE;
PostgreSQL with sequential scans priced out, so the plan shows whether an index can serve it), and the
API answers the right tenures. held_at too, by its length-class ranges (migration 0020)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from leases.api.tenures import TenureFilter
from leases.models import Tenure
from tests import query_plans

pytestmark = pytest.mark.also_postgres

START = datetime(2026, 1, 1, tzinfo=UTC)
TENURES = 3000


def _tenure(i: int) -> Tenure:
    began = START + timedelta(seconds=i)
    held, broken, changed = i >= TENURES - 3, i % 500 == 0, i % 1000 == 7
    fp = f"{i:012x}"
    return Tenure(resource_type="blob", account="acct", container="c", blob=f"b{i % 100}", generation=i // 100 + 1,
                  lease_fingerprint=fp, fingerprints=fp + (f" {i + 2 ** 40:012x}@{began.isoformat()}" if changed else ""),
                  holder="account:acct", began_by="acquire", began_at=began,
                  deadline=None if held else began + timedelta(seconds=30),
                  ended_at=None if held else began + timedelta(seconds=20),
                  end="" if held else "broken" if broken else "released", settled_by="" if held else "release")


@pytest.fixture
def many(db):
    Tenure.objects.bulk_create([_tenure(i) for i in range(TENURES)], batch_size=500)
    query_plans.analyze("leases_tenure")




@pytest.mark.parametrize("query", [
    {"lease_fingerprint": f"{7 + 2 ** 40:012x}"},  # the fingerprint a change gave tenure 7
    {"lease_fingerprint": f"{42:012x}"},
    {"end": "held"},
    {"generation": "7"},
    {"held_at": (START + timedelta(seconds=1500)).isoformat()},
], ids=["fingerprint-after-change", "fingerprint-first", "end-held", "generation", "held-at"])
def test_slow_tenure_filters_use_an_index(many, query):
    qs = TenureFilter(query, queryset=Tenure.objects.all()).qs.order_by("-id")[:101]
    plan = query_plans.plan(*qs.query.sql_with_params())
    assert not query_plans.scans(plan, "leases_tenure"), plan


@pytest.mark.parametrize("query, expected", [
    ({"lease_fingerprint": f"{7 + 2 ** 40:012x}"}, [7]),
    ({"lease_fingerprint": f"{1007:012x}"}, [1007]),
    ({"end": "held"}, [TENURES - 1, TENURES - 2, TENURES - 3]),
    ({"end": "broken"}, [2500, 2000, 1500, 1000, 500, 0]),
    ({"held_at": (START + timedelta(seconds=1500)).isoformat()}, list(range(1500, 1480, -1))),
], ids=["after-change", "first", "held", "broken", "held-at"])
def test_indexed_filters_find_the_right_tenures(api, many, query, expected):
    found = api.get("/api/v1/tenures/", query)
    assert found.status_code == 200, found.content
    began = {row["id"]: row["began_at"] for row in found.json()["results"]}
    by_began = {(START + timedelta(seconds=i)): i for i in range(TENURES)}
    assert [by_began[datetime.fromisoformat(b.replace("Z", "+00:00"))] for b in began.values()] == expected
