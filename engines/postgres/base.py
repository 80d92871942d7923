"""The engine (the package docstring says what it adds to Django's)."""

from __future__ import annotations

import logging
import math
import os
import select
import socket
import threading
import time
import types
import weakref

import psycopg
from django.db import DatabaseError
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from ..writer_wait import CommitOutcomeUnknown, WriterBusy
from ..django_internals import PostgreSQLCursor as DjangoCursor
from ..django_internals import PostgreSQLDatabaseWrapper
from ..django_internals import PostgreSQLServerBindingCursor as DjangoServerCursor

from engines import postgres

log = logging.getLogger("leasehold.database")

DEFAULT_WRITE_WAIT = 5.0
ANSWER_GRACE = 2.0  # past the server's own timeouts, before the client gives up on it

_connections: weakref.WeakSet = weakref.WeakSet()
_connections_lock = threading.Lock()
# conninfo -> [(host, port) that last accepted a connection, (host, port) that then stopped answering]
_hosts: dict[str, list] = {}


class NoAnswer(psycopg.OperationalError):
    """The database did not answer within the bound; the connection is closed."""


class BoundedConnection(psycopg.Connection):
    """A psycopg connection whose every wait for the server (a query, a
    commit, fetching rows) ends within ``limit`` seconds: the statement
    timeout plus ANSWER_GRACE, so a server that answers at all answers with
    its own timeout first. Past it the connection is closed: whatever the
    server does later, this one is not used again."""

    limit: float | None = None  # None: unbounded (not a server process)
    commit_notices: CommitNotices | None = None  # Django's connections: the warnings of a COMMIT

    def wait(self, gen, interval=0.1, timeout=None):
        if self.limit is None:
            return super().wait(gen, interval, timeout)
        bound = postgres.bound() or self.limit
        try:
            return super().wait(gen, interval, bound if timeout is None else min(timeout, bound))
        except psycopg.OperationalError as exc:
            if type(exc).__name__ != "_WaitTimeout":  # psycopg's own, for its timeout parameter
                raise
            self.pgconn.finish()
            raise NoAnswer(f"the database did not answer within {bound:.1f} s") from None


class _Bounded:
    """Refuses to begin a write's transaction once the request that asks has
    waited its LEASEHOLD_WRITE_WAIT in a queue (``postgres.writes_by``):
    503 ServerBusy, nothing sent."""

    connection: psycopg.Connection  # the cursor class after it sets it

    def execute(self, query, params=None, **kwargs):
        deadline = postgres.write_deadline()
        if (deadline is not None and self.connection.pgconn.transaction_status == pq.TransactionStatus.IDLE
                and time.monotonic() >= deadline):
            raise WriterBusy("the request waited its LEASEHOLD_WRITE_WAIT before its turn; nothing was written")
        return super().execute(query, params, **kwargs)  # type: ignore[misc]  # the cursor class after it


class BoundedCursor(_Bounded, DjangoCursor):
    """Django's client-side binding cursor, bounded."""


class BoundedServerCursor(_Bounded, DjangoServerCursor):
    """Django's server-side binding cursor (prepared statements), bounded."""


CURSORS = {DjangoCursor: BoundedCursor, DjangoServerCursor: BoundedServerCursor}


def _driver() -> types.ModuleType:
    """psycopg, as Django's backend calls it, connecting with BoundedConnection."""
    module = types.ModuleType("psycopg")
    module.__dict__.update(vars(psycopg))
    module.connect = BoundedConnection.connect  # type: ignore[attr-defined]  # a copy of psycopg, set on purpose
    return module


