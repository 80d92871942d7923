"""The storage layer's contract with Django's internals.

leases/storage/django_internals.py lists every Django name below the public
API that the project relies on: the ORM pieces the lease hot path compiles
its statements with (leases/storage/statements.py), and the private hooks of
the database backend that engines.sqlite overrides. Each test here
says, by its name and message, which of them a Django upgrade changed: that
a name is gone, that the compiled SQL is no longer the SQL the ORM itself
sends, that values no longer come back as the ORM returns them, or that
Django no longer calls a hook where the backend expects it. Runs on SQLite
and (make test's second pass) on PostgreSQL; the backend hooks on SQLite.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from typing import Any
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.sql.compiler import SQLCompiler
from django.db.models.sql.query import Query

from leases.domain import clock, fingerprints
from leases import services
from leases.models import Blob, LeaseEvent
from leases.services import Actor, ResourceRef
from engines.sqlite.base import DatabaseWrapper as LeaseholdSQLite
from engines import django_internals as engine_internals
from leases.storage import compiled_reads, django_internals, statements
from leases.storage.transactions import write_transaction
from leases.storage.write_queue import WriteQueue
from tests.storage import lock_is_free

pytestmark = pytest.mark.also_postgres

ACCOUNT = "devstoreaccount1"
REF = ResourceRef(ACCOUNT, "contract", "row.txt")
ACTOR = Actor(name=f"account:{ACCOUNT}", via="azure", client_request_id="contract")
LOOKUPS = ("container__account__name", "container__name", "name", "snapshot")
NAMES = (REF.account, REF.container, REF.blob, "")
DEFERRED = ("content", "metadata")
# In the model's field order, as Model.save(update_fields=...) writes them.
LEASE_COLUMNS = ("lease_state", "lease_id", "lease_duration", "lease_expires_at", "lease_generation",
                 "lease_acquired_at", "lease_holder")

sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="engines.sqlite's hooks")


@pytest.fixture
def leased(make_blob, clock):
    """A blob under a live lease: a row with UUID, datetime and integer columns set."""
    make_blob(REF, ACTOR)
    services.lease_acquire(ref=REF, actor=ACTOR, duration=30)
    return Blob.objects.get(name=REF.blob)


def conn():
    """This thread's database wrapper (not the proxy): the compiled statements are kept per wrapper."""
    return connections["default"]


def orm_statements(run) -> list[tuple[str, tuple]]:
    """(sql, params) of every statement ``run()`` sends through Django's
    cursor, before the backend's own rewriting: what the ORM compiles."""
    seen = []

    def capture(execute, sql, params, many, context):
        seen.append((sql, tuple(params or ())))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        run()
    return seen


def native(sql: str) -> str:
    return statements.native_sql(sql, conn())


# ------------------------------------------------------------------ the names exist

def test_every_django_internal_the_storage_layer_imports_still_exists():
    missing = [name for name in ("FORMAT_QMARK_REGEX", "InsertQuery", "UpdateQuery")
               if getattr(django_internals, name, None) is None]
    missing += [name for name in ("SQLiteDatabaseWrapper", "PostgreSQLDatabaseWrapper", "PostgreSQLCursor")
                if getattr(engine_internals, name, None) is None]  # make test installs the driver
    methods = {SQLCompiler: ("as_sql", "get_converters"), Query: ("add_filter", "get_compiler"),
               django_internals.UpdateQuery: ("add_update_values",),
               django_internals.InsertQuery: ("insert_values",),
               BaseDatabaseWrapper: ("wrap_database_errors",),
               engine_internals.SQLiteDatabaseWrapper: engine_internals.PRIVATE_BACKEND_HOOKS}
    missing += [f"{cls.__name__}.{name}" for cls, names in methods.items() for name in names
                if not hasattr(cls, name)]
    assert not missing, f"Django no longer has {missing}: see leases/storage/ and engines/django_internals.py"



