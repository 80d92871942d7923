"""Health and metrics endpoints for operators and orchestrators: ``GET /health/live`` is 200 while
the process answers and touches nothing else; ``GET /health/ready`` is 200 if the database answers,
is writable, is fully migrated and has the history's append-only triggers, otherwise 503 with the
problems (JSON), warnings (a clock step, leases/operations/clockwatch.py) leaving it 200; ``GET
/metrics`` is Prometheus text (leases/operations/metrics.py), for a superuser or a user with
leases.view_leaseevent, by API token or admin session, as the history's API. The health endpoints
take no authentication (a load balancer's probe has none) and say nothing secret; readiness costs a
few small queries and one empty write transaction (BEGIN IMMEDIATE, ROLLBACK: no fsync)."""

from __future__ import annotations

import logging

from django.db import DatabaseError, connection, transaction
from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from rest_framework.permissions import BasePermission

from engines import postgres

from leases.operations import clockwatch, faults, metrics
from leases.models import history_triggers
from leases.api.base import ApiView

log = logging.getLogger("leasehold.health")

_leaves: set[tuple[str, str]] | None = None


def _migration_leaves() -> set[tuple[str, str]]:
    """The latest migration of every app, from the code (read once: the
    graph costs tens of milliseconds to load)."""
    global _leaves
    if _leaves is None:
        from django.db.migrations.loader import MigrationLoader

        _leaves = set(MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes())
    return _leaves


class _Rollback(Exception):
    pass


def readiness_problems(conn=connection) -> list[str]:
    """What keeps ``conn``'s database from serving; empty if ready."""
    try:
        with conn.cursor() as cur:
            tables = set(conn.introspection.table_names(cur))
            if "django_migrations" not in tables:
                return ["database is not migrated: run `manage.py migrate`"]
            cur.execute("SELECT app, name FROM django_migrations")
            applied = set(cur.fetchall())
            missing = sorted(f"{app}.{name}" for app, name in _migration_leaves() - applied)
            if missing:
                return [f"database is not fully migrated (missing {', '.join(missing)}): run `manage.py migrate`"]
            problems = [f"history trigger {name} is missing: the history is not append-only "
                        "(run `manage.py migrate`, which re-creates it)" for name in history_triggers.missing(conn, cur)]
        try:
            with transaction.atomic(using=conn.alias), conn.cursor() as cur:
                # A write that changes nothing: refused by a read-only file,
                # a read-only connection or a hot standby.
                cur.execute("DELETE FROM leases_historyhorizon WHERE 1 = 0")
                raise _Rollback
        except _Rollback:
            pass
        return problems
    except DatabaseError as err:
        cause = str(err).strip() or type(err).__name__
        fault = faults.classify(err)
        if fault is not None and fault.kind == faults.NO_PRIMARY:
            return [f"no primary answers (a database failover, or an outage): {fault.detail}"]
        if "readonly" in cause.replace("-", "").replace(" ", "").lower() or "read-only" in cause:
            return [f"database is read-only: {cause}"]
        return [f"database error: {cause}"]


@require_safe
def live(request):
    return HttpResponse("ok\n", content_type="text/plain")


def readiness_warnings(conn=connection) -> list[str]:
    """What an operator should know of a database that serves: clock steps."""
    try:
        return clockwatch.warnings(conn)
    except DatabaseError as err:
        return [f"clock: cannot read the database's account of lease time: {err}"]


@require_safe
def ready(request):
    # A hung database answers a probe in about half the writer's wait (503), not never.
    with postgres.bounded(max(1.0, float(connection.settings_dict["OPTIONS"].get("write_wait") or 5) / 2)):
        problems = readiness_problems()
        warnings = [] if problems else readiness_warnings()
    if problems:
        log.warning("not ready: %s", "; ".join(problems))
        return JsonResponse({"ready": False, "problems": problems, "warnings": []}, status=503)
    return JsonResponse({"ready": True, "problems": [], "warnings": warnings})


class CanReadMetrics(BasePermission):
    """A user (session or token) with the history's view permission; an
    Azure account's SharedKey gives no access (metrics span accounts)."""

    def has_permission(self, request, view):
        user = request.user
        if not (user and user.is_authenticated):
            return False
        return bool(getattr(user, "has_perm", None)) and user.has_perm("leases.view_leaseevent")


class MetricsView(ApiView):
    permission_classes = [CanReadMetrics]
    throttle_classes = []  # scrapes must not use up an operator's API allowance

    def get(self, request):
        from prometheus_client import CONTENT_TYPE_LATEST

        return HttpResponse(metrics.exposition(readiness_problems), content_type=CONTENT_TYPE_LATEST)
