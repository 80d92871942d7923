"""Fixtures every folder may use: the clock seam, a live Azure endpoint in
this process (real HTTP, real SQLite file) and SDK clients pointed at it, the
JSON API's accounts and superuser client, and PostgreSQL for the tests that
need it whatever the run's database.

Where a test goes (tests/README.md has the whole map):

  tests/machine/     the pure state machine (no Django, no database)
  tests/services/    services, selectors, history, retention, fencing
  tests/storage/     the SQLite backend and the storage layer's SQL
  tests/azure/       the Azure door, through the official SDK or raw requests
  tests/api/         the JSON API door
  tests/admin/       the admin (its Chromium tests: marker ``browser``)
  tests/management/  the management commands
  tests/serving/     the server around the doors: ASGI front, health, metrics
  tests/processes/   real server processes (marker ``processes``)
  tests/client/      leasehold_client, against Leasehold and Azurite
  tests/test_structure.py  module sizes, layers, private Django names

Fixtures live in conftest.py files: here if more than one folder uses them,
else in that folder's conftest.py. Plain helpers a test imports by name live
in modules (helpers.py in a folder; azure_raw.py, server_process.py and
pg_cluster.py here), never fixtures shared through ``import *``.
A test that starts a server process is marked ``processes``, one that drives
Chromium ``browser``, one that runs for many seconds without either ``slow``
(``make test-fast`` runs none of these); a module whose behaviour depends on
the database is marked ``also_postgres`` so that ``make test`` runs it again
on PostgreSQL.
"""

from __future__ import annotations

import faulthandler
import gc
import itertools
import os
import queue
import random
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import pytest

from leases.domain import clock as lease_clock
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY

CONNECTION = ("DefaultEndpointsProtocol=http;AccountName={a};AccountKey={k};"
              "BlobEndpoint={url}/{a};")


def _one_statement(connection, statements: list[str]) -> list[str]:
    """On PostgreSQL, the flush's statements as one (no parameters: psycopg sends it as one
    simple query); a flush was 25 round trips, 4.4 ms of CPU against 2 (docs/decisions/0046)."""
    return [";\n".join(statements)] if connection.vendor == "postgresql" and statements else statements


