"""Django's SQLite backend plus a fair writer lock across processes.

SQLite's busy handler polls with growing sleeps, so under load two processes
writing to one file can starve each other for seconds. Here every write
transaction first takes an exclusive ``flock`` on ``<db>.writer-lock`` and
then ``BEGIN IMMEDIATE``: waiters block in the kernel and are woken as soon as
the holder commits, so hand-over is prompt and nobody spins. The lock is
released on commit, rollback or close, and by the kernel if the process dies.
"""

from __future__ import annotations

import fcntl
import os

from django.db.backends.sqlite3 import base


class DatabaseWrapper(base.DatabaseWrapper):
    _writer_fd: int | None = None
    _writer_held = False

    def _writer_lock_path(self) -> str | None:
        name = str(self.settings_dict["NAME"])
        if not name or name == ":memory:" or name.startswith("file:"):
            return None
        return name + ".writer-lock"

    def _take_writer_lock(self) -> None:
        if self._writer_held:
            return
        if self._writer_fd is None:
            path = self._writer_lock_path()
            if path is None:
                return
            self._writer_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._writer_fd, fcntl.LOCK_EX)
        self._writer_held = True

    def _drop_writer_lock(self) -> None:
        if self._writer_held:
            self._writer_held = False
            fcntl.flock(self._writer_fd, fcntl.LOCK_UN)

    def _start_transaction_under_autocommit(self):
        self._take_writer_lock()
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._drop_writer_lock()
            raise

    def _commit(self):
        try:
            return super()._commit()
        finally:
            self._drop_writer_lock()

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._drop_writer_lock()

    def _close(self):
        try:
            return super()._close()
        finally:
            self._drop_writer_lock()
            if self._writer_fd is not None:
                os.close(self._writer_fd)
                self._writer_fd = None