class DatabaseWrapper(PostgreSQLDatabaseWrapper):
    Database = _driver()

    @property
    def write_wait(self) -> float:
        value = self.settings_dict["OPTIONS"].get("write_wait")
        return DEFAULT_WRITE_WAIT if value is None else float(value)

    def get_connection_params(self):
        params = super().get_connection_params()
        params.pop("write_wait", None)
        params["cursor_factory"] = CURSORS.get(params.get("cursor_factory"), params.get("cursor_factory"))
        conninfo = params.get("conninfo", "")
        given = conninfo_to_dict(conninfo) if conninfo else {}
        given.update({k: v for k, v in params.items() if isinstance(v, (str, int))})
        wait = self.write_wait
        for name, value in bounds(wait).items():
            if name not in given:
                params[name] = value
        if postgres.SERVING:
            timeouts = f"-c lock_timeout={int(wait * 1000)} -c statement_timeout={int(wait * 1000) + 1000}"
            params["options"] = f"{timeouts} {given.get('options', '')}".strip()  # the URL's own last: they win
        self._several_hosts = "," in str(given.get("host") or "")
        order = _hosts.get(conninfo)
        if order and self._several_hosts and "host" not in params:
            params.update(host_order(given, *order))
        return params

    def get_new_connection(self, conn_params):
        conn = super().get_new_connection(conn_params)
        conn.limit = self.write_wait + 1 + ANSWER_GRACE if postgres.SERVING else None
        conn.commit_notices = CommitNotices()
        conn.add_notice_handler(conn.commit_notices)
        with _connections_lock:
            _connections.add(conn)
        if getattr(self, "_several_hosts", False):
            _hosts[self.settings_dict["OPTIONS"].get("conninfo", "")] = [(conn.info.host, str(conn.info.port)), None]
        return conn

    def _commit(self):
        """COMMIT, raising CommitOutcomeUnknown when its outcome is not
        known: PostgreSQL warned during it (a wait for the synchronous standby
        cancelled by statement_timeout or a cancel: committed locally, maybe
        not on the standby), or the connection failed under it."""
        notices = getattr(self.connection, "commit_notices", None)
        if notices is None:
            return super()._commit()
        notices.active, notices.seen = True, []
        try:
            super()._commit()
        except DatabaseError as exc:
            if not answer_lost(exc):
                raise  # refused (a deferred check, a serialization failure): rolled back, nothing made
            raise CommitOutcomeUnknown(f"the commit's answer was lost: {exc}") from exc
        finally:
            notices.active = False
        if notices.seen:
            raise CommitOutcomeUnknown(f"PostgreSQL committed locally but warned: {notices.seen[0]}")

    def is_usable(self):
        """Without a round trip: the connection is open, its socket has
        nothing unread that ends it, and the server is not a standby."""
        return usable(self.connection)

    def close_if_unusable_or_obsolete(self):
        super().close_if_unusable_or_obsolete()
        if self.connection is not None and not usable(self.connection):
            self.close()


class CommitNotices:
    """A connection's notice handler: the warnings PostgreSQL sends while a
    COMMIT is under way (``active``), such as "canceling wait for
    synchronous replication"."""

    __slots__ = ("active", "seen")

    def __init__(self):
        self.active, self.seen = False, []

    def __call__(self, diag) -> None:
        if self.active and diag.severity_nonlocalized == "WARNING":
            self.seen.append(" ".join(filter(None, (diag.message_primary, diag.message_detail))))


# SQLSTATEs of a connection ended under a statement (an administrator's or
# the server's shutdown); class 08 (a connection exception) too.
ENDED_STATES = frozenset({"57P01", "57P02", "57P03"})


