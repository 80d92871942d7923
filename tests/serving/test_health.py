"""Liveness and readiness: unauthenticated, cheap; readiness fails (503,
with the cause) on a read-only, an unmigrated or a partly migrated database
and on one whose history lost its append-only triggers."""

from __future__ import annotations

import pytest
from django.db import connection

from leases.api import health
from engines.sqlite.base import DatabaseWrapper

sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite files made by the test")


def test_live_answers_without_authentication(client):
    response = client.get("/health/live")
    assert (response.status_code, response.content) == (200, b"ok\n")
    assert client.post("/health/live").status_code == 405


def test_ready_on_a_migrated_writable_database(client, transactional_db):
    response = client.get("/health/ready")
    assert response.status_code == 200, response.content
    assert response.json() == {"ready": True, "problems": [], "warnings": []}


def test_health_paths_are_not_azure_accounts(azure_server):
    import requests

    assert requests.get(f"{azure_server}/health/live", timeout=10).text == "ok\n"
    assert requests.get(f"{azure_server}/health/ready", timeout=10).json()["ready"] is True


@sqlite_only
def test_not_ready_on_a_read_only_database(client, transactional_db):
    # Tests run as root, whom file permissions do not stop; SQLite's
    # query_only makes this connection read-only as a read-only file would.
    connection.ensure_connection()
    connection.connection.execute("PRAGMA query_only=1")
    try:
        response = client.get("/health/ready")
    finally:
        connection.connection.execute("PRAGMA query_only=0")
    assert response.status_code == 503
    [problem] = response.json()["problems"]
    assert problem.startswith("database is read-only: ") and "readonly database" in problem


@pytest.fixture
def other_database(transactional_db, tmp_path):
    """A Django connection (alias "probe") to a database file of the test's own."""
    from django.db import connections

    settings = {**connection.settings_dict, "NAME": str(tmp_path / "other.sqlite3")}
    conn = connections["probe"] = DatabaseWrapper(settings, alias="probe")
    yield conn
    conn.close()
    del connections["probe"]


def migrate(conn, target: str | None = None):
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(conn)
    targets = [("leases", target)] if target else executor.loader.graph.leaf_nodes()
    executor.migrate(targets)


@sqlite_only
def test_not_ready_on_an_empty_database(other_database):
    assert health.readiness_problems(other_database) == ["database is not migrated: run `manage.py migrate`"]


@sqlite_only
def test_not_ready_on_a_partly_migrated_database(other_database):
    migrate(other_database, "0001_initial")
    [problem] = health.readiness_problems(other_database)
    from django.db.migrations.loader import MigrationLoader

    [latest] = [name for app, name in MigrationLoader(None).graph.leaf_nodes() if app == "leases"]
    assert problem.startswith("database is not fully migrated (missing ") and f"leases.{latest}" in problem
    assert problem.endswith("run `manage.py migrate`")


@sqlite_only
def test_not_ready_without_the_history_triggers(other_database):
    migrate(other_database)
    assert health.readiness_problems(other_database) == []
    with other_database.cursor() as cur:
        cur.execute("DROP TRIGGER leases_leaseevent_no_delete")
    assert health.readiness_problems(other_database) == [
        "history trigger leases_leaseevent_no_delete is missing: the history is not append-only "
        "(run `manage.py migrate`, which re-creates it)"]


@sqlite_only
def test_migrate_restores_triggers_a_table_rebuild_dropped(other_database):
    """On SQLite, altering a column rebuilds the table and drops its
    triggers; the next migrate puts them back."""
    from django.core.management import call_command
    from django.db import models

    from leases.models import LeaseEvent

    migrate(other_database)
    with other_database.schema_editor() as editor:  # what a later migration altering LeaseEvent does
        old = LeaseEvent._meta.get_field("reason")
        new = models.CharField(max_length=600, blank=True)
        new.set_attributes_from_name("reason")
        new.model = LeaseEvent
        editor.alter_field(LeaseEvent, old, new)
    assert len(health.readiness_problems(other_database)) == 3
    call_command("migrate", database="probe", verbosity=0)
    assert health.readiness_problems(other_database) == []


# ------------------------------------------------------------------ logs: one line per failure, with its cause

def _failure_record():
    import logging
    import sqlite3

    from django.db import utils

    try:
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as exc:
            raise utils.OperationalError(*exc.args) from exc
    except utils.OperationalError:
        import sys

        record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "Internal Server Error: %s",
                                   ("/devstoreaccount1/c",), sys.exc_info())
    record.status_code = 500
    return record


@pytest.mark.parametrize("tracebacks", ["", "1"])
def test_text_log_line_carries_the_cause(leasehold_env, tracebacks):
    from leases.operations.logformat import OneLineFormatter

    leasehold_env(LEASEHOLD_LOG_TRACEBACKS=tracebacks)
    text = OneLineFormatter().format(_failure_record())
    first, *rest = text.split("\n")
    assert first.endswith("ERROR django.request: Internal Server Error: /devstoreaccount1/c | cause: "
                          "OperationalError: database or disk is full <- OperationalError: database or disk is full")
    assert bool(rest) == bool(tracebacks) and (not rest or rest[0].startswith("Traceback"))


def test_json_log_line(monkeypatch):
    import json

    from leases.operations.logformat import JsonFormatter

    monkeypatch.delenv("LEASEHOLD_LOG_TRACEBACKS", raising=False)
    line = JsonFormatter().format(_failure_record())
    assert "\n" not in line
    entry = json.loads(line)
    assert {k: entry[k] for k in ("level", "logger", "message", "status", "cause")} == {
        "level": "error", "logger": "django.request", "message": "Internal Server Error: /devstoreaccount1/c",
        "status": 500,
        "cause": "OperationalError: database or disk is full <- OperationalError: database or disk is full"}
    assert entry["time"].endswith("+00:00")


@pytest.mark.parametrize("value, ok", [("json", True), ("JSON", True), ("text", True), ("xml", False)])
def test_log_format_setting(value, ok):
    import subprocess
    import sys

    env = {**__import__("os").environ, "LEASEHOLD_LOG_FORMAT": value, "DJANGO_SETTINGS_MODULE": "config.settings"}
    run = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert (run.returncode == 0) == ok, run.stderr
    if not ok:
        assert "LEASEHOLD_LOG_FORMAT must be text or json" in run.stderr
