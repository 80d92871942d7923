""""Tenures held at T" as index ranges by length class (migration 0020, decision 0040) gives exactly the
naive answer (begun by T, ended after it or not ended with a deadline after it or none), over tenures
written through the lease write path's own SQL (leases/storage/tenure_rows.py: the UPDATE that ends a
tenure sets its class), with lengths at every class's bound, a microsecond either side, open ones and
ones longer than every class, asked at each tenure's begin and end and a microsecond either side;
and the migration's backfill classes settled tenures so that the same holds."""

from __future__ import annotations

import importlib
import random
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from leases.models import Tenure
from leases.models.tenure import LONG_CLASS, class_bound, held_at_q
from leases.storage import statements
from leases.storage.tenure_rows import TenureRows

pytestmark = pytest.mark.also_postgres

ROWS = TenureRows(Tenure)
START = datetime(2000, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
MIGRATION = importlib.import_module("leases.migrations.0020_tenure_length_class")


def _lengths(rng: random.Random) -> timedelta | None:
    """A length at a class's bound, a microsecond either side or 2 ms short, a random one, or None (open)."""
    pick = rng.random()
    if pick < 0.1:
        return None
    if pick < 0.2:
        return timedelta(seconds=rng.uniform(0, 4 ** 6))
    if pick < 0.25:
        return class_bound(LONG_CLASS - 1) + US * rng.choice((1, 10 ** 6))  # longer than every class
    # 2 ms short: within the class below (the write path classes with a millisecond's margin)
    return class_bound(rng.randrange(LONG_CLASS)) + US * rng.choice((-2000, -1, 0, 1))


def _write(rng: random.Random, resources: int, per: int) -> list[datetime]:
    """Tenures one after another on each resource, written as the lease writes write them;
    returns the times to ask at."""
    asks = []
    conn = transaction.get_connection()
    conn.ensure_connection()  # a test before may have closed it (a migration test does)
    with statements.driver_cursor(conn) as cursor:
        for r in range(resources):
            when = START + timedelta(seconds=rng.randrange(4 ** 7))
            for generation in range(1, per + 1):
                length = timedelta(milliseconds=500) if r == 0 and generation == 1 else _lengths(rng)  # class 0
                infinite = length is None and rng.random() < 0.5
                ROWS.insert(conn, cursor, resource_type="blob", account="acct", container="c", blob=f"b{r}",
                            generation=generation, lease_fingerprint="f", fingerprints="f", holder="h",
                            began_by="acquire", began_at=when, deadline=None if infinite else when + timedelta(15))
                asks += [when - US, when, when + US]
                if length is None:  # open: held until its deadline (none: for ever), or ended unrecorded
                    ROWS.update_open(conn, cursor, account="acct", container="c", blob=f"b{r}",
                                     generation=generation, deadline=None if infinite else when + timedelta(1))
                    break
                if rng.random() < 0.5:  # a renewal moved its deadline first
                    ROWS.update_open(conn, cursor, account="acct", container="c", blob=f"b{r}",
                                     generation=generation, deadline=when + length + timedelta(seconds=30))
                ended = when + length
                changed = ROWS.update_open(conn, cursor, account="acct", container="c", blob=f"b{r}",
                                           generation=generation, ended_at=ended, end="released", ended_by="h",
                                           settled_by="release")
                assert changed == 1
                asks += [ended - US, ended, ended + US]
                when = ended + timedelta(seconds=rng.choice((0, 1, 4 ** rng.randrange(8))))
    return asks


def _agree(asks: list[datetime], rng: random.Random) -> None:
    every = list(Tenure.objects.all())
    for when in rng.sample(asks, min(len(asks), 200)):
        naive = sorted(t.id for t in every if t.held_at(when))
        assert sorted(Tenure.objects.filter(held_at_q(when)).values_list("id", flat=True)) == naive, when


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_held_at_by_length_class_is_the_naive_answer(db, seed):
    rng = random.Random(seed)
    asks = _write(rng, resources=12, per=8)
    classes = set(Tenure.objects.values_list("length_class", flat=True))
    assert {0, LONG_CLASS - 1, None} <= classes, classes  # the bounds were written and asked at
    _agree(asks, rng)


def test_the_migrations_backfill_classes_settled_tenures_as_well(transactional_db):
    rng = random.Random(4)
    asks = _write(rng, resources=10, per=8)
    written = dict(Tenure.objects.values_list("id", "length_class"))
    with connection.schema_editor() as editor:
        MIGRATION.TENURES.drop_triggers(editor)  # the backfill makes them again
        editor.execute("UPDATE leases_tenure SET length_class = NULL")
        MIGRATION.backfill(None, editor)
    backfilled = dict(Tenure.objects.values_list("id", "length_class"))
    # a millisecond's margin: one class higher at a bound, never lower
    assert all(backfilled[i] in (k, k + 1 if k < LONG_CLASS - 1 else None) for i, k in written.items()
               if k is not None), (written, backfilled)
    _agree(asks, rng)