def test_the_qmark_rewrite_is_the_one_djangos_sqlite_cursor_makes():
    from django.db.backends.sqlite3.base import SQLiteCursorWrapper

    sql = "SELECT %s, '100%%' FROM t WHERE a = %s AND b LIKE '%%s'"
    assert django_internals.FORMAT_QMARK_REGEX.sub("?", sql).replace("%%", "%") == \
        "SELECT ?, '100%' FROM t WHERE a = ? AND b LIKE '%s'"
    cursor = SQLiteCursorWrapper.__new__(SQLiteCursorWrapper)  # convert_query reads no state
    assert cursor.convert_query(sql) == django_internals.FORMAT_QMARK_REGEX.sub("?", sql).replace("%%", "%"), \
        "Django's SQLite cursor rewrites %s differently now: statements.native_sql must follow"


# ------------------------------------------------------------------ compiled SQL == the ORM's SQL

@pytest.mark.parametrize("skip", [False, True], ids=["waits", "skips-locked"])
def test_the_compiled_locked_read_is_the_sql_the_orm_sends(leased, skip):
    """As the ORM sends it; under rows_not_waited_for, with SKIP LOCKED where
    the database has it (PostgreSQL; SQLite locks no rows)."""
    skip = skip and conn().features.has_select_for_update_skip_locked

    def orm_read():
        with transaction.atomic():
            qs = Blob.objects.filter(**dict(zip(LOOKUPS, NAMES))).defer(*DEFERRED)
            list(qs.select_for_update(of=("self",), skip_locked=skip).order_by()[:1])

    [(orm_sql, orm_params)] = orm_statements(orm_read)
    with (transaction.atomic(), statements.driver_cursor(conn()) as cursor,
          statements.rows_not_waited_for() if skip else contextlib.nullcontext()):
        statements.load_locked(Blob, LOOKUPS, NAMES, deferred=DEFERRED, conn=conn(), cursor=cursor)
        sql, order, _, _ = statements.compiled(conn(), ("load", Blob, LOOKUPS, DEFERRED, (), skip, ()), None)
    assert sql == native(orm_sql), "the ORM compiles this SELECT differently from the QuerySet API now"
    assert tuple(NAMES[i] for i in order) == orm_params


def test_the_locked_read_returns_related_columns_after_the_row(leased):
    """``related``: columns of the rows the lookups join (the account's keys, which the lean lease
    path's write checks its signing key against), after the row's own, which stay as without them."""
    related = ("container__account__key1", "container__account__key2")
    with transaction.atomic(), statements.driver_cursor(conn()) as cursor:
        row, extra = statements.load_locked(Blob, LOOKUPS, NAMES, deferred=DEFERRED, related=related,
                                            conn=conn(), cursor=cursor)
        plain = statements.load_locked(Blob, LOOKUPS, NAMES, deferred=DEFERRED, conn=conn(), cursor=cursor)
        missing = statements.load_locked(Blob, LOOKUPS, (ACCOUNT, "contract", "nope", ""), deferred=DEFERRED,
                                         related=related, conn=conn(), cursor=cursor)
    account = leased.container.account
    assert extra == (account.key1, account.key2)
    assert missing == (None, ())
    assert {f.attname: getattr(row, f.attname) for f in Blob._meta.concrete_fields if f.attname not in DEFERRED} \
        == {f.attname: getattr(plain, f.attname) for f in Blob._meta.concrete_fields if f.attname not in DEFERRED}


def test_the_locked_read_returns_the_values_the_orm_returns(leased):
    with transaction.atomic(), statements.driver_cursor(conn()) as cursor:
        row = statements.load_locked(Blob, LOOKUPS, NAMES, deferred=DEFERRED, conn=conn(), cursor=cursor)
        missing = statements.load_locked(Blob, LOOKUPS, (ACCOUNT, "contract", "nope", ""), deferred=DEFERRED,
                                         conn=conn(), cursor=cursor)
    orm = Blob.objects.defer(*DEFERRED).get(pk=leased.pk)
    assert missing is None
    assert row.get_deferred_fields() == orm.get_deferred_fields() == set(DEFERRED)
    assert row.lease_id is not None and row.lease_expires_at is not None
    for field in Blob._meta.concrete_fields:
        if field.attname in DEFERRED:
            continue
        mine, theirs = getattr(row, field.attname), getattr(orm, field.attname)
        assert (mine, type(mine)) == (theirs, type(theirs)), f"{field.attname} converts differently"
    assert row._state.adding is False and row._state.db == orm._state.db
    assert set(row.__dict__) == set(orm.__dict__), "the row's instance holds other attributes than the ORM's"


