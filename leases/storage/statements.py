"""The lease hot path's statements (one read, one write, one history insert; on PostgreSQL the write
and the insert as one statement), compiled by the ORM once per database connection and then only
bound and run on the driver's cursor, because building them through the QuerySet API on every
request costs far more CPU than running them; same SQL, same types, any backend.
docs/development/architecture.md ("The hot path's statements") tells how; nothing here knows what a
lease is: callers pass names, columns and values."""

from __future__ import annotations

import uuid
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timezone

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, F, UUIDField
from django.db.models.signals import post_init, pre_init

from engines import postgres
from leases.storage.django_internals import FORMAT_QMARK_REGEX, InsertQuery, Model, ModelState, UpdateQuery

_statements: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # connection -> {key: compiled}
_PLACEHOLDER_VALUES = {  # any valid value of the type: compiled statements keep only the SQL
    "CharField": "x", "TextField": "x", "UUIDField": uuid.UUID(int=1), "IntegerField": 1, "BigIntegerField": 1,
    "PositiveSmallIntegerField": 1, "DateTimeField": datetime(2000, 1, 1, tzinfo=timezone.utc),
}
# Python str/int already are what these fields send to the database.
_PASSTHROUGH_TYPES = ("CharField", "TextField", "IntegerField", "BigIntegerField", "PositiveSmallIntegerField")


def compiled(conn, key, compile_):
    """``compile_(conn)``, once per connection and ``key``."""
    cache = _statements.get(conn)
    if cache is None:
        cache = _statements[conn] = {}
    stmt = cache.get(key)
    if stmt is None:
        stmt = cache[key] = compile_(conn)
    return stmt


def native_sql(sql: str, conn) -> str:
    """``sql`` (Django's %s style) in the parameter style of conn's driver."""
    if not postgres.in_use(conn):
        return FORMAT_QMARK_REGEX.sub("?", sql).replace("%%", "%")
    return sql  # psycopg takes %s


@contextmanager
def driver_cursor(conn):
    """A DB-API cursor in conn's current transaction for compiled statements;
    driver errors still come out as django.db exceptions."""
    with conn.wrap_database_errors:
        cursor = conn.connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()


def value_preparers(fields, conn) -> list:
    """Per field: None (pass the value as it is), a shortcut that gives what
    get_db_prep_save gives, or its get_db_prep_save."""
    return [None if f.get_internal_type() in _PASSTHROUGH_TYPES else _shortcut(f, conn) or f.get_db_prep_save
            for f in fields]


def _shortcut(field, conn):
    """get_db_prep_save of a plain UUIDField, or of a plain DateTimeField on
    SQLite for the UTC datetimes the services use (clock.now() and times
    computed from it), in a few operations instead of Django's ~15 calls;
    any other value goes through Django. Two of these a history row, one or
    two a lease UPDATE, all under the writer lock.
    (tests/storage/test_storage_contract.py holds them to Django's answers.)"""
    kind = type(field)
    if kind is UUIDField:
        if conn.features.has_native_uuid_field:
            return lambda value, conn: value if type(value) is uuid.UUID else field.get_db_prep_save(value, conn)
        return lambda value, conn: value.hex if type(value) is uuid.UUID else field.get_db_prep_save(value, conn)
    if kind is DateTimeField and not postgres.in_use(conn) and settings.USE_TZ and conn.timezone is timezone.utc:
        # Django: make_naive(value, UTC) then str(); for a value in UTC
        # already, that is str() of the same fields without the zone.
        return lambda value, conn: (str(value.replace(tzinfo=None)) if value.tzinfo is timezone.utc
                                    else field.get_db_prep_save(value, conn))
    return None


def prepared_values(preparers, values, conn) -> list:
    return [v if p is None or v is None else p(v, conn) for p, v in zip(preparers, values)]


# ------------------------------------------------------------------ load one row, locked

# Lookup values no name has: the placeholders a lookup is compiled with.
LOOKUP_KEYS = ("\0k0", "\0k1", "\0k2", "\0k3", "\0k4", "\0k5")


class RowLocked(Exception):
    """The row is locked by another transaction and ``rows_not_waited_for``
    is in force (or there is no such row: SKIP LOCKED cannot tell): nothing
    was read or written for it."""


_skip_locked: ContextVar[bool] = ContextVar("skip_locked", default=False)


@contextmanager
def rows_not_waited_for():
    """In the block, ``load_locked`` does not wait for a row another
    transaction holds (PostgreSQL's SKIP LOCKED) but raises RowLocked: for
    a transaction shared by several requests, which must neither hold up
    its other requests behind one locked row nor wait while holding rows
    (leases/storage/transactions.py). No effect where rows are not locked (SQLite)."""
    token = _skip_locked.set(True)
    try:
        yield
    finally:
        _skip_locked.reset(token)