def answer_lost(exc: BaseException) -> bool:
    """Whether a failed COMMIT may have been made all the same: the
    connection failed (no SQLSTATE, class 08, a terminated backend, or no
    answer within the bound) rather than the server refusing the commit."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    if not isinstance(cause, (psycopg.OperationalError, psycopg.InterfaceError)):
        return False
    state = getattr(cause, "sqlstate", None)
    return not state or state.startswith("08") or state in ENDED_STATES


def bounds(wait: float) -> dict:
    """libpq parameters a URL leaves unset, from LEASEHOLD_WRITE_WAIT: give
    up on a host that does not answer a connection within about half the
    wait (libpq's minimum is 2 s; per host), and on a peer whose TCP stops
    acknowledging or answering keepalives."""
    return {"connect_timeout": str(max(2, min(10, math.ceil(wait / 2)))), "keepalives": "1",
            "keepalives_idle": str(max(1, math.ceil(wait))), "keepalives_interval": "1",
            "keepalives_count": "3", "tcp_user_timeout": str(max(1000, int(wait * 1000)))}


def side_connection(settings_dict: dict) -> tuple[str, dict]:
    """(conninfo, keyword arguments) for a connection of its own to the
    database ``settings_dict`` names (the waiting acquires' LISTEN): the URL
    whole, the database Django uses (a test's own), and the same bounds."""
    options = settings_dict.get("OPTIONS", {})
    conninfo = options.get("conninfo", "")
    given = conninfo_to_dict(conninfo) if conninfo else {}
    wait = options.get("write_wait")
    extra = {k: v for k, v in bounds(DEFAULT_WRITE_WAIT if wait is None else float(wait)).items() if k not in given}
    return conninfo, {**extra, "dbname": settings_dict["NAME"]}


def host_order(params: dict, first: tuple[str, str] | None, last: tuple[str, str] | None) -> dict:
    """host/port (and hostaddr) lists starting at ``first`` (the host that
    last accepted a connection), ``last`` (one that stopped answering: a
    hung one costs a connect_timeout) at the end, the others in their
    order; {} when the URL's lists do not allow it."""
    hosts = params.get("host", "").split(",")
    ports = params.get("port", "").split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    addrs = params.get("hostaddr", "").split(",") if params.get("hostaddr") else None
    pairs = list(zip(hosts, ports))
    if len(pairs) != len(hosts) or (addrs and len(addrs) != len(hosts)):
        return {}
    start = pairs.index(first) if first in pairs else 0
    order = list(range(start, len(pairs))) + list(range(start))
    if last in pairs:
        order.remove(pairs.index(last))
        order.append(pairs.index(last))
    found = {"host": ",".join(hosts[i] for i in order), "port": ",".join(ports[i] for i in order)}
    if addrs:
        found["hostaddr"] = ",".join(addrs[i] for i in order)
    return found


def usable(conn) -> bool:
    if conn is None or conn.closed or conn.pgconn.status != pq.ConnStatus.OK:
        return False
    if conn.pgconn.transaction_status not in (pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS):
        return False
    if conn.pgconn.parameter_status(b"in_hot_standby") == b"on":  # a standby now (PostgreSQL 14+ says so)
        return False
    try:
        readable, _, _ = select.select([conn.pgconn.socket], [], [], 0)
        if readable:  # an idle connection is sent nothing but notices, or its end
            conn.pgconn.consume_input()
    except (OSError, psycopg.Error, ValueError):
        return False
    return conn.pgconn.status == pq.ConnStatus.OK


def drop_all(reason: str) -> int:
    """Shut down the socket of every connection of this process: a thread
    waiting on one gets an error at once, an idle one fails its next check.
    Their hosts are tried last from now on (until one accepts a connection
    again), before any thread reconnects."""
    with _connections_lock:
        connections = list(_connections)
    hosts, sockets = set(), []
    for conn in connections:
        try:
            sockets.append(conn.pgconn.socket)
            hosts.add((conn.info.host, str(conn.info.port)))
        except (psycopg.Error, ValueError):
            continue
    for order in _hosts.values():
        if order[0] in hosts:
            order[1] = order[0]
    dropped = 0
    for fd in sockets:
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
            dropped += 1
        except OSError:
            pass
    if dropped:
        log.warning("database failover or outage: %s; %d connection(s) of this process dropped, to be "
                    "replaced by connections to whichever host of LEASEHOLD_DATABASE answers as primary",
                    reason, dropped)
    return dropped
