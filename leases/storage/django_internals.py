"""Every Django-internal name the project relies on, in one place.

Django documents the QuerySet and Model APIs, but not the pieces below; a
minor release may rename or reshape them (hence the ``Django<5.3`` pin).
tests/test_storage_contract.py checks each of them against what the ORM
itself does, so an upgrade that changes one fails there, by name, rather
than as a wrong row somewhere else. Nothing outside leases/storage and
leases/sqlite_backend may import a private Django name.

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
- ``SQLiteDatabaseWrapper``: the SQLite backend that leases.sqlite_backend
  extends (documented as subclassable; its hooks below are not).
- ``PostgreSQLDatabaseWrapper``: the PostgreSQL backend that
  leases.pg_backend extends, through public methods only
  (``get_connection_params``, ``get_new_connection``, ``is_usable``,
  ``close_if_unusable_or_obsolete``) and its ``Database`` attribute, the
  driver module it calls ``connect`` on; ``PostgreSQLCursor``, the cursor
  class Django gives its connections (``cursor_factory``), which it extends.

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

Private hooks of BaseDatabaseWrapper that leases.sqlite_backend overrides
(PRIVATE_BACKEND_HOOKS); Django calls each of them, and only them, for:

- ``_start_transaction_under_autocommit()``: the BEGIN of an outermost
  ``atomic()`` (SQLite backend: ``BEGIN <transaction_mode>``). Overridden to
  take the writer lock first and relax synchronous for the fsync after it.
- ``_commit()``, ``_rollback()``: COMMIT / ROLLBACK on the driver's
  connection. Overridden to release the writer lock, and to fsync the WAL
  after the commit.
- ``_close()``: closing the driver's connection. Overridden to release the
  writer lock and close its descriptors.
"""

from __future__ import annotations

from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX
from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabaseWrapper
from django.db.models.base import Model, ModelState
from django.db.models.sql.subqueries import InsertQuery, UpdateQuery

PRIVATE_BACKEND_HOOKS = ("_start_transaction_under_autocommit", "_commit", "_rollback", "_close")

# (PostgreSQLDatabaseWrapper and PostgreSQLCursor come from __getattr__, below)
__all__ = ["FORMAT_QMARK_REGEX", "InsertQuery", "UpdateQuery", "Model", "ModelState", "SQLiteDatabaseWrapper",
           "PRIVATE_BACKEND_HOOKS"]


def __getattr__(name: str):
    """``PostgreSQLDatabaseWrapper`` and ``PostgreSQLCursor``, imported when first asked for: it
    imports the PostgreSQL driver, which a server on SQLite need not load."""
    if name == "PostgreSQLDatabaseWrapper":
        from django.db.backends.postgresql.base import DatabaseWrapper

        return DatabaseWrapper
    if name == "PostgreSQLCursor":
        from django.db.backends.postgresql.base import Cursor

        return Cursor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