def test_a_row_is_built_as_from_db_builds_it(leased):
    """statements.from_row skips Model.__init__ (no signal receivers, no
    override): the instance must be the one Model.from_db makes."""
    names = [f.attname for f in Blob._meta.concrete_fields if f.attname not in DEFERRED]
    row = [getattr(leased, name) for name in names]
    mine, theirs = statements.from_row(Blob, "default", names, row), Blob.from_db("default", names, row)
    assert type(mine) is type(theirs) is Blob
    assert {k: v for k, v in vars(mine).items() if k != "_state"} == \
        {k: v for k, v in vars(theirs).items() if k != "_state"}
    # fields_cache: made on first use (ModelStateFieldsCacheDescriptor); __init__'s foreign key setter used it
    assert mine._state.fields_cache == theirs._state.fields_cache == {}
    assert vars(mine._state) == vars(theirs._state)
    assert mine.get_deferred_fields() == theirs.get_deferred_fields() == set(DEFERRED)
    assert mine == theirs and mine.container == leased.container  # the foreign key loads as on the ORM's


def test_the_compiled_update_is_the_sql_save_sends_and_round_trips(leased):
    obj = Blob.objects.defer(*DEFERRED).get(pk=leased.pk)
    obj.lease_id, obj.lease_expires_at = uuid.uuid4(), clock.now() + timedelta(seconds=45, microseconds=123456)
    obj.lease_duration, obj.lease_generation, obj.lease_holder = 45, 7, "user:contract"
    [(orm_sql, _)] = orm_statements(lambda: obj.save(update_fields=list(LEASE_COLUMNS)))
    obj.lease_id, obj.lease_expires_at = uuid.uuid4(), clock.now() + timedelta(seconds=15, microseconds=654321)
    obj.lease_generation, obj.lease_holder = 8, "user:other"
    with transaction.atomic(), statements.driver_cursor(conn()) as cursor:
        statements.save_columns(obj, LEASE_COLUMNS, conn=conn(), cursor=cursor)
    sql = statements.compiled(conn(), ("update", Blob, LEASE_COLUMNS), None)[0]
    assert sql == native(orm_sql), "save(update_fields=...) sends different SQL from the compiled UPDATE now"
    saved = Blob.objects.get(pk=obj.pk)
    for name in LEASE_COLUMNS:
        assert getattr(saved, name) == getattr(obj, name), f"{name} did not round-trip"


def test_the_compiled_history_insert_is_the_sql_create_sends_and_round_trips(leased):
    now = clock.now()
    columns = dict(occurred_at=now, action="renew", outcome="success", resource_type="blob", account=ACCOUNT,
                   container=REF.container, blob=REF.blob, status_code=200, lease_fingerprint="0123456789ab",
                   duration=30, expires_at=now + timedelta(seconds=30), generation=3, actor="contract",
                   via="azure", request_id=str(uuid.uuid4()))
    [(orm_sql, _)] = orm_statements(lambda: LeaseEvent.objects.create(**columns))
    events = statements.RowInsert(LeaseEvent)
    with transaction.atomic():
        values = events.start(conn(), **columns)
        events.set(values, conn(), generation=4, request_id="second")
        events.insert(values, conn=conn())
    sql = statements.compiled(conn(), ("insert", LeaseEvent), None)[0]
    # The ORM also asks for the new primary key back; the history insert does not.
    assert sql == native(re.sub(r" RETURNING .*$", "", orm_sql)), \
        "Model.save() sends a different INSERT from the compiled history insert now"
    first, second = LeaseEvent.objects.filter(action="renew").order_by("id")
    for field in LeaseEvent._meta.concrete_fields:
        if field.primary_key:
            continue
        # The ORM's save hashes the row; a bare RowInsert does not (the history's event_finish does).
        expected = {"generation": 4, "request_id": "second", "row_hash": None}.get(field.attname,
                                                                                   getattr(first, field.attname))
        assert getattr(second, field.attname) == expected, f"{field.attname} did not round-trip"


