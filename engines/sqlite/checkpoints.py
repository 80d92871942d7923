"""WAL checkpoints off the request path: with ``checkpoint_interval`` set (OPTIONS), a daemon thread
per process and database file copies the WAL back into the database on a connection of its own, so
that no request's commit pays for a checkpoint under the writer lock, and its pass under the writer
lock is bounded (``LOCKED_FRAMES``) so that large writes do not hold lease commits behind it;
docs/development/architecture.md ("WAL checkpoints") tells how, and docs/decisions/0005 why."""

from __future__ import annotations

import logging
import os
import sqlite3
import struct
import threading
import time

from .. import hooks

from .writer_lock import writer_lock

log = logging.getLogger("engines.sqlite")

LOCKED_FRAMES = 256  # most frames copied under the writer lock (a 1 MiB chunk, with 4 KiB pages)
LOCKED_TRIES = 3  # looks under the lock per round
FAILURES_LOGGED = 600  # a failing round is logged once per this many (a minute at the default interval)
_INDEX = struct.Struct("=I12xI76xI")  # WAL index: iVersion @0, mxFrame @16, nBackfill @96 (native order)
_INDEX_VERSION = 3007000


def frames_to_copy(path: str) -> int | None:
    """Frames of the WAL of database ``path`` not yet copied into the
    database (mxFrame - nBackfill in the WAL index), or None if the index
    cannot be read as documented. Exact while the writer lock is held."""
    try:
        data = os.pread(_index_fd(path + "-shm"), _INDEX.size, 0)
    except OSError:
        return None
    if len(data) < _INDEX.size:
        return None
    version, max_frame, backfilled = _INDEX.unpack(data)
    if version != _INDEX_VERSION or backfilled > max_frame:
        return None
    return max_frame - backfilled


_index_fds: dict[str, int] = {}  # -shm path: a descriptor never closed while its file exists
_index_fds_lock = threading.Lock()


def _index_fd(path: str) -> int:
    """A descriptor of the WAL index file ``path``, opened once and kept.

    Never opened and closed per read: SQLite's locks on the WAL index are
    POSIX record locks, which belong to the process and go when *any*
    descriptor of the file is closed. A close here dropped every lock this
    process's connections held on it, among them the one that tells
    another process's first connection that the index is in use: that
    connection then took itself for the only one and truncated the index
    under everybody's memory maps (every worker dies of SIGBUS:
    docs/decisions/0005) -- and the read locks that keep a checkpoint
    from overwriting pages a reader still needs were gone too. A
    descriptor of a file that has since been deleted (a test database
    dropped) is closed when the path is next opened: no connection can
    share that file with another process any more."""
    with _index_fds_lock:
        fd = _index_fds.get(path)
        if fd is not None:
            try:
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            if os.fstat(fd).st_nlink == 0:  # deleted: nobody else can open it
                os.close(fd)
            # (else replaced while still linked somewhere: kept open, not closed)
            del _index_fds[path]
        fd = _index_fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return fd


class Checkpointer(threading.Thread):
    """PASSIVE WAL checkpoints of one database file, every ``interval``
    seconds, on a connection of its own (docs/development/architecture.md,
    "WAL checkpoints")."""

    def __init__(self, path: str, interval: float, synchronous: str):
        super().__init__(name=f"wal-checkpoint {os.path.basename(path)}", daemon=True)
        self.path = path
        self.interval = interval
        self.synchronous = synchronous
        self.rounds = 0  # wake-ups
        self.checkpoints = 0  # checkpoints that ran
        self.stopping = threading.Event()
        self._settled = -1  # WAL frames when last copied with the writers held off
        self.failures = 0  # rounds that failed for the system (OSError), counted to log a few

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
        if frames == -1:  # not in WAL mode: opened before the file was switched to WAL (a new database)?
            con.execute("SELECT 1 FROM sqlite_master LIMIT 1")  # a read makes the connection see the WAL
            busy, frames, _ = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if not busy and frames != self._settled:  # busy: another process is at it
            for _ in range(LOCKED_TRIES):
                waited = time.monotonic()
                with writer_lock(self.path + ".writer-lock"):  # a file's checkpointer: never in memory
                    held = time.monotonic()
                    left = frames_to_copy(self.path)
                    copy = left is None or left <= LOCKED_FRAMES
                    if copy:
                        _, self._settled, _ = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if hooks.record:  # bench only: how long the writers were held off
                    hooks.record({"checkpoint_held": time.monotonic() - held, "waited": held - waited,
                                  "frames": frames, "left": left, "at": held})
                if copy:
                    break
                # too much for the lock: copy it beside the writers, then look again
                busy, frames, _ = con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                if busy:
                    break
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
                _closed(con)
                con = None
            except OSError as exc:  # out of descriptors (EMFILE), the lock file unreachable: next round
                if self.failures % FAILURES_LOGGED == 0:
                    log.warning("WAL checkpoint of %s failed, tried again every %s s: %s", self.path,
                                self.interval, exc)
                self.failures += 1
                _closed(con)
                con = None
            except Exception:  # a bug: logged, and the thread goes on (the WAL would only grow without it)
                if self.failures % FAILURES_LOGGED == 0:
                    log.exception("WAL checkpoint of %s failed", self.path)
                self.failures += 1
                _closed(con)
                con = None
        if con is not None:
            con.close()


def _closed(con) -> None:
    if con is not None:
        try:
            con.close()
        except sqlite3.Error:
            pass


checkpointers: dict[tuple[int, str], Checkpointer] = {}  # (pid, path): one thread per process and file
checkpointers_lock = threading.Lock()


def ensure_checkpointer(path: str, interval: float, synchronous: str) -> Checkpointer:
    key = (os.getpid(), path)  # a forked child starts its own
    with checkpointers_lock:
        thread = checkpointers.get(key)
        if thread is None or not thread.is_alive():
            thread = checkpointers[key] = Checkpointer(path, interval, synchronous)
            thread.start()
        return thread
