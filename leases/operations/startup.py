"""What the server checks before it serves (serving/server.py): a database it can read and write,
with every migration applied, none it does not know (a newer version's), and the lease history's
append-only trigger in place; otherwise it refuses to start and says what to run, rather than
answering every request with an error. ``python -m leases.operations.startup`` runs the same check
on its own (exit 1 if refused)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from engines import postgres

MIGRATE = "run `python manage.py migrate` (or `make run`, which does)"
HISTORY_TABLE = "leases_leaseevent"


def problems(using: str = "default") -> list[str]:
    """Why the database cannot be served; empty if it can."""
    from django.db import DatabaseError, connections
    from django.db.migrations.executor import MigrationExecutor

    from leases.operations import faults

    conn = connections[using]
    if not postgres.in_use(conn):
        path = Path(conn.settings_dict["NAME"])
        if str(path) != ":memory:" and not path.exists():
            return [f"the database {path} does not exist: {MIGRATE}"]
    # The master process checks, then forks the workers: no checkpoint thread
    # (engines.sqlite) for this short-lived connection.
    options = conn.settings_dict.setdefault("OPTIONS", {})
    interval = options.pop("checkpoint_interval", None)
    try:
        conn.ensure_connection()
        found = []
        executor = MigrationExecutor(conn)
        newer = _unknown_migrations(executor.loader)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if newer:
            found.append(f"the database's schema is newer than this version of Leasehold (it has migrations this "
                         f"code does not know: {', '.join(newer)}): run the version that migrated it, or a newer one")
        elif plan:
            names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in plan)
            found.append(f"the database lacks migrations ({names}): {MIGRATE}")
        elif HISTORY_TABLE in conn.introspection.table_names() and not _history_guarded(conn):
            found.append("the lease history has no append-only trigger, although every migration is recorded"
                         " as applied: the schema is older than its records (restored from an old copy, or changed"
                         " by hand); restore the database from a backup taken by this version")
        problem = _not_writable(conn)
        if problem:
            found.append(problem)
        return found
    except DatabaseError as exc:
        fault = faults.classify(exc)
        if fault is not None and fault.kind == faults.NO_PRIMARY:  # at start: a URL it cannot use, or no server
            return [f"cannot connect to the database: {fault.detail} -- check LEASEHOLD_DATABASE, and that a "
                    "primary is running and reachable there"]
        place = _read_only_place(conn)
        if place is not None:  # SQLite cannot open a WAL database it may create no -shm file for
            return [f"cannot open the database {conn.settings_dict['NAME']} ({exc}): {place}"]
        return [f"cannot use the database: {fault.cause if fault else exc}"]
    finally:
        conn.close()
        if interval is not None:
            options["checkpoint_interval"] = interval


def _unknown_migrations(loader) -> list[str]:
    """Migrations recorded as applied, of this code's apps, that this code
    does not have: a newer version migrated the database."""
    return sorted(f"{app}.{name}" for app, name in loader.applied_migrations
                  if app in loader.migrated_apps and (app, name) not in loader.graph.nodes)


def _history_guarded(conn) -> bool:
    """Does a database trigger guard the history table (migration 0002)?"""
    with conn.cursor() as cursor:
        if postgres.in_use(conn):
            cursor.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
                           [HISTORY_TABLE])
        else:
            cursor.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s",
                           [HISTORY_TABLE])
        return cursor.fetchone()[0] > 0


def _not_writable(conn) -> str | None:
    """Why nothing could be written, or None: a write that changes nothing,
    rolled back."""
    if postgres.in_use(conn):
        with conn.cursor() as cursor:
            cursor.execute("SELECT current_setting('transaction_read_only'), pg_is_in_recovery()")
            read_only, standby = cursor.fetchone()
        if read_only == "on" or standby:
            return ("the database is read-only (a standby, or default_transaction_read_only is on):"
                    " point LEASEHOLD_DATABASE at the primary")
        return None
    if postgres.in_use(conn):
        return None
    path = Path(conn.settings_dict["NAME"])
    raw = conn.connection
    try:
        raw.execute("BEGIN IMMEDIATE")
        try:
            version = raw.execute("PRAGMA user_version").fetchone()[0]
            raw.execute(f"PRAGMA user_version = {int(version)}")
        finally:
            raw.execute("ROLLBACK")
    except Exception as exc:  # noqa: BLE001 - any failure to write is the answer
        return (f"the database {path} is read-only ({exc}): make the file, its directory and its volume"
                " writable by this user")
    if not os.access(path.parent, os.W_OK):
        return f"the directory {path.parent} is read-only: SQLite needs to create files next to the database there"
    return None


def _read_only_place(conn) -> str | None:
    """Why a SQLite database that exists could not be opened, if it is that
    its file, directory or volume is read-only; else None."""
    if postgres.in_use(conn):
        return None
    path = Path(conn.settings_dict["NAME"])
    if not path.exists():
        return None
    if not os.access(path.parent, os.W_OK):
        return (f"the directory {path.parent} is read-only (or its volume is): SQLite needs to create files next"
                " to the database there; make the file, its directory and its volume writable by this user")
    if not os.access(path, os.W_OK):
        return "the file is read-only: make the file, its directory and its volume writable by this user"
    return None


def refuse_unready_database() -> None:
    """Exit with the reasons if the database cannot be served."""
    import django

    from leases.conf.env import SettingError

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    try:
        django.setup()
    except SettingError as err:  # a LEASEHOLD_* value it cannot use: the message names it, no traceback
        raise SystemExit(f"Leasehold will not start: {err}") from None
    found = problems()
    if found:
        raise SystemExit("Leasehold will not start: " + "; ".join(found))


if __name__ == "__main__":
    refuse_unready_database()
    sys.exit(0)