def test_a_row_saved_with_its_event_is_saved_and_the_event_inserted(leased):
    """RowInsert.insert(saving=...): the lease write and its history row, on
    PostgreSQL in one statement made of the two compiled ones; both round-trip."""
    obj = Blob.objects.defer(*DEFERRED).get(pk=leased.pk)
    obj.lease_id, obj.lease_expires_at = uuid.uuid4(), clock.now() + timedelta(seconds=20, microseconds=7)
    obj.lease_duration, obj.lease_generation, obj.lease_holder = 20, 9, "user:together"
    events = statements.RowInsert(LeaseEvent)
    with transaction.atomic():  # no cursor given: insert opens one (the lease path passes its own)
        values = events.start(conn(), occurred_at=clock.now(), action="change", outcome="success",
                              resource_type="blob", account=ACCOUNT, container=REF.container, blob=REF.blob,
                              status_code=200, lease_fingerprint=fingerprints.of(obj.lease_id),
                              request_id="together")
        events.insert(values, conn=conn(), saving=(obj, LEASE_COLUMNS))
    compiled = statements._statements[conn()]
    together = compiled.get(("update+insert", Blob, LEASE_COLUMNS, LeaseEvent))
    if conn().vendor == "postgresql":
        assert together == f"WITH saved AS ({compiled[('update', Blob, LEASE_COLUMNS)][0]}) " \
            f"{compiled[('insert', LeaseEvent)][0]}"
    else:
        assert together is None  # two statements: no round trips to save
    saved = Blob.objects.get(pk=obj.pk)
    for name in LEASE_COLUMNS:
        assert getattr(saved, name) == getattr(obj, name), f"{name} was not saved"
    event = LeaseEvent.objects.get(request_id="together")
    assert (event.action, event.lease_fingerprint, event.blob) == ("change", fingerprints.of(obj.lease_id), REF.blob)


@pytest.mark.django_db
def test_the_value_shortcuts_give_what_get_db_prep_save_gives():
    """statements._shortcut: the UUID and UTC-datetime shortcuts of the lease
    hot path send exactly what Django would, for the values the services
    use and for the ones they take Django's way (another zone, a string)."""
    from datetime import datetime, timezone as tz
    from zoneinfo import ZoneInfo

    from leases.models import Container

    now = clock.now()
    datetimes = [now, now.replace(microsecond=0), now + timedelta(seconds=15, microseconds=1),
                 datetime(2001, 2, 3, 4, 5, 6, tzinfo=tz(timedelta(hours=2))),
                 datetime(2030, 1, 1, 0, 0, 0, 500, tzinfo=ZoneInfo("UTC")),
                 datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=ZoneInfo("Europe/Berlin"))]
    ids = [uuid.uuid4(), uuid.UUID(int=0), str(uuid.uuid4()), uuid.uuid4().hex]
    shortcuts = set()
    for model in (Blob, Container, LeaseEvent):
        for field in model._meta.concrete_fields:
            shortcut = statements._shortcut(field, conn())
            if shortcut is None:
                continue
            shortcuts.add(f"{model.__name__}.{field.name}")
            for value in datetimes if field.get_internal_type() == "DateTimeField" else ids:
                assert shortcut(value, conn()) == field.get_db_prep_save(value, conn()), (model, field.name, value)
    # the hot path's lease id has one everywhere, its times on SQLite
    expected = {"Blob.lease_id"}
    if conn().vendor == "sqlite":
        expected |= {"Blob.lease_expires_at", "LeaseEvent.occurred_at", "LeaseEvent.expires_at"}
    assert expected <= shortcuts, expected - shortcuts


