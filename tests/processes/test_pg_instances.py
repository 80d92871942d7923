"""Two server instances (python -m config.serve) on one PostgreSQL database,
each with a var dir of its own, as instances on two machines have. What
they must share they share through the database: one secret key
(a login on one works on the other; an instance with another key is
refused), one API rate limit, one pruner at a time; /metrics says which
instance answered; and a schema change waiting behind a long reader holds
lease requests up for a moment, not for the reader's whole time."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests import azure_raw
from tests.conftest import free_port
from tests.server_process import ROOT, Instance, prepare

pytestmark = [pytest.mark.processes, pytest.mark.postgres, pytest.mark.also_postgres]

RATE = 10  # JSON API requests per day and principal: a burst is seconds, the window a day
PASSWORD = "x" * 12  # the admin's, as server_process.prepare sets it


@pytest.fixture(scope="module")
def two(postgres, tmp_path_factory):
    """(database URL, instance a, instance b), each instance with its own var
    dir; a with one worker, b with two."""
    tmp = tmp_path_factory.mktemp("pginstances")
    database = postgres()
    prepare(database, tmp)
    instances = []
    for name in ("a", "b"):
        var = tmp / name
        var.mkdir()
        # One worker serves in the launcher's own process, two in processes of their own:
        # both must take the database's secret key.
        instance = Instance(database, var, name, workers=1 if name == "a" else 2)
        instance.env.pop("LEASEHOLD_SECRET_KEY", None)
        instance.env.update(LEASEHOLD_API_RATE=f"{RATE}/day", LEASEHOLD_RETENTION_RENEWALS="1d",
                            LEASEHOLD_RETENTION_EVENTS="1d", LEASEHOLD_RETENTION_IDLE="0.5")
        instances.append(instance)
    try:
        for instance in instances:
            instance.start()
        yield database, *instances
    finally:
        for instance in instances:
            instance.stop()
    for instance in instances:
        log = instance.output()
        assert "Traceback" not in log and "pruning failed" not in log, log[-3000:]


def _login(instance) -> requests.Session:
    session = requests.Session()
    session.get(f"{instance.url}/admin/login/", timeout=30)
    done = session.post(f"{instance.url}/admin/login/", allow_redirects=False, timeout=30,
                        data={"username": "admin", "password": PASSWORD, "next": "/admin/",
                              "csrfmiddlewaretoken": session.cookies["csrftoken"]})
    assert done.status_code == 302 and done.headers["Location"] == "/admin/", done.text[:500]
    return session


def test_a_login_on_one_instance_works_on_the_other(two):
    database, a, b = two
    for first, other in ((a, b), (b, a)):
        session = _login(first)  # the cookies go to both: one host, two ports
        assert session.get(f"{other.url}/admin/", allow_redirects=False, timeout=30).status_code == 200
    assert not (a.log_path.parent / "secret_key").exists()  # the database keeps the key, not the var dir


def test_an_instance_with_another_key_is_refused(two):
    database, a, b = two
    env = {**a.env, "LEASEHOLD_SECRET_KEY": "not-the-key-the-others-use", "LEASEHOLD_BIND": f"127.0.0.1:{free_port()}"}
    run = subprocess.run([sys.executable, "-m", "serving.server"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 1, run.stderr[-2000:]
    assert run.stderr.startswith("Leasehold will not start: LEASEHOLD_SECRET_KEY is not the key the other instances")
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_a_rate_limit_admits_exactly_its_rate_across_instances(two):
    database, a, b = two
    session = _login(b)
    day = time.time() // 86400
    statuses = [session.get(f"{instance.url}/api/v1/containers/", timeout=30).status_code
                for _ in range(RATE * 3 // 2) for instance in (a, b)]
    # The sliding window (leases/api/throttling.py) admits exactly RATE, whenever the
    # burst starts; one more only if it straddled the day's boundary, where the
    # previous window's weight starts to decay.
    extra = 1 if time.time() // 86400 != day else 0
    assert RATE <= statuses.count(200) <= RATE + extra and set(statuses) == {200, 429}, statuses


def test_metrics_name_the_instance(two):
    database, a, b = two
    session = _login(a)
    names = set()
    for instance in (a, b):
        text = session.get(f"{instance.url}/metrics", timeout=30).text
        [info] = [s for f in text_string_to_metric_families(text) for s in f.samples
                  if s.name == "leasehold_instance_info"]
        assert info.labels["instance"].endswith(f":{instance.port}") and info.labels["pid"].isdigit()
        names.add(info.labels["instance"])
    assert len(names) == 2


BACKLOG = ("INSERT INTO leases_leaseevent (occurred_at, action, outcome, resource_type, account, container, blob, "
           "state_before, state_after, status_code, error_code, actor, via, reason, request_id, client_request_id, "
           "remote_addr, user_agent) SELECT now() - interval '3 days' - g * interval '1 ms', 'renew', 'success', "
           "'blob', 'devstoreaccount1', 'old', 'b', 'leased', 'leased', 200, '', '', 'azure', '', '', '', '', '' "
           "FROM generate_series(1, 30000) g")


def _one(conn: psycopg.Connection, query: str) -> Any:
    """The value of a query that answers one row of one column."""
    [(value,)] = conn.execute(query).fetchall()
    return value


# Connections in a pruning transaction (deleting events, or moving the horizon in the same transaction).
PRUNING = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state IN "
           "('active', 'idle in transaction') AND (query LIKE 'DELETE FROM leases_leaseevent%%' "
           "OR query LIKE '%%leases_historyhorizon%%') AND pid <> pg_backend_pid()")


def test_one_pruner_at_a_time_across_instances(two):
    """Both instances (two workers each) run a pruner; never two pruning
    transactions at once, and the backlog goes."""
    database, a, b = two
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(BACKLOG)
        most, samples, deadline = 0, 0, time.monotonic() + 60
        while time.monotonic() < deadline:
            for _ in range(50):
                most = max(most, _one(conn, PRUNING))
                samples += 1
            if not _one(conn, "SELECT count(*) FROM leases_leaseevent WHERE container = 'old'"):
                break
        else:
            raise AssertionError("the backlog was not pruned")
    assert most == 1, (most, samples)


HOLD = 6.0  # seconds the reader holds on once the ALTER waits: past the instances' LEASEHOLD_WRITE_WAIT


def test_a_schema_change_behind_a_long_reader_does_not_stall_leases(two):
    """An ALTER TABLE (a later version's migration) queued behind a long
    reader: lease requests on that table wait at most the migration's lock
    timeout (LEASEHOLD_WRITE_WAIT 1 s: 0.25 s) at a time, the migration is
    retried until it gets through, then applied. The reader holds on past
    the instances' own bound on a wait (LEASEHOLD_WRITE_WAIT, 5 s): a
    request queued behind the ALTER for the reader's whole time would be
    answered 503, so every request answered 200 or 404 is the check, not
    how long they took (printed)."""
    database, a, b = two
    assert azure_raw.signed("PUT", a.url, "/devstoreaccount1/altered?restype=container").status_code == 201
    path = "/devstoreaccount1/altered/one"
    assert azure_raw.signed("PUT", a.url, path, body=b"x", headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
    lease_id = azure_raw.lease(a.url, path, "acquire", duration=-1).headers["x-ms-lease-id"]
    reading = threading.Event()
    migrating: list[subprocess.Popen] = []

    def long_reader():
        with psycopg.connect(database) as conn:  # a transaction: its lock lasts until the end
            conn.execute("SELECT count(*) FROM leases_blob").fetchone()
            reading.set()
            # Held until the ALTER waits behind it (or the migrate has ended), then past
            # the instances' 5 s bound on a wait: a fixed hold, or one of a fixed bound,
            # raced the migrate's start-up on a loaded machine.
            with psycopg.connect(database, autocommit=True) as watcher:
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline and not (migrating and migrating[0].poll() is not None) and not _one(
                        watcher, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database() AND query LIKE 'ALTER TABLE%%'"):
                    time.sleep(0.05)
            time.sleep(HOLD)

    reader = threading.Thread(target=long_reader)
    reader.start()
    reading.wait(30)
    env = {**a.env, "DJANGO_SETTINGS_MODULE": "tests.processes.alter_settings", "LEASEHOLD_WRITE_WAIT": "1"}
    migrate = subprocess.Popen([sys.executable, "manage.py", "migrate", "alter_app", "--noinput"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    migrating.append(migrate)
    slowest, statuses = 0.0, set()
    blob_request = "/devstoreaccount1/altered/nothing"  # a read of the blob table too
    while migrate.poll() is None:
        started = time.monotonic()
        statuses.add(azure_raw.lease(b.url, path, "renew", lease_id=lease_id).status_code)
        statuses.add(azure_raw.signed("HEAD", a.url, blob_request).status_code)
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.05)  # the requests' pace, not a check
    reader.join(30)
    out = migrate.communicate()[0]  # it has exited: the rest of its output
    print(f"slowest lease request and read while the migration waited: {slowest:.2f} s")
    assert statuses == {200, 404}, (statuses, slowest)
    assert migrate.returncode == 0, out
    assert "gave way to lease requests" in out and "Applying alter_app.0001_alter_blob... OK" in out, out
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(probe) FROM leases_blob").fetchone() == (0,)


def test_a_migration_behind_a_reader_that_never_ends_gives_up_after_its_retry_time(two):
    """`migrate --lock-retry-for SECONDS` (docs/guide/postgresql.md): a reader
    holds the table for the whole run, so every try gives way; once the
    retry time is spent the command fails in one message saying why, with nothing applied
    (not the default 600 s: the bound every wait here has is 60 s)."""
    database, a, b = two
    env = {**a.env, "DJANGO_SETTINGS_MODULE": "tests.processes.alter_settings", "LEASEHOLD_WRITE_WAIT": "1"}
    with psycopg.connect(database, autocommit=True) as conn:  # the schema test may have applied it
        if conn.execute("SELECT 1 FROM django_migrations WHERE app = 'alter_app'").fetchone():
            subprocess.run([sys.executable, "manage.py", "migrate", "alter_app", "zero", "--noinput"], cwd=ROOT,
                           env=env, check=True, capture_output=True)
    with psycopg.connect(database) as reader:  # a transaction: its lock lasts until the end
        reader.execute("SELECT count(*) FROM leases_blob").fetchone()
        run = subprocess.run([sys.executable, "manage.py", "migrate", "alter_app", "--noinput",
                              "--lock-retry-for", "1.5"], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=60)
        reader.rollback()
    said = run.stdout + run.stderr
    assert run.returncode == 1 and "Traceback" not in said, said[-3000:]
    assert "gave way to lease requests" in said, said
    assert "gave up after --lock-retry-for 1.5 s" in said and "lock timeout" in said, said
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT count(*) FROM information_schema.columns WHERE table_name = 'leases_blob'"
                            " AND column_name = 'probe'").fetchone() == (0,)
        assert conn.execute("SELECT 1 FROM django_migrations WHERE app = 'alter_app'").fetchone() is None
