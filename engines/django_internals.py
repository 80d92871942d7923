"""The Django database backend internals the engines rely on, in one place: a minor Django release
may reshape them (hence the ``Django<5.3`` pin), and tests/storage/test_storage_contract.py checks
each against what Django itself does, so an upgrade that changes one fails there, by name; nothing
else in engines/ imports a private Django name (the ORM internals of the hot path's statements are
in leases/storage/django_internals.py)."""

from __future__ import annotations

# The SQLite backend engines.sqlite extends (documented as subclassable; the hooks below are not).
from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabaseWrapper

# The private hooks of BaseDatabaseWrapper that engines.sqlite overrides; Django calls each of them,
# and only them, for:
# - _start_transaction_under_autocommit(): the BEGIN of an outermost atomic() (SQLite backend:
#   BEGIN <transaction_mode>); overridden to take the writer lock first and relax synchronous for
#   the fsync after it;
# - _commit(), _rollback(): COMMIT / ROLLBACK on the driver's connection; overridden to release the
#   writer lock, and to fsync the WAL after the commit;
# - _close(): closing the driver's connection; overridden to release the writer lock and close its
#   descriptors.
PRIVATE_BACKEND_HOOKS = ("_start_transaction_under_autocommit", "_commit", "_rollback", "_close")

# (the PostgreSQL names come from __getattr__, below)
__all__ = ["SQLiteDatabaseWrapper", "PRIVATE_BACKEND_HOOKS"]


def __getattr__(name: str):
    """The PostgreSQL names, imported when first asked for: it imports the
    PostgreSQL driver, which a server on SQLite need not load.

    ``PostgreSQLDatabaseWrapper`` is the backend engines.postgres extends,
    through public methods only (``get_connection_params``,
    ``get_new_connection``, ``is_usable``, ``close_if_unusable_or_obsolete``)
    and its ``Database`` attribute, the driver module it calls ``connect`` on;
    ``PostgreSQLCursor`` and ``PostgreSQLServerBindingCursor`` are the cursor
    classes Django gives its connections (``cursor_factory``: client-side
    binding, or server-side with ``OPTIONS["server_side_binding"]``), which
    it extends."""
    if name == "PostgreSQLDatabaseWrapper":
        from django.db.backends.postgresql.base import DatabaseWrapper

        return DatabaseWrapper
    if name == "PostgreSQLCursor":
        from django.db.backends.postgresql.base import Cursor

        return Cursor
    if name == "PostgreSQLServerBindingCursor":
        from django.db.backends.postgresql.base import ServerBindingCursor

        return ServerBindingCursor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
