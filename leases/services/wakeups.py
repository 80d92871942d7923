"""Telling acquires that wait (serving/waiting.py) that a lease may have become free: a release or a
break publishes the resource's key, by ``NOTIFY`` in its own transaction on PostgreSQL and by a
datagram to each server process on the same database file after the commit on SQLite, and every
server process on the database wakes its waiters for it; a lost wake-up costs latency, never
correctness. docs/development/architecture.md ("Waiting acquires") tells how."""

from __future__ import annotations

import hashlib
import os
import socket

from django.db import connections

from engines import postgres

from leases.models import FencingGeneration

CHANNEL = "leasehold_wake"  # the PostgreSQL channel
FREEING = ("release", "break")  # successful actions after which a waiting acquire may succeed

_sender: socket.socket | None = None


def key(account: str, container: str, blob: str | None) -> str:
    """A resource's key (the hash of its names: fixed length, any characters)."""
    return FencingGeneration.key_for(account, container, blob)


def in_transaction(resource_key: str, conn, cursor) -> None:
    """In the freeing action's transaction: PostgreSQL's NOTIFY."""
    if postgres.in_use(conn):
        cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, resource_key])


def at_delete(resource_key: str) -> None:
    """In the transaction of a delete that ends a lease: its waiters are
    woken at the commit, try again and are answered (404, the resource gone)
    instead of holding their connections to the end of their wait."""
    from functools import partial

    from django.db import connection, transaction

    if postgres.in_use(connection):
        with connection.cursor() as cursor:
            in_transaction(resource_key, connection, cursor)
    else:
        transaction.on_commit(partial(after_commit, resource_key))


def after_commit(resource_key: str, using: str = "default") -> None:
    """After the freeing action's commit: SQLite's datagrams."""
    folder = marker_dir(using)
    if folder is None:
        return
    try:
        pids = os.listdir(folder)
    except OSError:  # no process waits
        return
    global _sender
    if _sender is None:
        _sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        _sender.setblocking(False)
    payload = resource_key.encode()
    for pid in pids:
        try:
            _sender.sendto(payload, address(folder, pid))
        except (ConnectionRefusedError, FileNotFoundError):  # that process is gone
            try:
                os.unlink(os.path.join(folder, pid))
            except OSError:
                pass
        except OSError:  # its queue is full: it wakes at the deadlines instead
            pass


def marker_dir(using: str = "default") -> str | None:
    """``<database>.wake/`` of a SQLite database on a file; None otherwise."""
    settings = connections[using].settings_dict  # no connection opened
    if "sqlite" not in settings["ENGINE"]:
        return None
    name = str(settings["NAME"])
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return os.path.abspath(name) + ".wake"


def listener(settings_dict: dict) -> tuple[str, dict]:
    """PostgreSQL's (conninfo, params) for a connection of the server's own
    beside Django's, to LISTEN on ``CHANNEL`` (serving/waiting.py); imports
    the driver, so only on PostgreSQL."""
    from engines.postgres.base import side_connection

    return side_connection(settings_dict)


def address(folder: str, pid: str | int) -> bytes:
    """The abstract socket address of server process ``pid`` on the database of ``folder``."""
    digest = hashlib.sha256(folder.encode()).hexdigest()[:24]
    return f"\0leasehold-wake-{digest}-{pid}".encode()