def _compile_load(model, lookups: tuple[str, ...], deferred: tuple[str, ...], also: tuple[str, ...], skip: bool,
                  related: tuple[str, ...], conn):
    """SELECT the row (not the ``deferred`` columns) with a row lock, by
    ``lookups`` (``skip``: SKIP LOCKED), then the ``related`` columns (paths
    through its foreign keys, joined as the lookups join them); with
    ``also``, the rows of that as a subquery and each of ``also`` after its
    columns: selected by the outer query, they are evaluated once the row is
    locked (in the locking query itself, PostgreSQL evaluates them before it
    waits for a lock another transaction holds)."""
    keys = LOOKUP_KEYS[:len(lookups)]
    qs = model._default_manager.filter(**dict(zip(lookups, keys))).defer(*deferred)
    if related:
        qs = qs.annotate(**{f"leasehold_related_{i}": F(path) for i, path in enumerate(related)})
    compiler = qs.select_for_update(of=("self",), skip_locked=skip).order_by()[:1].query.get_compiler(connection=conn)
    sql, params = compiler.as_sql()
    if also:
        sql = f"SELECT locked.*, {', '.join(also)} FROM ({sql}) AS locked"
    order = tuple(keys.index(p) for p in params)
    columns = [col for col, _, _ in compiler.select]
    own = compiler.klass_info["select_fields"]
    if own != list(range(len(own))) or len(columns) != len(own) + len(related):
        raise AssertionError(f"unexpected SELECT shape: {sql}")
    converters = [(pos, convs, expr) for pos, (convs, expr) in compiler.get_converters(columns).items()]
    return native_sql(sql, conn), order, [col.target.attname for col in columns[:len(own)]], converters


def load_locked(model, lookups: tuple[str, ...], values: tuple, *, deferred: tuple[str, ...] = (),
                also: tuple[str, ...] = (), related: tuple[str, ...] = (), conn, cursor):
    """``model.objects.select_for_update(of=("self",)).defer(*deferred)
    .filter(**dict(zip(lookups, values))).first()`` in one compiled
    statement; None if there is no such row. With ``related`` (paths to
    columns of rows its foreign keys name, e.g. ``container__account__key1``)
    or ``also`` (SQL expressions, evaluated once the row is locked): (the
    instance or None, the related columns' values then also's).
    Under ``rows_not_waited_for``, on PostgreSQL, RowLocked instead of None."""
    skip = _skip_locked.get() and conn.features.has_select_for_update_skip_locked
    sql, order, names, converters = compiled(
        conn, ("load", model, lookups, deferred, also, skip, related),
        lambda c: _compile_load(model, lookups, deferred, also, skip, related, c))
    cursor.execute(sql, [values[i] for i in order])
    row = cursor.fetchone()
    if row is None and skip:
        raise RowLocked(model._meta.model_name)
    if also or related:
        if row is None:
            return None, ()
        row = converted(row, converters, conn)
        return from_row(model, conn.alias, names, row[:len(names)]), tuple(row[len(names):])
    if row is None:
        return None
    return _instance(model, conn, names, converters, row)


def _instance(model, conn, names, converters, row):
    return from_row(model, conn.alias, names, converted(row, converters, conn))


def converted(row, converters, conn):
    """``row`` with each value the ORM converts converted as it would."""
    if not converters:
        return row
    row = list(row)
    for pos, convs, expr in converters:
        value = row[pos]
        for convert in convs:
            value = convert(value, expr, conn)
        row[pos] = value
    return row


def from_row(model, alias: str, names: list[str], row) -> Model:
    """``model.from_db(alias, names, row)``: the instance Django builds for
    a row read from the database, built directly when nothing would see the
    difference -- the model keeps Django's own ``__init__`` and ``from_db``,
    and no pre_init/post_init receiver is connected (for any model). What
    ``__init__`` does for such a row is to set each loaded value under its
    attname (a deferred column is left out: that is what makes it deferred)
    and a fresh ``_state``; ``__init__`` does much more per field, on every
    lease request (bench/README.md, "What do the figures in the code's comments
    rest on?")."""
    if (pre_init.receivers or post_init.receivers or model.__init__ is not Model.__init__
            or model.from_db.__func__ is not Model.from_db.__func__):
        return model.from_db(alias, names, row)
    obj = model.__new__(model)
    state = obj._state = ModelState()
    state.adding = False
    state.db = alias
    obj.__dict__.update(zip(names, row))
    return obj


# ------------------------------------------------------------------ update some columns of one row

def _compile_update(model, columns, conn):
    """UPDATE <columns> WHERE pk = %s."""
    fields = [model._meta.get_field(name) for name in columns]
    query = UpdateQuery(model)
    query.add_update_values({f.name: _PLACEHOLDER_VALUES[f.get_internal_type()] for f in fields})
    query.add_filter("pk", 0)
    sql, params = query.get_compiler(connection=conn).as_sql()
    if len(params) != len(fields) + 1:
        raise AssertionError(f"unexpected UPDATE shape: {sql}")
    return native_sql(sql, conn), [f.attname for f in fields], value_preparers(fields, conn)


def save_columns(obj, columns: tuple[str, ...], *, conn, cursor) -> None:
    """``obj.save(update_fields=columns)`` as one compiled UPDATE (one per
    combination of columns, compiled once)."""
    cursor.execute(*_update_params(obj, columns, conn))


