"""Leasehold's SQLite engine: the DatabaseWrapper that ties the writer lock (writer_lock.py) and WAL
checkpoints off the request path (checkpoints.py) into Django's transactions, and fsyncs the WAL
after the writer lock is let go (``sync_outside_lock`` in OPTIONS), so that the next writer does not
wait for this one's fsync; docs/development/architecture.md ("The
fsync outside the lock") says why that is as durable as synchronous=FULL. The private hooks of
Django's backend it overrides are listed with their use in engines/django_internals.py."""

from __future__ import annotations

import fcntl
import os
import time

from django.db.utils import OperationalError

from .. import hooks  # what the engine reports: the writer lock's wait, the fsync, timing marks
from ..django_internals import SQLiteDatabaseWrapper

from ..writer_wait import WouldWait, WriterBusy, is_writer_busy, must_not_wait, time_left
from .checkpoints import Checkpointer, checkpointers, ensure_checkpointer  # noqa: F401  (imported from here)
from .writer_lock import FlockWaiter, open_lock_file, writer_lock_path

DEFAULT_WRITE_WAIT = 5.0


class DatabaseWrapper(SQLiteDatabaseWrapper):
    _writer_fd: int | None = None
    _writer_held = False
    _wal_path: str | None = None  # set: fsync the WAL after the writer lock (module docstring)
    _wal_fd: int | None = None
    _relaxed = False  # this transaction runs at synchronous=NORMAL and owes an fsync
    _waiter: FlockWaiter | None = None
    _busy_ms = 0  # the connection's busy timeout outside BEGIN

    def get_connection_params(self):
        params = super().get_connection_params()
        params.pop("checkpoint_interval", None)  # ours, not sqlite3.connect's
        params.pop("sync_outside_lock", None)
        params.pop("write_wait", None)
        return params

    @property
    def write_wait(self) -> float:
        return float(self.settings_dict["OPTIONS"].get("write_wait") or DEFAULT_WRITE_WAIT)

    def get_new_connection(self, conn_params):
        conn = super().get_new_connection(conn_params)
        self._wal_path = None
        options = self.settings_dict["OPTIONS"]
        if self._writer_lock_path() is None:
            return conn
        # No statement waits longer than a writer may (writer_lock.py).
        self._busy_ms = int(min(float(conn_params.get("timeout", 5)), self.write_wait) * 1000)
        conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
        synchronous = conn.execute("PRAGMA synchronous").fetchone()[0]
        interval = float(options.get("checkpoint_interval") or 0)
        if interval > 0:
            ensure_checkpointer(str(self.settings_dict["NAME"]), interval,
                                {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(synchronous, "FULL"))
        if (options.get("sync_outside_lock") and synchronous == 2
                and conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"):
            _, _, path = conn.execute("PRAGMA database_list").fetchone()  # main, absolute
            self._wal_path = path + "-wal"
        return conn

    def _writer_lock_path(self) -> str | None:
        return writer_lock_path(str(self.settings_dict["NAME"]))

    def _take_writer_lock(self) -> float:
        """Take the writer lock within the write wait; the seconds waited."""
        if self._writer_held:
            return 0.0
        if self._writer_fd is None:
            path = self._writer_lock_path()
            if path is None:
                return 0.0
            self._writer_fd = open_lock_file(path)
        if self._waiter is None:
            self._waiter = FlockWaiter(self._writer_fd)
        if must_not_wait():
            if not self._waiter.try_acquire():
                raise WouldWait("the writer lock is held")
            self._writer_held = True
            return 0.0
        started = time.monotonic()
        left = time_left(self.write_wait)
        if not self._waiter.acquire(max(0.0, left)):
            raise WriterBusy(f"the database writer was busy for more than {self.write_wait:g} s")
        self._writer_held = True
        waited = time.monotonic() - started
        hooks.observe_writer_lock_wait(waited)  # /metrics
        return waited + (self.write_wait - left)

    def _drop_writer_lock(self) -> None:
        if self._writer_held:
            self._writer_held = False
            assert self._writer_fd is not None  # held: the lock file is open
            fcntl.flock(self._writer_fd, fcntl.LOCK_UN)

    def _start_transaction_under_autocommit(self):
        if self._wal_path is not None:
            with self.wrap_database_errors:
                self.connection.execute("PRAGMA synchronous=NORMAL")
            self._relaxed = True
        hooks.mark("lock_wait")
        try:
            waited = self._take_writer_lock()
            try:
                # As Django's, on the driver's connection rather than through a
                # cursor wrapper: this runs under the writer lock, on every write.
                with self.wrap_database_errors:
                    at_once = must_not_wait()
                    contended = (at_once or waited > 0.05) and self._busy_ms  # a short wait is within the 1 s of slack
                    if contended:  # SQLite's lock gets only what is left of the wait (none at once)
                        left = 0 if at_once else max(1, int((self.write_wait - waited) * 1000))
                        self.connection.execute(f"PRAGMA busy_timeout={min(left, self._busy_ms)}")
                    try:
                        self.connection.execute(f"BEGIN {self.transaction_mode or ''}")
                    finally:
                        if contended:
                            self.connection.execute(f"PRAGMA busy_timeout={self._busy_ms}")
                hooks.mark("begun")
            except OperationalError as exc:
                if is_writer_busy(exc):  # SQLite's own lock, held by another program
                    if must_not_wait():
                        raise WouldWait("SQLite's write lock is held") from exc
                    raise WriterBusy(f"the database writer was busy for more than {self.write_wait:g} s") from exc
                raise
        except BaseException:
            self._drop_writer_lock()
            self._restore_full()
            raise

    def _commit(self):
        hooks.mark("committing")
        try:
            try:
                result = super()._commit()
            except BaseException:
                self._end_failed_commit()
                raise
            finally:
                self._drop_writer_lock()
                hooks.mark("committed")
            if self._relaxed:
                self._sync_wal()
                hooks.mark("synced")
            return result
        finally:
            self._restore_full()

    def _end_failed_commit(self) -> None:
        """A COMMIT SQLite refused can leave its transaction open (a deferred
        foreign key, a full disk): roll it back while the writer lock is
        still held, so that synchronous=FULL can be restored after it and the
        commit's own error is the one raised."""
        conn = self.connection
        if conn is not None and conn.in_transaction:
            try:
                conn.rollback()
            except Exception:  # noqa: BLE001  (the commit's error is the one to report)
                pass

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._drop_writer_lock()
            self._restore_full()

    def _close(self):
        try:
            return super()._close()
        finally:
            self._drop_writer_lock()
            self._relaxed = False
            if self._waiter is not None:  # it closes the lock's descriptor
                self._waiter.close()
                self._waiter = None
                self._writer_fd = None
            for name in ("_writer_fd", "_wal_fd"):
                fd = getattr(self, name)
                if fd is not None:
                    os.close(fd)
                    setattr(self, name, None)

    def _sync_wal(self) -> None:
        """fsync the WAL: the frames this transaction appended, and any
        appended before them. The file stays the same while this connection
        is open (SQLite deletes the WAL only when the last connection closes;
        a restart rewrites it in place), so its descriptor is kept."""
        try:
            if self._wal_fd is None:
                assert self._wal_path is not None  # only called when the WAL is synced here
                self._wal_fd = os.open(self._wal_path, os.O_RDONLY | os.O_CLOEXEC)
            started = time.perf_counter()
            (getattr(os, "fdatasync", None) or os.fsync)(self._wal_fd)  # macOS has no fdatasync
            hooks.observe_fsync(time.perf_counter() - started)  # /metrics
        except OSError as exc:
            # Committed and visible, but not known to be on disk: the caller
            # must not report success.
            raise OperationalError(f"could not fsync the write-ahead log: {exc}") from exc

    def _restore_full(self) -> None:
        if self._relaxed:
            self._relaxed = False
            if self.connection is not None:
                with self.wrap_database_errors:
                    self.connection.execute("PRAGMA synchronous=FULL")
