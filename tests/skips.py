"""Skips in a full run (`make test` sets LEASEHOLD_FULL_RUN=1 when it runs
everything): a skip whose reason is not below fails its test, as a skip for a
missing tool, mount or permission would otherwise pass a run that tested less
than it says. Each reason is a test of one database's own machinery, skipped
in the other database's pass, and justified in that pass only: a PostgreSQL
test skipped in the PostgreSQL pass fails (docs/development/tests.md, "Skips"). No Django
here: tests/test_full_run.py loads it in a pytest run of its own."""

from __future__ import annotations

import os

import pytest

FULL_RUN = "LEASEHOLD_FULL_RUN"
SQLITE_PASS = {  # justified in the SQLite pass: PostgreSQL's own machinery
    "condition: connection.vendor != 'postgresql'",
    "the high-water mark is PostgreSQL's (SQLite decides by the machine's clock)",
    "PostgreSQL's prepared statements",
    "row locks are PostgreSQL's",
    "NOTIFY is PostgreSQL's",
    "PostgreSQL's connections, shut down by engines.postgres.drop_all",
    "SQLite has one writer: nothing commits out of id order",
}
POSTGRES_PASS = {  # justified in the PostgreSQL pass: SQLite's own machinery, or a server on a SQLite file of its own
    "condition: connection.vendor != 'sqlite'",
    "the writer lock is SQLite's",
    "the writer lock file is SQLite's",
    "SQLite's WAL",
    "SQLite's own end of a transaction",
    "SQLite's write-ahead log",
    "engines.sqlite's hooks",
    "the statements as SQLite's driver runs them",
    "SQLite files made by the test",
    "a SQLite file's own test",
    "a choice of SQLite's planner",
    "a SQLite file's server, as in the SQLite pass",
    "the SQLite counter file only",
    "a setting, not the database: the SQLite pass runs it",
    "PostgreSQL bounds every statement of a server process with statement_timeout",
    "PostgreSQL's statement_timeout is the server's (engines/postgres)",
}


def this_pass() -> str:
    """The pass this run is: ``postgresql`` when the run's database
    (LEASEHOLD_DATABASE, set by tests/pg_cluster.py) is PostgreSQL, else ``sqlite``."""
    database = os.environ.get("LEASEHOLD_DATABASE", "")
    return "postgresql" if database.startswith(("postgres://", "postgresql://")) else "sqlite"


def unjustified(reason: str, run: str) -> str | None:
    """Why a skip for ``reason`` in pass ``run`` fails a full run, or None:
    a reason is justified only in the pass it names the other database for."""
    justified, other = (POSTGRES_PASS, SQLITE_PASS) if run == "postgresql" else (SQLITE_PASS, POSTGRES_PASS)
    if reason in justified:
        return None
    if reason in other:
        return f"skipped in the {run} pass, which is the one that must run it: {reason!r}"
    return f"skipped for a reason tests/skips.py does not hold: {reason!r}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and os.environ.get(FULL_RUN) == "1" and not hasattr(report, "wasxfail")):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    why = unjustified(reason.removeprefix("Skipped: "), this_pass())
    if why is not None:
        report.outcome = "failed"
        report.longrepr = f"a full run ({FULL_RUN}=1) {why}"
