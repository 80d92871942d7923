"""The lease hot path's statements, compiled once per database connection."""

from __future__ import annotations

import uuid
import weakref
from contextlib import contextmanager
from datetime import datetime, timezone

from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX
from django.db.models.sql.subqueries import InsertQuery, UpdateQuery

from .. import machine
from ..errors import LeaseholdError
from ..models import Blob, Container, FencingGeneration, LeaseEvent
from .common import ResourceRef, _container_must_exist


# ------------------------------------------------------------------ the lease hot path's statements
#
# A lease action is one read, one write and one history insert. Building those
# statements through the QuerySet API every time costs far more CPU than
# running them (about 1,800 Python calls a transaction), so the ORM compiles
# each of them once per database connection -- the very SQL it would send,
# FOR UPDATE OF included on PostgreSQL -- and each call then only binds values
# prepared by the fields themselves (get_db_prep_save), runs the statement on
# the driver's cursor of the current transaction, and converts what it reads
# with the ORM's own converters into a model instance (Model.from_db). Same
# SQL, same types, any backend. The SQL is kept in the driver's own parameter
# style because Django's SQLite cursor rewrites %s into ? with a regular
# expression on every execute, which costs more CPU than SQLite takes to run
# the history INSERT. Rows written this way send no model signals (none are
# connected) and are not in connection.queries; history rows are only ever
# INSERTed, as LeaseEvent.save allows.

_statements: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # connection -> {key: compiled}
_PLACEHOLDER_VALUES = {  # any valid value of the type: compiled statements keep only the SQL
    "CharField": "x", "UUIDField": uuid.UUID(int=1), "IntegerField": 1, "BigIntegerField": 1,
    "PositiveSmallIntegerField": 1, "DateTimeField": datetime(2000, 1, 1, tzinfo=timezone.utc),
}
# Python str/int already are what these fields send to the database.
_PASSTHROUGH_TYPES = ("CharField", "IntegerField", "BigIntegerField", "PositiveSmallIntegerField")


def _compiled(conn, key, compile_):
    cache = _statements.get(conn)
    if cache is None:
        cache = _statements[conn] = {}
    stmt = cache.get(key)
    if stmt is None:
        stmt = cache[key] = compile_(conn)
    return stmt


def _native(sql: str, conn) -> str:
    """``sql`` (Django's %s style) in the parameter style of conn's driver."""
    if conn.vendor == "sqlite":
        return FORMAT_QMARK_REGEX.sub("?", sql).replace("%%", "%")
    return sql  # psycopg takes %s


@contextmanager
def _driver_cursor(conn):
    """A DB-API cursor in conn's current transaction for compiled statements;
    driver errors still come out as django.db exceptions."""
    with conn.wrap_database_errors:
        cursor = conn.connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()


def _preparers(fields) -> list:
    """Per field: None (pass the value as it is) or its get_db_prep_save."""
    return [None if f.get_internal_type() in _PASSTHROUGH_TYPES else f.get_db_prep_save for f in fields]


def _prepared(preparers, values, conn) -> list:
    return [v if p is None or v is None else p(v, conn) for p, v in zip(preparers, values)]


_KEYS = ("\0account", "\0container", "\0blob", "\0snapshot")


def _compile_lease_load(model, conn):
    """SELECT the row (not its content or metadata) with a row lock, by names."""
    if model is Blob:
        qs = Blob.objects.filter(container__account__name=_KEYS[0], container__name=_KEYS[1],
                                 name=_KEYS[2], snapshot=_KEYS[3]).defer("content", "metadata")
    else:
        qs = Container.objects.filter(account__name=_KEYS[0], name=_KEYS[1]).defer("metadata")
    compiler = qs.select_for_update(of=("self",)).order_by()[:1].query.get_compiler(connection=conn)
    sql, params = compiler.as_sql()
    order = tuple(_KEYS.index(p) for p in params)
    columns = [col for col, _, _ in compiler.select]
    converters = [(pos, convs, expr) for pos, (convs, expr) in compiler.get_converters(columns).items()]
    return _native(sql, conn), order, [col.target.attname for col in columns], converters


