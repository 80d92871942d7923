"""A statement's query plan on the test's database, and whether it reads a table whole: for the tests
that hold the auditor's reads to their indexes (api/test_api_event_indexes.py,
api/test_api_tenure_indexes.py, admin/test_admin_search_plans.py). On PostgreSQL sequential scans are
turned off for the statement, so a plan that still has one has no index to use."""

from __future__ import annotations

import contextlib

from django.db import connection

from engines import postgres


def plan(sql: str, params) -> str:
    with connection.cursor() as cursor:
        if not postgres.in_use(connection):
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
            return "\n".join(row[-1] for row in cursor.fetchall())
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def scans(found: str, table: str) -> bool:
    """Whether plan ``found`` reads ``table`` whole (SQLite: a line "SCAN table" alone; a "SCAN ...
    USING INDEX" walks an index)."""
    if not postgres.in_use(connection):
        return any(line.strip() == f"SCAN {table}" for line in found.splitlines())
    return f"Seq Scan on {table}" in found


def analyze(table: str) -> None:
    """The planner's statistics for ``table`` (as a server's start gives SQLite's, leasehold_setup)."""
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}" if postgres.in_use(connection) else "ANALYZE")


@contextlib.contextmanager
def statements_on(table: str):
    """The statements naming ``table`` run in the block, each (sql, params), in a list filled as they
    run; at least one (a plan test over none would pass whatever the plans)."""
    seen: list[tuple[str, tuple]] = []

    def capture(execute, sql, params, many, context):
        if table in sql:
            seen.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        yield seen
    assert seen, f"no statement on {table} ran"
