"""Skips in a full run (`make test` sets LEASEHOLD_FULL_RUN=1 when it runs
everything): a skip whose reason is not below fails its test, as a skip for a
missing tool, mount or permission would otherwise pass a run that tested less
than it says. Each reason is a test of one database's own machinery, skipped
in the other database's pass (docs/development/tests.md, "Skips"). No Django
here: tests/test_full_run.py loads it in a pytest run of its own."""

from __future__ import annotations

import os

import pytest

FULL_RUN = "LEASEHOLD_FULL_RUN"
JUSTIFIED_SKIPS = {
    # in the SQLite pass: PostgreSQL's own machinery
    "condition: connection.vendor != 'postgresql'",
    "the high-water mark is PostgreSQL's (SQLite decides by the machine's clock)",
    "PostgreSQL's prepared statements",
    "row locks are PostgreSQL's",
    "NOTIFY is PostgreSQL's",
    "PostgreSQL's connections, shut down by engines.postgres.drop_all",
    # in the PostgreSQL pass: SQLite's own machinery, or a server on a SQLite file of its own
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
    "a SQLite file's server, as in the SQLite pass",
    "the SQLite counter file only",
    "a setting, not the database: the SQLite pass runs it",
}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and os.environ.get(FULL_RUN) == "1" and not hasattr(report, "wasxfail")):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    if reason not in JUSTIFIED_SKIPS:
        report.outcome = "failed"
        report.longrepr = (f"skipped in a full run ({FULL_RUN}=1) for a reason tests/skips.py's "
                           f"JUSTIFIED_SKIPS does not hold: {reason!r}")