def _load_for_lease(ref: ResourceRef, conn, cursor) -> Container | Blob:
    """``_load(ref, for_update=True)`` in one compiled statement."""
    model = Container if ref.blob is None else Blob
    sql, order, names, converters = _compiled(conn, ("load", model), lambda c: _compile_lease_load(model, c))
    names_given = (ref.account, ref.container, ref.blob, ref.snapshot)
    cursor.execute(sql, [names_given[i] for i in order])
    row = cursor.fetchone()
    if row is None:
        if model is Container:
            raise LeaseholdError("ContainerNotFound", noun=machine.CONTAINER)
        _container_must_exist(ref)
        raise LeaseholdError("BlobNotFound")
    if converters:
        row = list(row)
        for pos, convs, expr in converters:
            value = row[pos]
            for convert in convs:
                value = convert(value, expr, conn)
            row[pos] = value
    return model.from_db(conn.alias, names, row)


def _compile_update(model, columns, conn):
    """UPDATE <columns> WHERE pk = %s."""
    fields = [model._meta.get_field(name) for name in columns]
    query = UpdateQuery(model)
    query.add_update_values({f.name: _PLACEHOLDER_VALUES[f.get_internal_type()] for f in fields})
    query.add_filter("pk", 0)
    sql, params = query.get_compiler(connection=conn).as_sql()
    if len(params) != len(fields) + 1:
        raise AssertionError(f"unexpected UPDATE shape: {sql}")
    return _native(sql, conn), [f.attname for f in fields], _preparers(fields)


def _compile_event_insert(conn):
    """INSERT INTO lease history: every column but the auto primary key; with
    each column's position, and a row of defaults ready to send."""
    fields = [f for f in LeaseEvent._meta.local_concrete_fields if not f.primary_key]
    dummy = LeaseEvent(**{f.attname: _PLACEHOLDER_VALUES[f.get_internal_type()] for f in fields})
    query = InsertQuery(LeaseEvent)
    query.insert_values(fields, [dummy])
    [(sql, params)] = query.get_compiler(connection=conn).as_sql()
    if len(params) != len(fields):
        raise AssertionError(f"unexpected INSERT shape: {sql}")
    per_row = [f.name for f in fields if f.has_default() and callable(f.default)]
    if per_row:  # the defaults below are computed once, not per event
        raise AssertionError(f"history columns with callable defaults need _event_start to set them: {per_row}")
    preparers = _preparers(fields)
    defaults = _prepared(preparers, [f.get_default() for f in fields], conn)
    return _native(sql, conn), preparers, {f.attname: i for i, f in enumerate(fields)}, defaults


def _event_set(values: list, conn, preparers, position, **columns) -> None:
    for name, value in columns.items():
        i = position[name]
        prepare = preparers[i]
        values[i] = value if prepare is None or value is None else prepare(value, conn)


def _compile_next_generation(conn):
    """Upsert a name's fencing generation: the proposed one (the row's + 1),
    or one more than the name already handed out if that is higher; returns
    the generation stored. Same SQL on SQLite (3.35+) and PostgreSQL."""
    q = conn.ops.quote_name
    table = q(FencingGeneration._meta.db_table)
    gen = q("generation")
    sql = (f"INSERT INTO {table} ({q('key')}, {q('account')}, {q('container')}, {q('blob')}, {gen}) "
           f"VALUES (%s, %s, %s, %s, %s) ON CONFLICT ({q('key')}) DO UPDATE SET {gen} = "
           f"CASE WHEN excluded.{gen} > {table}.{gen} THEN excluded.{gen} ELSE {table}.{gen} + 1 END "
           f"RETURNING {gen}")
    return _native(sql, conn)


def _next_generation(ref: ResourceRef, proposed: int, *, conn, cursor) -> int:
    """The fencing token of a new lease on ``ref``, recorded for its name in
    the lease transaction: one statement, run only when a lease is new (not
    on renew, change, release or break)."""
    sql = _compiled(conn, "next_generation", _compile_next_generation)
    cursor.execute(sql, [FencingGeneration.key_for(ref.account, ref.container, ref.blob), ref.account,
                         ref.container, ref.blob or "", proposed])
    return cursor.fetchone()[0]


def _save_lease(obj: Container | Blob, record: machine.LeaseRecord, *extra: str, conn, cursor) -> None:
    """``obj.save(update_fields=[changed lease columns, *extra])`` as one
    compiled UPDATE (one per combination of columns, compiled once); none if
    nothing changed."""
    columns = (*obj.set_lease_record(record), *extra)
    if not columns:
        return
    model = type(obj)
    sql, names, preparers = _compiled(conn, ("update", model, columns), lambda c: _compile_update(model, columns, c))
    cursor.execute(sql, [*_prepared(preparers, [getattr(obj, n) for n in names], conn), obj.pk])