def _update_params(obj, columns: tuple[str, ...], conn) -> tuple[str, list]:
    model = type(obj)
    sql, names, preparers = compiled(conn, ("update", model, columns), lambda c: _compile_update(model, columns, c))
    return sql, [*prepared_values(preparers, [getattr(obj, n) for n in names], conn), obj.pk]


# ------------------------------------------------------------------ insert history rows

def _compile_insert(model, conn):
    """INSERT INTO model's table: every column but the auto primary key; with
    each column's position, and a row of defaults ready to send."""
    fields = [f for f in model._meta.local_concrete_fields if not f.primary_key]
    dummy = model(**{f.attname: _PLACEHOLDER_VALUES[f.get_internal_type()] for f in fields})
    query = InsertQuery(model)
    query.insert_values(fields, [dummy])
    [(sql, params)] = query.get_compiler(connection=conn).as_sql()
    if len(params) != len(fields):
        raise AssertionError(f"unexpected INSERT shape: {sql}")
    per_row = [f.name for f in fields if f.has_default() and callable(f.default)]
    if per_row:  # the defaults below are computed once, not per row
        raise AssertionError(f"columns with callable defaults need their callers to set them: {per_row}")
    preparers = value_preparers(fields, conn)
    defaults = prepared_values(preparers, [f.get_default() for f in fields], conn)
    return native_sql(sql, conn), preparers, {f.attname: i for i, f in enumerate(fields)}, defaults


class RowInsert:
    """One INSERT of ``model`` (the history): ``start`` a row of defaults,
    ``set`` columns as they become known (values prepared for the database
    at once, so that little is left to do under the write lock), ``insert``."""

    def __init__(self, model):
        self.model = model

    def start(self, conn, **columns) -> list:
        _, preparers, position, defaults = compiled(conn, ("insert", self.model),
                                                    lambda c: _compile_insert(self.model, c))
        values = list(defaults)  # a column added to the model later gets its default
        self.set(values, conn, **columns)
        return values

    def set(self, values: list, conn, **columns) -> None:
        _, preparers, position, _ = compiled(conn, ("insert", self.model), lambda c: _compile_insert(self.model, c))
        for name, value in columns.items():
            i = position[name]
            prepare = preparers[i]
            values[i] = value if prepare is None or value is None else prepare(value, conn)

    def positions(self, conn, names: tuple[str, ...]) -> tuple[int, ...]:
        """Where each of ``names`` is in a row from ``start``."""
        def find(c):
            position = compiled(c, ("insert", self.model), lambda c2: _compile_insert(self.model, c2))[2]
            return tuple(position[name] for name in names)
        return compiled(conn, ("positions", self.model, names), find)

    def insert(self, values: list, *, conn=None, cursor=None, saving: tuple | None = None) -> None:
        """In the caller's transaction, on ``cursor`` of ``conn`` if given.
        ``saving``: (obj, columns), ``save_columns(obj, columns)`` first --
        on PostgreSQL in the same statement (``WITH saved AS (UPDATE ...)
        INSERT ...``: one round trip and one statement to run, not two)."""
        conn = conn or transaction.get_connection()
        if cursor is None:
            with driver_cursor(conn) as own:
                return self.insert(values, conn=conn, cursor=own, saving=saving)
        sql = compiled(conn, ("insert", self.model), lambda c: _compile_insert(self.model, c))[0]
        if saving is not None:
            obj, columns = saving
            if postgres.in_use(conn):
                update, params = _update_params(obj, columns, conn)
                sql = compiled(conn, ("update+insert", type(obj), columns, self.model),
                               lambda c: f"WITH saved AS ({update}) {sql}")
                values = [*params, *values]
            else:
                save_columns(obj, columns, conn=conn, cursor=cursor)
        cursor.execute(sql, values)


# ------------------------------------------------------------------ fencing generations

def _compile_next_generation(model, conn):
    """Upsert a name's fencing generation: the proposed one (the row's + 1),
    or one more than the name already handed out if that is higher; returns
    the generation stored. Same SQL on SQLite (3.35+) and PostgreSQL."""
    q = conn.ops.quote_name
    table = q(model._meta.db_table)
    gen = q("generation")
    sql = (f"INSERT INTO {table} ({q('key')}, {q('account')}, {q('container')}, {q('blob')}, {gen}) "
           f"VALUES (%s, %s, %s, %s, %s) ON CONFLICT ({q('key')}) DO UPDATE SET {gen} = "
           f"CASE WHEN excluded.{gen} > {table}.{gen} THEN excluded.{gen} ELSE {table}.{gen} + 1 END "
           f"RETURNING {gen}")
    return native_sql(sql, conn)


def next_generation(model, *, key: str, account: str, container: str, blob: str, proposed: int,
                    conn, cursor) -> int:
    """Record ``proposed`` (or one more than the name's last) as the name's
    fencing generation in ``model`` (FencingGeneration); the one stored."""
    sql = compiled(conn, ("next_generation", model), lambda c: _compile_next_generation(model, c))
    cursor.execute(sql, [key, account, container, blob, proposed])
    return cursor.fetchone()[0]