@pytest.fixture(scope="session", autouse=True)
def _flush_as_the_tests_need_it():
    """pytest-django empties the tables after each transactional test with
    Django's flush (DELETE FROM on SQLite, TRUNCATE on PostgreSQL). Two
    test-only changes to it:

    * the history's triggers refuse that: the flush first moves the
      retention horizon past every event (forwards, as the triggers allow)
      and deletes the history row by row, and the tenures, once the open
      ones are settled (as the triggers allow); the horizon row is then flushed
      with the rest, so the next test starts with nothing deletable, as
      production does;
    * a flush then sends post_migrate, which reads and writes back the
      content types and permissions, most of a flush's time
      (docs/development/tests.md has the figures). Those two tables are left alone
      (migrate made them; no test leaves them changed) and no post_migrate
      is sent (our one receiver puts back the history's triggers, which a
      flush does not drop);
    * on PostgreSQL the tables are emptied with DELETE, not TRUNCATE, which
      makes new files for every table and slows the whole PostgreSQL pass,
      and in one round trip (the statements joined), not one per table;
    * the flush's statements are run without the flush command around them,
      and made once for each set of tables the database holds: the command
      builds its parser, imports every app's management package and goes
      through every model after each test, more CPU than the statements
      themselves (docs/decisions/0046)."""
    from django.core.management.color import no_style
    from django.core.management.commands import flush
    from django.core.management.sql import sql_flush as flush_statements
    from django.db import connections
    from django.test import TransactionTestCase

    from leases.models import HistoryHorizon, LeaseEvent, Tenure

    events, horizon, tenures = LeaseEvent._meta.db_table, HistoryHorizon._meta.db_table, Tenure._meta.db_table
    kept = {"django_content_type", "auth_permission", events, tenures}
    patched = {}
    for conn in connections.all():
        ops = type(conn.ops)
        if ops in patched:
            continue
        original = patched[ops] = ops.sql_flush

        def sql_flush(self, style, tables, *args, _original=original, **kwargs):
            others = [t for t in tables if t not in kept]
            if self.connection.vendor == "postgresql" and not kwargs.get("reset_sequences"):
                # DELETE, not TRUNCATE: a test leaves a few rows, and TRUNCATE makes
                # new files for every table (the foreign keys are checked at commit)
                rest = [f"DELETE FROM {self.quote_name(table)}" for table in others]
            else:
                rest = _original(self, style, others, *args, **kwargs)
            if events not in tables:
                return _one_statement(self.connection, rest)
            return _one_statement(self.connection, [f"INSERT INTO {horizon} (id, delete_before) VALUES (1, '9999-12-31 00:00:00'), "
                    "(2, '9999-12-31 00:00:00') "
                    f"ON CONFLICT (id) DO UPDATE SET delete_before = excluded.delete_before",
                    f"DELETE FROM {events}",
                    f"UPDATE {tenures} SET ended_at = began_at, {self.quote_name('end')} = 'expired' "
                    f"WHERE ended_at IS NULL", f"DELETE FROM {tenures}", *rest])

        ops.sql_flush = sql_flush
    emit, flush.emit_post_migrate_signal = flush.emit_post_migrate_signal, lambda *args, **kwargs: None

    statements: dict = {}  # the flush's, per database and the tables it holds

    def fixture_teardown(self):  # what Django's runs, call_command("flush", ...), less the command
        cascade = self.available_apps is not None
        for alias in self._databases_names(include_mirrors=False):
            conn = connections[alias]
            key = (alias, cascade, tuple(conn.introspection.table_names()))
            if key not in statements:
                statements[key] = flush_statements(no_style(), conn, reset_sequences=False, allow_cascade=cascade)
            conn.ops.execute_sql_flush(statements[key])

    teardown, TransactionTestCase._fixture_teardown = TransactionTestCase._fixture_teardown, fixture_teardown
    yield
    TransactionTestCase._fixture_teardown = teardown
    flush.emit_post_migrate_signal = emit
    for ops, original in patched.items():
        ops.sql_flush = original


@pytest.fixture
def leasehold_env(monkeypatch):
    """leasehold_env(NAME=value, ...): set LEASEHOLD_* variables and read the
    settings again (leases/conf/__init__.py reads them once a process); restored after."""
    from leases import conf

    def setenv(**values: str):
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        return conf.reload()

    yield setenv
    monkeypatch.undo()
    conf.reload()


@pytest.fixture
def clock():
    """Move server time with clock.advance(seconds); reset after the test."""
    lease_clock.reset()
    yield lease_clock
    lease_clock.reset()


class _Handler(WSGIRequestHandler):
    """wsgiref, with no invented Content-Type. It passes the decoded path
    only, no raw URI (the production front passes both): SharedKey's check
    against the path re-quoted as the SDKs quote it is what it exercises."""

    def get_environ(self):
        env = super().get_environ()
        if self.headers.get("content-type") is None:
            env.pop("CONTENT_TYPE", None)
        return env

    def log_message(self, *args):
        pass

    def handle(self):
        super().handle()
        headers = getattr(self, "headers", None)  # None: no request line came
        assert isinstance(self.server, _ThreadingServer)
        self.server.linger.on = headers is not None and (
            headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in headers)


