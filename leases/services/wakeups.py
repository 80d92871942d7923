"""Telling acquires that wait (serving/waiting.py) that a lease may have become free: a release or a
break publishes the resource's key, by ``NOTIFY`` in its own transaction on PostgreSQL and by a
datagram to each server process on the same database file after the commit on SQLite, and every
server process on the database wakes its waiters for it; a lost wake-up costs latency, never
correctness. docs/development/architecture.md ("Waiting acquires") tells how."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable

from django.db import connections

from engines import postgres

from leases.models import FencingGeneration

CHANNEL = "leasehold_wake"  # the PostgreSQL channel
LISTEN_CHECK = 5.0  # how often a listener looks whether it is still wanted

log = logging.getLogger("leasehold.waiting")
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


def through_database(using: str = "default") -> bool:
    """Whether releases are heard from the database (``released``) rather
    than by datagrams (``marker_dir``); opens no connection."""
    return postgres.in_use(connections[using])


async def released(wanted: Callable[[], bool], using: str = "default") -> AsyncIterator[str | None]:
    """PostgreSQL: the key of each resource released or broken on any
    instance, while ``wanted()``, LISTENing on ``CHANNEL`` on a connection of
    the server's own beside Django's (to whichever host answers as primary,
    keepalives bounding a hung one); None each time listening (re)starts,
    since a release may have been missed meanwhile. A database restarting is
    listened to again a second later."""
    import psycopg

    from engines.postgres.base import side_connection

    conninfo, params = side_connection(connections[using].settings_dict)
    while wanted():
        try:
            conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **params)
            async with conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                yield None
                while wanted():
                    async for note in conn.notifies(timeout=LISTEN_CHECK):
                        yield note.payload
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001  (the database restarting: listen again)
            log.warning("waiting acquires: listening for releases failed, again in 1 s: %s", exc)
            await asyncio.sleep(1)


def address(folder: str, pid: str | int) -> bytes:
    """The abstract socket address of server process ``pid`` on the database of ``folder``."""
    digest = hashlib.sha256(folder.encode()).hexdigest()[:24]
    return f"\0leasehold-wake-{digest}-{pid}".encode()
