"""WAL checkpoints off the request path.

SQLite copies the WAL back into the
database (a checkpoint, with fsyncs of its own) inside the commit that pushes
the WAL past ``wal_autocheckpoint`` pages -- a request's commit, under the
writer lock, so that request and every writer behind it wait (one commit in
about 60 took 1.5-3 ms instead of 0.3). With ``checkpoint_interval`` set
(OPTIONS), a daemon thread per process and database file checkpoints at that
interval on a connection of its own: first beside the writers (PASSIVE),
then, holding the writer lock for a moment, the few frames committed during
that first pass, so the WAL is fully copied and the next writer starts it
over instead of growing it. The request connections keep
``wal_autocheckpoint`` only as a bound on the WAL should the thread fall
behind or stop. Durability does not depend on it: commits still fsync the WAL.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading

from .writer_lock import writer_lock, writer_lock_path

log = logging.getLogger("leases.sqlite_backend")


class Checkpointer(threading.Thread):
    """PASSIVE WAL checkpoints of one database file, every ``interval``
    seconds, on a connection of its own (see the module docstring)."""

    def __init__(self, path: str, interval: float, synchronous: str):
        super().__init__(name=f"wal-checkpoint {os.path.basename(path)}", daemon=True)
        self.path = path
        self.interval = interval
        self.synchronous = synchronous
        self.rounds = 0  # wake-ups
        self.checkpoints = 0  # checkpoints that ran
        self.stopping = threading.Event()
        self._settled = -1  # WAL frames when last copied with the writers held off

    def stop(self) -> None:
        self.stopping.set()
        self.join()

    def checkpoint(self, con) -> None:
        """One round on connection ``con``: the bulk beside the writers; then,
        under the writer lock so that nothing is appended meanwhile, the
        frames committed during the first pass. Only a fully copied WAL is
        started over (overwritten from its beginning) by the next writer;
        otherwise it would only grow. Nothing new since the last round:
        nothing to do."""
        busy, frames, _ = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if not busy and frames != self._settled:  # busy: another process is at it
            with writer_lock(writer_lock_path(self.path)):
                _, self._settled, _ = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        self.checkpoints += 1

    def run(self) -> None:
        con = con_inode = None
        while not self.stopping.wait(self.interval):
            self.rounds += 1
            try:
                try:
                    inode = os.stat(self.path).st_ino
                except FileNotFoundError:  # a test database was dropped
                    inode = None
                if con is not None and inode != con_inode:  # ... or replaced
                    con.close()
                    con = None
                if inode is None:
                    continue
                if con is None:
                    con = sqlite3.connect(self.path, timeout=0.1, isolation_level=None)
                    con.execute(f"PRAGMA synchronous={self.synchronous}")
                    con_inode = inode
                self.checkpoint(con)
            except sqlite3.Error as exc:  # busy, or the file went away: try again later
                log.debug("checkpoint of %s: %s", self.path, exc)
                if con is not None:
                    con.close()
                    con = None
        if con is not None:
            con.close()


_checkpointers: dict[tuple[int, str], Checkpointer] = {}  # (pid, path): one thread per process and file
_checkpointers_lock = threading.Lock()


def ensure_checkpointer(path: str, interval: float, synchronous: str) -> Checkpointer:
    key = (os.getpid(), path)  # a forked child starts its own
    with _checkpointers_lock:
        thread = _checkpointers.get(key)
        if thread is None or not thread.is_alive():
            thread = _checkpointers[key] = Checkpointer(path, interval, synchronous)
            thread.start()
        return thread
