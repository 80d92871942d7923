"""leasehold_client.fencing: the user's own database refuses a stale lease
holder, on sqlite3, PostgreSQL (psycopg 3) and Django's connection; the
stale holder is a real AutoRenewLease whose lease a live Leasehold server
broke and gave to another."""

from __future__ import annotations

import sqlite3
import uuid

import pytest
from azure.storage.blob import BlobLeaseClient

from leasehold_client import AutoRenewLease, CannotFence, StaleLease, fence, fenced
from leasehold_client.fencing import DDL

REPORT = "CREATE TABLE IF NOT EXISTS app_report (resource VARCHAR(200), body VARCHAR(200), generation BIGINT)"


class Store:
    """The application's database, as a holder writes to it: one transaction,
    fenced first, then its own row."""

    mark = "%s"

    def transaction(self, write):  # pragma: no cover - each store has its own
        raise NotImplementedError

    def write(self, resource: str, lease, body: str) -> None:
        def work(conn, cursor):
            generation = fence(conn, resource, lease)
            cursor.execute(f"INSERT INTO app_report VALUES ({self.mark}, {self.mark}, {self.mark})",
                           (resource, body, generation))
        self.transaction(work)

    def rows(self, resource: str) -> list[tuple]:
        found: list[tuple] = []

        def read(conn, cursor) -> None:
            cursor.execute(f"SELECT body, generation FROM app_report WHERE resource = {self.mark} "
                           f"ORDER BY generation, body", (resource,))
            found.extend(tuple(row) for row in cursor.fetchall())

        self.transaction(read)
        return found


class SqliteStore(Store):
    mark = "?"

    def __init__(self, path):
        self.conn = sqlite3.connect(path, timeout=10)
        self.conn.execute(REPORT)
        self.conn.commit()

    def transaction(self, work):
        with self.conn:  # commits, or rolls back on an exception
            cursor = self.conn.cursor()
            work(self.conn, cursor)


class PsycopgStore(Store):
    def __init__(self, url):
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute(REPORT)

    def transaction(self, work):
        with self.conn.transaction(), self.conn.cursor() as cursor:
            work(self.conn, cursor)


class DjangoStore(Store):
    def __init__(self):
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(REPORT)

    def transaction(self, work):
        from django.db import connection, transaction

        with transaction.atomic(), connection.cursor() as cursor:
            work(connection, cursor)

    def write(self, resource: str, lease, body: str) -> None:
        from django.db import connection

        with fenced(resource, lease), connection.cursor() as cursor:  # the Django convenience
            cursor.execute("INSERT INTO app_report VALUES (%s, %s, %s)", (resource, body, getattr(lease, "generation",
                                                                                                  lease)))


# The application's database: the PostgreSQL pass of make test runs psycopg's and Django's (there on PostgreSQL).
@pytest.fixture(params=["sqlite3", pytest.param("psycopg", marks=[pytest.mark.postgres, pytest.mark.also_postgres]),
                        pytest.param("django", marks=pytest.mark.also_postgres)])
def store(request, tmp_path, transactional_db) -> Store:
    if request.param == "sqlite3":
        return SqliteStore(tmp_path / "app.sqlite3")
    if request.param == "psycopg":
        return PsycopgStore(request.getfixturevalue("postgres")())
    return DjangoStore()


def _resource() -> str:
    return f"reports/{uuid.uuid4().hex[:12]}"


def test_the_highest_generation_seen_writes_and_an_older_one_is_refused_and_rolled_back(store):
    resource, other = _resource(), _resource()
    store.write(resource, 3, "three")
    store.write(resource, 3, "three again")  # the same holder writes again
    store.write(resource, 5, "five")  # a newer holder: later generations may skip numbers
    with pytest.raises(StaleLease) as refused:
        store.write(resource, 4, "four")
    assert (refused.value.generation, refused.value.recorded) == (4, 5)
    assert "stale lease" in str(refused.value)
    store.write(other, 1, "one")  # resources are fenced apart
    assert store.rows(resource) == [("three", 3), ("three again", 3), ("five", 5)]
    assert store.rows(other) == [("one", 1)]


def test_a_stale_holder_after_a_break_is_refused_and_the_new_holders_write_kept(store, leasehold):
    """The holder pauses; an operator breaks its lease; another process
    acquires it (the next generation) and writes; the first one wakes up,
    still believing it holds the lease, and writes: refused, rolled back."""
    container, name = leasehold.names()
    resource = _resource()
    with AutoRenewLease(leasehold.blob(container, name), 15, clock=leasehold.clock) as old:
        assert old.has_lease and old.generation is not None
        store.write(resource, old, "old holder, before its pause")
        BlobLeaseClient(leasehold.blob(container, name)).break_lease(lease_break_period=0)
        with AutoRenewLease(leasehold.blob(container, name), 15, clock=leasehold.clock) as new:
            assert new.has_lease and new.generation == old.generation + 1
            store.write(resource, new, "new holder")
            assert old.held  # the paused holder has not noticed: no renewal was due
            with pytest.raises(StaleLease):
                store.write(resource, old, "old holder, after its pause")
            store.write(resource, new, "new holder again")
    assert store.rows(resource) == [("old holder, before its pause", old.generation),
                                    ("new holder", new.generation), ("new holder again", new.generation)]


def test_a_lease_without_a_generation_cannot_fence(azurite, tmp_path):
    """Azurite (as Azure Storage) hands out no generation: fence() says so
    instead of writing unfenced."""
    container, name = f"c{uuid.uuid4().hex[:12]}", "locks/job.lock"
    conn = sqlite3.connect(tmp_path / "app.sqlite3")
    with AutoRenewLease(azurite.blob(container, name), 15, clock=azurite.clock) as lease:
        assert lease.has_lease and lease.generation is None
        with pytest.raises(CannotFence, match="cannot fence: this lease has no fencing generation"):
            fence(conn, "reports/daily", lease)
    with pytest.raises(CannotFence):
        fence(conn, "reports/daily", None)
    with pytest.raises(ValueError):
        fence(conn, "reports/daily", -1)


def test_the_table_is_created_on_first_use_or_by_its_ddl(tmp_path):
    conn = sqlite3.connect(tmp_path / "app.sqlite3")
    with conn:
        assert fence(conn, "a", 1) == 1  # created here
    assert conn.execute("SELECT resource, generation FROM leasehold_fence").fetchall() == [("a", 1)]
    managed = sqlite3.connect(tmp_path / "managed.sqlite3")
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        fence(managed, "a", 1, create=False)
    managed.execute(DDL)  # the schema's owner creates it
    with managed:
        assert fence(managed, "a", 2, create=False) == 2