class _ThreadingServer(WSGIServer):
    """wsgiref's server, each request on a thread of its own as with
    ThreadingMixIn, but threads are kept and reused: a new thread opens a new
    database connection (connect and PRAGMAs, a large part of an in-process
    request's time), and the suite makes tens of thousands of requests. A
    request that finds every thread busy gets a new one, so any number run
    at once."""

    allow_reuse_address = True
    KEEP = 8  # idle threads kept, each with its connection; one past that ends
    LINGER = 2.0  # seconds a closed connection's unread request body is still read

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = self._idle = 0
        self._started: list[threading.Thread] = []
        self.linger = threading.local()  # .on: the request this thread served had a body

    def process_request(self, request, client_address):
        with self._lock:
            start = self._idle == 0
            if start:
                self._threads += 1
            else:
                self._idle -= 1
        if start:
            thread = threading.Thread(target=self._serve_requests, daemon=True)
            self._started = [t for t in self._started if t.is_alive()] + [thread]
            thread.start()
        self._requests.put((request, client_address))

    def _serve_requests(self) -> None:
        from django.db import connections

        try:
            while (item := self._requests.get()) is not None:
                request, client_address = item
                try:
                    self.finish_request(request, client_address)
                except Exception:
                    self.handle_error(request, client_address)
                finally:
                    self.shutdown_request(request)
                    with self._lock:
                        retire = self._idle >= self.KEEP
                        if retire:
                            self._threads -= 1
                        else:
                            self._idle += 1
                if retire:
                    break
        finally:
            connections.close_all()  # this thread's

    def shutdown_request(self, request) -> None:
        """A lingering close for a request that had a body: the answer sent,
        the client's unread rest (a refused upload's body) is read and
        dropped until the client closes, for at most LINGER seconds, before
        the socket is closed. Closed with it unread, the kernel resets the
        connection, and a client still writing the body gets EPIPE or a
        reset instead of the answer."""
        if not getattr(self.linger, "on", False):
            return super().shutdown_request(request)
        self.linger.on = False
        try:
            request.shutdown(socket.SHUT_WR)
            request.settimeout(self.LINGER)
            deadline = time.monotonic() + self.LINGER
            while time.monotonic() < deadline and request.recv(65536):
                pass
        except OSError:
            pass
        self.close_request(request)

    def server_close(self) -> None:
        """Stop, and wait for the threads to close their connections (a
        PostgreSQL test database is dropped after the last test)."""
        super().server_close()
        with self._lock:
            threads = self._threads
        for _ in range(threads):  # each thread ends after the request it may be in
            self._requests.put(None)
        for thread in self._started:
            thread.join(timeout=30)


@pytest.fixture
def make_blob(transactional_db, clock):
    """make_blob(ref, actor): create ref's account, container and blob through
    the services (outside any test transaction: the writes really commit)."""
    from leases import services

    def make(ref, actor):
        services.account_ensure(name=ref.account, key1="a2V5")
        services.container_create(account=ref.account, name=ref.container)
        services.blob_put(ref=ref, actor=actor, content=b"x")
        return ref

    return make


@pytest.fixture(scope="session")
def _live_server(django_db_setup):
    """One threaded server running the real WSGI app for the test process:
    its threads, and their database connections, serve test after test
    (a server and connections of each test's own cost more than most
    tests' requests, on PostgreSQL a backend process each). Stopped before
    the test database is removed."""
    from config.wsgi import application

    server = _ThreadingServer(("127.0.0.1", 0), _Handler)
    server.set_app(application)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def azure_server(transactional_db, clock, _live_server):
    """Base URL of a live, threaded server running the real WSGI app, on
    this test's data (the development account made)."""
    from leases.services import account_ensure

    account_ensure(name=DEV_ACCOUNT, key1=DEV_KEY)
    return f"http://127.0.0.1:{_live_server.server_address[1]}"


@pytest.fixture
def connection_string(azure_server):
    return CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=azure_server)


@pytest.fixture
def service(connection_string):
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(connection_string, retry_total=0)


_PORTS_FROM, _PORTS_EACH = 20_000, 1_000  # below the kernel's ephemeral range (32768-60999 here)
_next_port = itertools.count(random.randrange(_PORTS_EACH))


