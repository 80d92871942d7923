"""leasehold_client.fencing with two fenced transactions at once, each on a
connection of its own in a thread of its own (docs/guide/fencing.md): the
second waits for the first to end, then writes after it, or is refused if
its generation is older; and fence() outside a transaction raises.

The handshakes: on PostgreSQL the second transaction's backend shows in
pg_stat_activity waiting for a lock; on SQLite a probe connection that may
not wait is refused with "database is locked" while the first transaction
holds its fence, and the second's statement has begun (its trace callback)
before the first commits."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from leasehold_client import NotInTransaction, StaleLease, fence, fenced

pytestmark = pytest.mark.also_postgres

REPORT = "CREATE TABLE IF NOT EXISTS app_report (n INTEGER PRIMARY KEY, body VARCHAR(200))"
BOUND = 30  # every wait's bound


class Sqlite:
    mark = "?"

    def __init__(self, path):
        self.path = path
        with self.connect() as conn:
            conn.execute(REPORT)
            fence(conn, "warm-up", 0)  # the fence table made before the race

    def connect(self, wait: float = BOUND):
        return sqlite3.connect(self.path, timeout=wait, check_same_thread=False)

    def began(self, conn, event: threading.Event) -> None:
        conn.set_trace_callback(lambda sql: event.set() if "leasehold_fence" in sql and "INSERT" in sql else None)

    def waiting(self, conn) -> bool:
        """A connection that may not wait finds the fence held."""
        probe = self.connect(wait=0)
        try:
            with probe:
                fence(probe, "reports/daily", 1_000)
        except sqlite3.OperationalError as error:
            return "locked" in str(error)
        finally:
            probe.close()
        return False


class Postgres:
    mark = "%s"

    def __init__(self, url):
        import psycopg

        self.psycopg, self.url = psycopg, url
        with self.connect() as conn:
            conn.execute(REPORT.replace("INTEGER PRIMARY KEY", "SERIAL PRIMARY KEY"))
            fence(conn, "warm-up", 0)

    def connect(self, wait: float = BOUND):
        return self.psycopg.connect(self.url)

    def began(self, conn, event: threading.Event) -> None:
        self.pid = conn.info.backend_pid
        event.set()

    def waiting(self, conn) -> bool:
        with self.psycopg.connect(self.url, autocommit=True) as watcher:
            row = watcher.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                  (self.pid,)).fetchone()
        return row is not None and row[0] == "Lock"


@pytest.fixture(params=["sqlite3", pytest.param("psycopg", marks=pytest.mark.postgres)])
def db(request, tmp_path):
    if request.param == "sqlite3":
        return Sqlite(tmp_path / "app.sqlite3")
    return Postgres(request.getfixturevalue("postgres")())


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {BOUND} s"
        time.sleep(0.01)


def race(db, first: int, second: int) -> tuple[list[str], list[tuple], BaseException | None]:
    """The first holder's transaction fences ``first`` and writes; while it
    is open the second's fences ``second`` on its own connection, in a
    thread; once the second is seen waiting the first writes again and
    commits. Returns the order of events, the rows, and the second's error."""
    events: list[str] = []
    began, done = threading.Event(), threading.Event()
    failed: list[BaseException] = []
    holder, other = db.connect(), db.connect()
    db.began(other, began)

    def second_holder() -> None:
        try:
            with other:
                fence(other, "reports/daily", second)
                events.append("second fenced")
                other.execute(f"INSERT INTO app_report (body) VALUES ({db.mark})", (f"gen {second}",))
        except BaseException as error:  # asserted in the test's thread
            events.append("second refused")
            failed.append(error)
        finally:
            done.set()

    with holder:
        fence(holder, "reports/daily", first)
        holder.execute(f"INSERT INTO app_report (body) VALUES ({db.mark})", (f"gen {first}",))
        thread = threading.Thread(target=second_holder)
        thread.start()
        _until(began.is_set, "start of the second transaction")
        _until(lambda: db.waiting(other), "sign of the second transaction waiting")
        assert not done.is_set(), events  # it waits while the first holds the fence
        holder.execute(f"INSERT INTO app_report (body) VALUES ({db.mark})", (f"gen {first}, again",))
        events.append("first commits")
    thread.join(BOUND)
    assert not thread.is_alive()
    with db.connect() as reader:
        rows = [tuple(row) for row in reader.execute("SELECT n, body FROM app_report ORDER BY n").fetchall()]
    holder.close()
    other.close()
    return events, rows, failed[0] if failed else None


def test_a_newer_holder_waits_for_the_older_one_then_writes_after_it(db):
    events, rows, error = race(db, 41, 42)
    assert error is None, error
    assert events == ["first commits", "second fenced"]
    assert [body for _, body in rows] == ["gen 41", "gen 41, again", "gen 42"]
    stale = db.connect()
    with pytest.raises(StaleLease) as refused, stale:  # the older holder, after both
        fence(stale, "reports/daily", 41)
    assert (refused.value.generation, refused.value.recorded) == (41, 42)
    stale.close()


def test_an_older_holder_arriving_while_a_newer_one_holds_waits_and_is_refused(db):
    events, rows, error = race(db, 42, 41)
    assert isinstance(error, StaleLease) and (error.generation, error.recorded) == (41, 42), error
    assert events == ["first commits", "second refused"]
    assert [body for _, body in rows] == ["gen 42", "gen 42, again"]  # nothing of the stale one's


def test_fence_outside_a_transaction_raises(db, tmp_path):
    if isinstance(db, Sqlite):
        conn = sqlite3.connect(tmp_path / "app.sqlite3", isolation_level=None)  # autocommit
    else:
        conn = db.psycopg.connect(db.url, autocommit=True)
    with pytest.raises(NotInTransaction, match="outside a transaction"):
        fence(conn, "reports/daily", 7)
    conn.execute("BEGIN")  # the same connection inside a transaction fences
    assert fence(conn, "reports/daily", 7) == 7
    conn.execute("COMMIT")
    conn.close()


def test_django_fence_outside_atomic_raises_and_fenced_opens_the_transaction(transactional_db):
    from django.db import connection

    with pytest.raises(NotInTransaction):
        fence(connection, "reports/daily", 3)
    with fenced("reports/daily", 3):
        assert connection.in_atomic_block
    with connection.cursor() as cursor:
        cursor.execute("SELECT generation FROM leasehold_fence WHERE resource = %s", ["reports/daily"])
        assert cursor.fetchone()[0] == 3
