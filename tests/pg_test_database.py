"""Each test process's PostgreSQL test database, a copy of one migrated once a run.

pytest-django has every xdist worker create its test database and migrate it
(19 migrations, the history's triggers, content types and permissions). On
PostgreSQL, ``copy_from_template`` makes the first worker that gets there
migrate a template database instead, under a lock in the run's directory; each
worker's test database is then ``CREATE DATABASE ... TEMPLATE`` of it, as the
server processes' databases are copies of a migrated template
(tests/server_process.py). The controller drops the template at the run's end
(``drop_template``).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

RECORD = "pg-test-template"  # in the run's directory: the template's name, once it is migrated


def _template_name(test_name: str) -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return f"{test_name.removesuffix('_' + worker)}_template"


def copy_from_template(connection, run_dir: Path) -> None:
    """Make ``connection``'s ``create_test_db`` (called by pytest-django's
    ``setup_databases``) copy the run's migrated template, migrating it first
    if no worker has yet. A kept database (``--reuse-db``) or one whose
    contents are serialized is made as Django makes it."""
    from django.conf import settings

    creation = connection.creation
    create = creation.create_test_db
    alias = connection.alias

    def create_test_db(verbosity=1, autoclobber=False, serialize=True, keepdb=False):
        if keepdb or serialize:
            return create(verbosity, autoclobber, serialize, keepdb)
        name = creation._get_test_db_name()
        template = _template_name(name)
        original = connection.settings_dict["NAME"]
        quote = connection.ops.quote_name
        with open(run_dir / f"{RECORD}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            record = run_dir / RECORD
            if not record.exists():  # the first worker: migrate the template (a failed attempt's dropped)
                connection.settings_dict["TEST"]["NAME"] = template
                try:
                    create(verbosity, True, False, False)
                finally:
                    connection.settings_dict["TEST"]["NAME"] = name
                    connection.close()  # no session may be open on a template being copied
                    settings.DATABASES[alias]["NAME"] = connection.settings_dict["NAME"] = original
                record.write_text(template)
            with creation._nodb_cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS {quote(name)}")
                cursor.execute(f"CREATE DATABASE {quote(name)} TEMPLATE {quote(template)}")
        settings.DATABASES[alias]["NAME"] = connection.settings_dict["NAME"] = name
        connection.ensure_connection()
        return name

    creation.create_test_db = create_test_db


def drop_template(connection, run_dir: Path) -> None:
    """Drop the run's template, if a worker made one (the controller, at the run's end)."""
    record = run_dir / RECORD
    if connection.vendor != "postgresql" or not record.exists():
        return
    with connection.creation._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(record.read_text())}")
