"""Cluster duties (pruning the history and collecting released blob content: the retention pruner,
``manage.py leasehold_prune`` and ``leasehold_blob_gc``) done by one process at a time among every
server process and instance that shares a database, with the lock kept by the database so that
instances on different machines see the same one: on PostgreSQL a session-level advisory lock on the
duty thread's own connection, on which the round's statements run too, so that a broken connection
ends the lock and the round together; on SQLite an exclusive ``flock`` on
``<database>.retention.lock``, which the kernel lets go when its process ends. docs/decisions/0021
says why."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time

from django.db import DatabaseError, connections

from engines import postgres

log = logging.getLogger("leasehold.duties")

# The advisory lock's key: any bigint the database's other users do not take;
# the first 8 bytes of sha256("leasehold cluster duties"), signed.
PG_LOCK_KEY = 6_422_180_987_829_057_514


# The ledger's sealer (leases/operations/ledger.py): a duty of its own, so that a long prune does not
# hold up sealing; sha256("leasehold ledger sealer"), likewise.
SEAL_LOCK_KEY = 136_505_316_434_964_553


def lock_path(using: str = "default", duty: str = "retention") -> str:
    """The SQLite lock file: beside the database file, keyed by it."""
    return f"{connections[using].settings_dict['NAME']}.{duty}.lock"


class DutyLock:
    """Held by at most one process per database; ``acquire`` then
    ``release`` around each round of duties, in the thread that does them
    (a Django connection belongs to its thread)."""

    def __init__(self, using: str = "default", path: str | None = None, *, key: int = PG_LOCK_KEY,
                 duty: str = "retention"):
        self.using, self.path, self.key, self.duty = using, path, key, duty
        self._fd: int | None = None
        self._pg = False

    def acquire(self, *, wait: float = 0) -> bool:
        """Take the lock if free, trying again for up to ``wait`` seconds;
        whether it is held now."""
        deadline = time.monotonic() + wait
        while not self._try():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)
        return True

    def _try(self) -> bool:
        conn = connections[self.using]
        if postgres.in_use(conn):
            with conn.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [self.key])
                self._pg = bool(cursor.fetchone()[0])
            return self._pg
        if self._fd is not None:
            return True
        fd = os.open(self.path or lock_path(self.using, self.duty), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._pg:
            self._pg = False
            conn = connections[self.using]
            try:
                with conn.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [self.key])
            except DatabaseError:  # a broken connection: closing it ends its session, and the lock
                try:
                    conn.close()
                except DatabaseError:
                    pass
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class DutyThread(threading.Thread):
    """A duty's thread: every ``idle`` seconds, a round (``round()``) in whichever process holds its
    lock for that round; a failed round (a locked or full disk) is logged and tried again, never the
    end of the duty. ``stop()`` ends it after the round under way."""

    label = "duty"
    logger = log  # a duty's own module's logger, in its subclass

    def __init__(self, *, name: str, idle: float, lock: DutyLock):
        super().__init__(name=name, daemon=True)
        self.idle, self.lock = idle, lock
        self.stopping = threading.Event()

    def round(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        from django.db import close_old_connections

        while not self.stopping.is_set():
            try:
                if self.lock.acquire():
                    try:
                        self.round()
                    finally:
                        self.lock.release()
            except Exception:  # noqa: BLE001  a locked or full disk must not end the duty for good
                self.logger.exception("%s failed; retrying in %.0f s", self.label, self.idle)
            finally:
                close_old_connections()
            self.stopping.wait(self.idle)