def free_port() -> int:
    """A free port for a server a test starts, that no other test process of
    this run hands out: each xdist worker takes ports in turn from a slice of
    its own, below the ephemeral range that bind(0), outgoing connections and
    the throwaway PostgreSQL clusters use. With bind(0), two workers could
    get the same port between one's pick and its server's bind, and a test
    then talked to the other's server. `make test` runs its two passes at
    once, each with workers gw0, gw1, ...: the PostgreSQL pass takes the upper
    six slices, the SQLite pass the lower six."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")[2:]
    upper = 6 if os.environ.get("LEASEHOLD_DATABASE", "").startswith(("postgres://", "postgresql://")) else 0
    first = _PORTS_FROM + (upper + (int(worker) % 6 if worker.isdigit() else 0)) * _PORTS_EACH
    for _ in range(_PORTS_EACH):
        port = first + next(_next_port) % _PORTS_EACH
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # in use (a server still running, a port in TIME_WAIT)
                continue
            return port
    raise RuntimeError(f"no free port in {first}-{first + _PORTS_EACH - 1}")


# ------------------------------------------------------------------ the JSON API
# (tests/api/, and the few tests elsewhere that call it; helpers: tests/api/helpers.py)

@pytest.fixture
def throttle_file(settings, tmp_path):
    """A throttle counter file of this test's own, so runs never share counts
    (autouse for every test under tests/api/)."""
    settings.LEASEHOLD_THROTTLE_DATABASE = str(tmp_path / "throttle.sqlite3")


@pytest.fixture
def accounts(db):
    """The development account and a second one (OTHER_ACCOUNT)."""
    from leases import services
    from tests.api.helpers import OTHER_ACCOUNT, OTHER_KEY

    services.account_ensure(name=DEV_ACCOUNT, key1=DEV_KEY)
    services.account_ensure(name=OTHER_ACCOUNT, key1=OTHER_KEY)


@pytest.fixture
def api(accounts):
    """A client whose token belongs to a superuser (token "root")."""
    from tests.api.helpers import make_user, token_client

    return token_client(make_user("root", superuser=True), "root")


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """pytest-django's (each worker's test database named apart); on PostgreSQL,
    in a run whose workers share a run directory, each worker's test database
    is a copy of one migrated once a run (tests/pg_test_database.py)."""
    from django.db import connection

    if connection.vendor == "postgresql" and os.environ.get(RUN_DIR) and os.environ.get("PYTEST_XDIST_WORKER"):
        from . import pg_test_database

        pg_test_database.copy_from_template(connection, Path(os.environ[RUN_DIR]))


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database; on PostgreSQL, the connections that the
    live servers' request threads left open are ended first, or the test
    database could not be dropped at the end of the run."""
    yield
    from django.db import connection

    if connection.vendor == "postgresql":
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                           " WHERE datname = current_database() AND pid <> pg_backend_pid()")


# ------------------------------------------------------------------ a worker that dies
# xdist says only "worker 'gw1' crashed while running <test>". Each worker
# writes the tests it starts, and any fatal error's stacks (faulthandler:
# a segfault, an abort), to a file of its own; the report of a crash shows
# its end. No stacks there means the worker was killed (SIGKILL).
#
# The directory is the run's: the controller makes it before the workers
# start and removes it at the end; the workers also share there what one of
# them makes once for all (tests/server_process.py's migrated template).

RUN_DIR = "LEASEHOLD_TEST_RUN_DIR"
_crash_log = None


@pytest.hookimpl(trylast=True)  # after pytest's faulthandler plugin, which would take it back
def pytest_configure(config):
    global _crash_log
    config.addinivalue_line("markers", "postgres: needs PostgreSQL whatever the run's database "
                            "(make test runs these in its SQLite pass, on one cluster its workers share)")
    config.addinivalue_line("markers", "also_postgres: behaviour that depends on the database; make test "
                            "runs the module again on PostgreSQL")
    config.addinivalue_line("markers", "slow: many seconds without a server process (scale data, the big "
                            "fuzz runs); make test-fast leaves it out")
    config.addinivalue_line("markers", "big: minutes of disk and CPU (a 1 GiB upload); make test-big runs "
                            "these, make test leaves them out")
    config.addinivalue_line("markers", "ha: PostgreSQL failover under Patroni and etcd (tests/patroni_cluster.py); "
                            "make test-ha runs these, make test leaves them out")
    gc.disable()  # until the suite is collected: pytest_collection below
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        if getattr(config.option, "numprocesses", None):  # the controller of an xdist run
            os.environ[RUN_DIR] = tempfile.mkdtemp(prefix="leasehold-test-workers-")
    elif os.environ.get(RUN_DIR):
        _crash_log = open(os.path.join(os.environ[RUN_DIR], f"{worker}.log"), "w", buffering=1)
        faulthandler.enable(file=_crash_log, all_threads=True)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """The collector's garbage collection: none while the suite is imported and
    collected (its cyclic collections scanned the growing heap again and again,
    about a third of a test process's collection), then one, and what is left,
    the modules, their items and Django's set-up, frozen out of every later one
    (gc.freeze: never scanned again, never freed). Collection is otherwise
    unchanged, and so is every test's: the collector runs as usual from here."""
    try:
        return (yield)
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()


