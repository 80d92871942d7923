"""Every Django ORM internal the hot path's statements rely on, in one place.

Django documents the QuerySet and Model APIs, but not the pieces below; a
minor release may rename or reshape them (hence the ``Django<5.3`` pin).
tests/storage/test_storage_contract.py checks each of them against what the
ORM itself does, so an upgrade that changes one fails there, by name, rather
than as a wrong row somewhere else. Nothing outside leases/sql and engines/
may import a private Django name (the engines' own are in
engines/django_internals.py).

Imported names:

- ``FORMAT_QMARK_REGEX``: Django's SQLite cursor rewrites ``%s`` into ``?``
  with this expression on every execute; the compiled statements are
  rewritten once instead (statements.native_sql).
- ``InsertQuery``, ``UpdateQuery``: the ORM's INSERT and UPDATE queries, which
  compile to exactly the SQL ``Model.save()`` sends (statements).
- ``Model``, ``ModelState``: a row the hot path reads becomes a model
  instance as ``Model.from_db`` makes one (``_state`` not adding, its
  database alias; each loaded column's value in the instance's ``__dict__``
  under its attname, deferred ones absent) without running ``__init__``
  (statements.from_row says why).
Methods used on ORM objects (not importable, listed for the contract test):

- ``Query.get_compiler(connection=...)``, ``SQLCompiler.as_sql()``,
  ``SQLCompiler.select`` (the selected columns, in order) and
  ``SQLCompiler.get_converters(expressions)`` (position -> (converters,
  expression)): a compiled SELECT and how to turn its raw row into Python values.
- ``UpdateQuery.add_update_values(dict)``, ``Query.add_filter(name, value)``,
  ``InsertQuery.insert_values(fields, objs)``.
- ``BaseDatabaseWrapper.wrap_database_errors`` and ``.connection`` (the
  driver's connection): statements run on a driver cursor, errors still
  come out as django.db exceptions.
"""

from __future__ import annotations

from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX
from django.db.models.base import Model, ModelState
from django.db.models.sql.subqueries import InsertQuery, UpdateQuery

__all__ = ["FORMAT_QMARK_REGEX", "InsertQuery", "UpdateQuery", "Model", "ModelState"]
