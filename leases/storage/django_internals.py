"""Every Django ORM internal the hot path's statements rely on, in one place: Django documents the
QuerySet and Model APIs but not these, and a minor release may reshape them (hence the
``Django<5.3`` pin), so tests/storage/test_storage_contract.py checks each against what the ORM
itself does and an upgrade that changes one fails there, by name, rather than as a wrong row
somewhere else. Nothing outside leases/storage and engines/ imports a private Django name (the
engines' own are in engines/django_internals.py)."""

from __future__ import annotations

# Django's SQLite cursor rewrites %s into ? with this expression on every execute; the compiled
# statements are rewritten once instead (statements.native_sql).
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX

# A row the hot path reads becomes a model instance as Model.from_db makes one (_state not adding,
# its database alias; each loaded column's value in the instance's __dict__ under its attname,
# deferred ones absent) without running __init__ (statements.from_row says why).
from django.db.models.base import Model, ModelState

# How QuerySet iteration (ModelIterable) builds the related instances select_related() read in the
# same row: compiled_reads.load_one builds a row read by a compiled SELECT as iteration would.
from django.db.models.query import get_related_populators

# The ORM's INSERT and UPDATE queries, which compile to exactly the SQL Model.save() sends.
from django.db.models.sql.subqueries import InsertQuery, UpdateQuery

# Methods used on ORM objects (not importable; the contract test checks them too):
# - Query.get_compiler(connection=...), SQLCompiler.as_sql(), SQLCompiler.select (the selected
#   columns, in order) and SQLCompiler.get_converters(expressions) (position -> (converters,
#   expression)): a compiled SELECT and how to turn its raw row into Python values;
#   SQLCompiler.klass_info and .col_count, which ModelIterable reads after as_sql();
# - UpdateQuery.add_update_values(dict), Query.add_filter(name, value),
#   InsertQuery.insert_values(fields, objs);
# - BaseDatabaseWrapper.wrap_database_errors and .connection (the driver's connection): statements
#   run on a driver cursor, errors still come out as django.db exceptions.

__all__ = ["FORMAT_QMARK_REGEX", "InsertQuery", "UpdateQuery", "Model", "ModelState", "get_related_populators"]