def pytest_runtest_logstart(nodeid, location):
    if _crash_log is not None:
        _crash_log.write(f"started {nodeid}\n")


def pytest_unconfigure(config):
    if os.environ.get("PYTEST_XDIST_WORKER") is None and os.environ.get(RUN_DIR):
        from django.db import connection
        from pytest_django.plugin import blocking_manager_key

        from . import pg_cluster, pg_test_database

        run_dir = os.environ.pop(RUN_DIR)
        with config.stash[blocking_manager_key].unblock():  # the workers' test databases' template
            pg_test_database.drop_template(connection, Path(run_dir))
        pg_cluster.stop_shared(Path(run_dir))  # the PostgreSQL cluster the workers shared, if one started
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    path = os.path.join(os.environ.get(RUN_DIR, ""), f"{report.node.gateway.id}.log")
    try:
        with open(path, errors="replace") as log:
            lines = log.read().splitlines()
    except OSError:
        return
    fatal = next((i for i, line in enumerate(lines) if not line.startswith("started ")), len(lines))
    shown = lines[max(0, fatal - 3):][:200]
    report.longrepr = (f"{report.longrepr}\n-- the worker's last tests, then any fatal error "
                       f"(none: it was killed) --\n" + "\n".join(shown))


# ------------------------------------------------------------------ the order the workers take
# Modules whose tests mostly wait (real server processes, Azurite's real-time
# leases, the browser) are spread evenly among the others, each module kept
# whole (its module-scoped servers are made once): every worker's share then
# mixes waiting with computing from start to end, instead of the waiting modules
# (tests/processes/, last by name) filling the run's end with idle cores.

def _mostly_waits(module_items: list) -> bool:
    path = str(module_items[0].path)
    return ("/tests/processes/" in path or "/tests/client/" in path
            or any(item.get_closest_marker("processes") or item.get_closest_marker("browser")
                   for item in module_items))


def pytest_collection_modifyitems(config, items):
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")) < 2:
        return
    modules: dict = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    waiting: list[list] = []
    computing: list[list] = []
    for group in modules.values():
        (waiting if _mostly_waits(group) else computing).append(group)
    if not waiting or not computing:
        return
    step = len(computing) / len(waiting)
    ordered = []
    for n, group in enumerate(computing):
        ordered.extend(group)
        while waiting and len(waiting) * step > len(computing) - n - 1:
            ordered.extend(waiting.pop(0))
    for group in waiting:
        ordered.extend(group)
    items[:] = ordered


# ------------------------------------------------------------------ skips in a full run
# tests/skips.py: with LEASEHOLD_FULL_RUN=1 (make test), a skip for a reason
# it does not justify fails its test.
from tests.skips import pytest_runtest_makereport  # noqa: E402,F401


@pytest.fixture(scope="session")
def postgres():
    """``postgres()`` -> URL of a new, empty PostgreSQL database: on the run's
    own PostgreSQL (``make test``'s second pass), else on one throwaway
    cluster the run's workers share (started by the first that asks, stopped
    by the controller: tests/pg_cluster.py), so that the tests that need
    PostgreSQL run in either pass."""
    from . import pg_cluster

    with pg_cluster.server(os.environ.get(RUN_DIR)) as new_database:
        yield new_database


@pytest.fixture
def requests_in_test_transaction():
    """Requests served in this process run inside the test's transaction, as Django's test client's
    do: close_old_connections, which would end it, is unhooked from the request signals; the lease
    clock is frozen. Both undone after."""
    from django.core import signals
    from django.db import close_old_connections

    from leases.domain import clock as lease_clock

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    lease_clock.freeze()
    yield
    lease_clock.reset()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)