# ------------------------------------------------------------------ the backend's private hooks

class _Spy:
    def __init__(self, monkeypatch, wrapper, names):
        self.calls: list[str] = []
        for name in names:
            original = getattr(wrapper, name)
            monkeypatch.setattr(wrapper, name, self._wrap(name, original))

    def _wrap(self, name, original):
        def call(*args, **kwargs):
            self.calls.append(name)
            return original(*args, **kwargs)
        return call


@sqlite_only
def test_django_calls_the_backend_hooks_where_the_writer_lock_expects(leased, monkeypatch, no_background_checkpoints):
    wrapper = connections["default"]
    assert isinstance(wrapper, LeaseholdSQLite)
    lock = wrapper._writer_lock_path()
    if lock is None:
        pytest.skip("an in-memory database has no writer lock")
    spy = _Spy(monkeypatch, wrapper, engine_internals.PRIVATE_BACKEND_HOOKS)
    with transaction.atomic():
        assert spy.calls == ["_start_transaction_under_autocommit"], \
            "atomic() no longer begins through _start_transaction_under_autocommit"
        assert not lock_is_free(lock)
        Blob.objects.filter(pk=leased.pk).update(lease_holder="hooks")
    assert spy.calls[1:] == ["_commit"], "leaving atomic() no longer commits through _commit"
    assert lock_is_free(lock), "the writer lock outlived the commit"

    spy.calls.clear()
    with pytest.raises(RuntimeError), transaction.atomic():
        Blob.objects.filter(pk=leased.pk).update(lease_holder="undone")
        raise RuntimeError
    assert spy.calls == ["_start_transaction_under_autocommit", "_rollback"], \
        "a failed atomic() no longer rolls back through _rollback"
    assert lock_is_free(lock) and Blob.objects.get(pk=leased.pk).lease_holder == "hooks"

    spy.calls.clear()
    with transaction.atomic():
        assert not lock_is_free(lock)
        wrapper.close()  # closing inside a transaction: Django rolls back by closing
        assert spy.calls[-1] == "_close", "close() no longer closes through _close"
        assert lock_is_free(lock), "the writer lock outlived its connection"
        wrapper.needs_rollback = True
    wrapper.connect()


def _count_queued(monkeypatch: pytest.MonkeyPatch) -> list[list]:
    """The writes submitted to the write queue from now on, a list per submission."""
    queued: list[list] = []
    original = WriteQueue.run_all

    def run_all(self: WriteQueue, fns: list, **kw: Any) -> Any:
        queued.append(fns)
        return original(self, fns, **kw)

    monkeypatch.setattr(WriteQueue, "run_all", run_all)
    return queued


def test_a_write_inside_a_transaction_is_a_savepoint_of_it_not_queued(db, monkeypatch):
    queued = _count_queued(monkeypatch)

    def work():
        assert transaction.get_connection().in_atomic_block
        return "done"

    # pytest-django's db fixture holds a transaction open: a nested write is a savepoint of it.
    assert write_transaction(work) == "done" and queued == []
    with transaction.atomic():
        assert write_transaction(work) == "done" and queued == []


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_a_write_goes_through_the_write_queue(monkeypatch):
    queued = _count_queued(monkeypatch)
    assert write_transaction(lambda: transaction.get_connection().in_atomic_block) is True
    assert len(queued) == 1  # SQLite on a file and PostgreSQL alike


# ------------------------------------------------------------------ a query compiled once, run with times

