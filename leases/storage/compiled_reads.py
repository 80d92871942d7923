"""Reads every request on a resource runs, compiled by the ORM once per database connection and then
only run with their values in place: ``load_one``, the row (with what ``select_related`` reads) that
every request on a blob or container loads, built as QuerySet iteration builds it; ``first_row``, the
queries the blob content clean-up runs after every write. Building them through the QuerySet API took
about nine tenths of their CPU (docs/decisions/0036)."""

from __future__ import annotations

from datetime import datetime, timezone

from django.db import transaction

from leases.storage.django_internals import get_related_populators
from leases.storage.statements import LOOKUP_KEYS, compiled, converted, driver_cursor, native_sql

# ------------------------------------------------------------------ one row with its related rows

# Ids no row has: the placeholders of integer lookups (a primary key, a foreign key).
_INT_KEYS = tuple(-(2 ** 62) - n for n in range(6))


def _compile_one(build, kinds: tuple[bool, ...], conn):
    """``build(*keys)`` (a QuerySet) as ``.first()`` sends it (``kinds``:
    whether each lookup value is an integer), with each key's parameter
    position, and what iteration needs to build its row."""
    keys = [_INT_KEYS[i] if is_int else LOOKUP_KEYS[i] for i, is_int in enumerate(kinds)]
    qs = build(*keys)
    qs = (qs if qs.ordered else qs.order_by("pk"))[:1]
    compiler = qs.query.get_compiler(connection=conn)
    sql, params = compiler.as_sql()
    if not all(key in params for key in keys):
        raise AssertionError(f"each lookup value must be a parameter of the query: {sql}")
    # Each parameter: the position of its lookup value, or the query's own constant (None).
    slots = [(keys.index(p), None) if p in keys else (None, p) for p in params]
    select, info = compiler.select, compiler.klass_info
    start, end = info["select_fields"][0], info["select_fields"][-1] + 1
    names = [col.target.attname for col, _, _ in select[start:end]]
    converters = [(pos, convs, expr) for pos, (convs, expr)
                  in compiler.get_converters([s[0] for s in select[:compiler.col_count]]).items()]
    return sql, slots, info["model"], (start, end), names, get_related_populators(info, select, conn.alias), converters


def load_one(key, build, *values: str | int, conn=None):
    """``build(*values).first()`` (``build``: lookup values -> a QuerySet,
    select_related() rows included), the instance built as QuerySet
    iteration builds it, None if no row: compiled by the ORM once per
    connection and ``key``, then only run with ``values`` in their places.
    For the row every Azure request on a resource loads, whose query cost
    more to build than to run."""
    conn = conn or transaction.get_connection()
    kinds = tuple(type(value) is int for value in values)
    sql, slots, model, (start, end), names, populators, converters = compiled(
        conn, ("load_one", key, kinds), lambda c: _compile_one(build, kinds, c))
    with conn.cursor() as cursor:
        cursor.execute(sql, [constant if i is None else values[i] for i, constant in slots])
        row = cursor.fetchone()
    if row is None:
        return None
    row = converted(row, converters, conn)
    obj = model.from_db(conn.alias, names, row[start:end])
    for populator in populators:
        populator.populate(row, obj)
    return obj


# ------------------------------------------------------------------ a query run after every write

# Times no query of ours asks about: the placeholders a query is compiled with.
_TIME_SLOTS = tuple(datetime(1901 + n, 1, 1, tzinfo=timezone.utc) for n in range(4))


def _compile_query(build, slots: int, conn):
    """The SQL of ``build(*times)``, with each time's parameter position and
    the ORM's converters of the values read."""
    compiler = build(*_TIME_SLOTS[:slots]).query.get_compiler(connection=conn)
    sql, params = compiler.as_sql()
    columns = [col for col, _, _ in compiler.select]
    converters = [(pos, convs, expr) for pos, (convs, expr) in compiler.get_converters(columns).items()]
    placeholders = [conn.ops.adapt_datetimefield_value(t) for t in _TIME_SLOTS[:slots]]
    positions = [placeholders.index(p) if isinstance(p, (str, datetime)) and p in placeholders else None
                 for p in params]
    if {i for i in positions if i is not None} != set(range(slots)):
        raise AssertionError(f"each time must be a parameter of the query: {sql}")
    return sql, list(params), positions, converters


def first_row(key, build, *times: datetime, conn=None):
    """``build(*times).first()`` as a tuple (``build``: times -> a QuerySet of
    ``values_list``), None if no row: compiled by the ORM once per
    connection and ``key``, then only run with ``times`` in their places.
    For the queries every write runs after its answer (the blob content's
    clean-up), whose compiling cost more than running them."""
    conn = conn or transaction.get_connection()
    sql, params, positions, converters = compiled(conn, ("first_row", key),
                                                  lambda c: _compile_query(build, len(times), c))
    args = [p if i is None else conn.ops.adapt_datetimefield_value(times[i]) for p, i in zip(params, positions)]
    with conn.cursor() as cursor:
        cursor.execute(sql, args)
        row = cursor.fetchone()
    return None if row is None else tuple(converted(row, converters, conn))


# ------------------------------------------------------------------ a few columns of one row, by its keys

def _compile_values(build, count: int, conn):
    """The SQL of ``build(*keys)`` (a ``values_list`` QuerySet) as
    ``.first()`` sends it, with each parameter's lookup position and the
    ORM's converters of the values read."""
    keys = LOOKUP_KEYS[:count]
    qs = build(*keys)
    compiler = (qs if qs.ordered else qs.order_by("pk"))[:1].query.get_compiler(connection=conn)
    sql, params = compiler.as_sql()
    if not all(key in params for key in keys):
        raise AssertionError(f"each lookup value must be a parameter of the query: {sql}")
    slots = [(keys.index(p), None) if p in keys else (None, p) for p in params]
    columns = [col for col, _, _ in compiler.select]
    converters = [(pos, convs, expr) for pos, (convs, expr) in compiler.get_converters(columns).items()]
    return native_sql(sql, conn), slots, converters


def values_one(key, build, *values: str, conn=None):
    """``build(*values).first()`` as a tuple (``build``: string lookup values
    -> a QuerySet of ``values_list``), None if no row: compiled by the ORM
    once per connection and ``key``, then only run with ``values`` in their
    places, on the driver's cursor (Django's cursor wrapper cost more than
    the read). For credentials read fresh on every request (an account's keys,
    a token's state), which must not be remembered."""
    conn = conn or transaction.get_connection()
    sql, slots, converters = compiled(conn, ("values_one", key),
                                      lambda c: _compile_values(build, len(values), c))
    conn.ensure_connection()
    with driver_cursor(conn) as cursor:
        cursor.execute(sql, [constant if i is None else values[i] for i, constant in slots])
        row = cursor.fetchone()
    return None if row is None else tuple(converted(row, converters, conn))