def test_a_compiled_first_row_is_the_orm_query_with_its_times_in_place(transactional_db):
    """compiled_reads.first_row (the blob content clean-up every write runs
    after its answer): the SQL and parameters the ORM sends for the same
    query, and its first row, at times before, between and after the rows'."""
    from leases.models import BlobContent
    from leases.storage import blob_content

    now = clock.now()
    for hours, state, released in ((3, BlobContent.STAGED, None), (2, BlobContent.RELEASED, 1),
                                   (1, BlobContent.LIVE, None)):
        BlobContent.objects.create(id=uuid.uuid4(), state=state, size=0, chunk_bytes=0,
                                   staged_at=now - timedelta(hours=hours),
                                   released_at=None if released is None else now - timedelta(hours=released))
    hour = timedelta(hours=1)
    for staged_before, released_before in ((now - 4 * hour, now - 4 * hour), (now - 2.5 * hour, now - 4 * hour),
                                           (now - 4 * hour, now - 0.5 * hour), (now, now)):
        orm = orm_statements(lambda: blob_content._first_due(staged_before, released_before).first())
        found: list[Any] = []
        compiled = orm_statements(lambda: found.append(
            compiled_reads.first_row("contract due", blob_content._first_due, staged_before, released_before)))
        assert compiled == orm, "the compiled query is no longer the SQL the ORM sends"
        assert found == [blob_content._first_due(staged_before, released_before).first()]
    assert found[0] is not None  # the last times find a row: both answers were compared with one


# ------------------------------------------------------------------ a row with its related rows, compiled once

def _fields(obj) -> dict:
    """Every loaded column of ``obj`` and of the related instances cached on it."""
    loaded = {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields if f.attname in obj.__dict__}
    related = {name: _fields(other) for name, other in obj._state.fields_cache.items()}
    return {**loaded, "related": related, "adding": obj._state.adding, "db": obj._state.db}


@pytest.mark.parametrize("content", [True, False], ids=["with-content", "content-deferred"])
def test_a_row_loaded_with_its_related_rows_is_the_one_the_orm_builds(leased, content):
    """compiled_reads.load_one (the row every request on a resource loads): the
    SQL and parameters ``.first()`` sends, and an instance, with its
    container and account, as QuerySet iteration builds it; None for no row."""
    from leases.services.common import load_resource

    def blobs(account, container, name, snapshot):
        qs = Blob.objects.select_related("container__account")
        qs = qs if content else qs.defer("content")
        return qs.filter(container__account__name=account, container__name=container, name=name, snapshot=snapshot)

    names = (REF.account, REF.container, "row.txt", "")  # NAMES, typed as the lookups' strings
    orm: list[Any] = []
    sent = orm_statements(lambda: orm.append(blobs(*names).first()))
    loaded: list[Any] = []
    compiled = orm_statements(lambda: loaded.append(compiled_reads.load_one(("contract", content), blobs, *names)))
    assert compiled == sent, "the compiled load is no longer the SQL the ORM sends"
    assert _fields(loaded[0]) == _fields(orm[0]) and _fields(orm[0])["related"]["container"]["related"]["account"]
    assert ("content" in loaded[0].__dict__) == content
    assert _fields(load_resource(REF, for_update=False, content=content)) == _fields(orm[0])  # the services' own
    assert compiled_reads.load_one(("contract", content), blobs, REF.account, REF.container, "none", "") is None


def test_a_row_loaded_by_an_id_with_a_constant_in_its_query_is_the_orms(leased):
    """compiled_reads.load_one with an integer lookup value (a container's
    id) and a constant of the query's own (Put Blob's read of the row it
    replaces): the SQL and parameters ``.first()`` sends, the same row."""
    from leases.services.blobs import blob_for_write

    def by_id(container_id, name):
        return Blob.objects.select_for_update().defer("content").filter(container_id=container_id, name=name,
                                                                         snapshot="")

    container = leased.container
    with transaction.atomic():
        orm: list[Any] = []
        sent = orm_statements(lambda: orm.append(by_id(container.pk, REF.blob).first()))
        loaded: list[Any] = []
        compiled = orm_statements(lambda: loaded.append(
            compiled_reads.load_one("contract by id", by_id, container.pk, str(REF.blob))))
        assert compiled == sent, "the compiled load is no longer the SQL the ORM sends"
        assert _fields(loaded[0]) == _fields(orm[0]) and "content" not in loaded[0].__dict__
        assert _fields(blob_for_write(container, REF)) == _fields(orm[0])  # the service's own
        assert compiled_reads.load_one("contract by id", by_id, container.pk + 1000, str(REF.blob)) is None
