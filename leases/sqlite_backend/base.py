"""Django's SQLite backend plus a fair writer lock across processes.

SQLite's busy handler polls with growing sleeps, so under load two processes
writing to one file can starve each other for seconds. Here every write
transaction first takes an exclusive ``flock`` on ``<db>.writer-lock`` and
then ``BEGIN IMMEDIATE``: waiters block in the kernel and are woken as soon as
the holder commits, so hand-over is prompt and nobody spins. The lock is
released on commit, rollback or close, and by the kernel if the process dies.

Group commit: with synchronous=FULL every commit waits for an fsync, and the
writer lock is held meanwhile, so on a slow disk writers queue behind one
fsync each. ``group_commit(fn)`` runs write transactions of the threads of
one process together: whoever finds no transaction running takes the lock,
runs every transaction queued by then -- each inside its own savepoint, so
one's failure undoes only its own writes -- and commits them all with one
fsync; nobody's call returns before the commit that covers it. Each caller
still gets its own result or exception, and every acknowledged write is as
durable as with one transaction each.

Checkpoints off the request path: SQLite copies the WAL back into the
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

The fsync after the writer lock (``sync_outside_lock`` in OPTIONS, with
synchronous=FULL): SQLite fsyncs the WAL inside COMMIT, so every other
writer waits for that fsync too; it was the largest part of a lease
transaction's time under the lock. Instead, a write transaction runs at
synchronous=NORMAL (SQLite writes the WAL frames but does not fsync them),
the writer lock is released after COMMIT, and then the connection fsyncs the
WAL itself before the commit returns -- so, as with FULL, nobody is answered
before their transaction is on disk, while the next writer already works
under the lock; and one fsync flushes every frame written before it, by any
process. Everything else on the connection stays at FULL. The difference
from FULL: another connection can read the transaction during that fsync,
before it is on disk (SQLite makes it visible on COMMIT). Any write that
follows such a read is appended after it in the WAL, so its own fsync makes
what it read durable first; only a pure read can report a state that a power
cut within that fraction of a millisecond takes back, never a lease granted
to the client who acquired it. ``sync_outside_lock: False`` keeps SQLite's
own fsync under the lock.

Bounded waits: a writer that cannot take the writer lock within
``write_wait`` seconds (OPTIONS, LEASEHOLD_WRITE_WAIT) gets ``WriterBusy``
(leases.sqlite_backend.busy; the doors answer 503 ServerBusy), and so does
one whose ``BEGIN IMMEDIATE`` finds SQLite's own lock held by another program
past what is left of that wait. flock() cannot time out, so a contended lock
is waited for by a helper thread of the connection, blocked in the kernel as
before (hand-over stays prompt and fair); the writer waits for the helper at
most the rest of its time. The wait counts from when the server had the
whole request (``busy.received_at``, set by config/asgi.py), so time spent
queued behind other waiting writers is part of it. Reads take no lock and never wait for a writer
(WAL); their busy timeout is bounded by the same wait.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading
import time
from contextlib import contextmanager

from django.db import transaction
from django.db.transaction import TransactionManagementError
from django.db.utils import OperationalError
from django.db.backends.sqlite3 import base

from leases.metrics import observe_fsync, observe_writer_lock_wait  # /metrics: two histograms, one call each

from .busy import WriterBusy, is_writer_busy, time_left

DEFAULT_WRITE_WAIT = 5.0


class _Pending:
    __slots__ = ("fn", "result", "error", "done")

    def __init__(self, fn):
        self.fn = fn
        self.result = None
        self.error: BaseException | None = None
        self.done = False


class GroupCommit:
    """Write transactions of one process's threads, committed together."""

    def __init__(self, alias: str):
        self.alias = alias
        self.cond = threading.Condition(threading.Lock())
        self.queue: list[_Pending] = []
        self.busy = False

    def run(self, fn):
        op = _Pending(fn)
        with self.cond:
            self.queue.append(op)
            while self.busy and not op.done:
                self.cond.wait()
            leader = not op.done
            if leader:
                self.busy = True
                batch, self.queue = self.queue, []
        if leader:
            try:
                self._execute(batch)
            finally:
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()
        if op.error is not None:
            raise op.error
        return op.result

    def _execute(self, batch: list[_Pending]) -> None:
        try:
            with transaction.atomic(using=self.alias):
                if len(batch) == 1:
                    batch[0].result = batch[0].fn()
                else:
                    for op in batch:
                        try:
                            with transaction.atomic(using=self.alias):  # a savepoint each
                                op.result = op.fn()
                        except Exception as exc:
                            op.error = exc
                    if transaction.get_connection(self.alias).needs_rollback:
                        # a savepoint could not be rolled back: the whole
                        # transaction will be, so nobody may report success
                        raise TransactionManagementError("the group's transaction was rolled back")
        except BaseException as exc:  # BEGIN or COMMIT failed (or the only transaction did)
            shared = exc if isinstance(exc, Exception) else RuntimeError("the write transaction was interrupted")
            for op in batch:
                if op.error is None:
                    op.error, op.result = shared, None
            if shared is not exc:
                raise
        finally:
            for op in batch:
                op.done = True


_groups: dict[str, GroupCommit] = {}
_groups_lock = threading.Lock()

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
            with _writer_lock(writer_lock_path(self.path)):
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


def writer_lock_path(name: str) -> str | None:
    """The writer lock's file beside database ``name``; None for an
    in-memory database (its connections share nothing to lock)."""
    if not name or name == ":memory:" or name.startswith("file:"):
        return None
    return name + ".writer-lock"


def _open_lock_file(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


@contextmanager
def _writer_lock(path: str):
    """The writer lock, for a thread that has no DatabaseWrapper."""
    fd = _open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


class FlockWaiter:
    """Takes the writer lock on descriptor ``fd`` for its connection within
    a time bound. A helper thread blocks in flock() (woken by the kernel as
    soon as the holder lets go); the connection's thread waits for it at most
    its timeout. If it gave up, the helper lets go of the lock as soon as it
    gets it. The descriptor is closed by whoever is last: ``close()`` while
    the helper is still blocked leaves that to the helper (closing it under
    a blocked flock would let the number be reused by another file)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.cond = threading.Condition(threading.Lock())
        self.waiting = 0  # threads in acquire()
        self.wanted = False  # the helper is, or is about to be, blocked in flock
        self.granted = False  # the helper got the lock for a waiter
        self.closing = False
        self.thread: threading.Thread | None = None

    def acquire(self, timeout: float) -> bool:
        with self.cond:
            # Free and nobody's request pending on this descriptor: take it
            # now. (With the helper blocked, a second flock on the same open
            # file would succeed as a conversion and the helper's LOCK_UN
            # would then drop it under us, hence only here, under cond.)
            if not self.wanted:
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    pass
            self.waiting += 1
            try:
                if not self.wanted:
                    self.wanted = True
                    if self.thread is None:
                        self.thread = threading.Thread(target=self._run, name="writer-lock-wait", daemon=True)
                        self.thread.start()
                    self.cond.notify_all()
                if self.cond.wait_for(lambda: self.granted, timeout):
                    self.granted = False
                    return True
                return False
            finally:
                self.waiting -= 1

    def close(self) -> None:
        """Close the descriptor now, or when the blocked helper returns."""
        with self.cond:
            self.closing = True
            if self.wanted:
                return
            self.cond.notify_all()
        os.close(self.fd)

    def _run(self) -> None:
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.wanted or self.closing)
                if self.closing and not self.wanted:
                    return
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX)
                failed = False
            except OSError:
                failed = True
            with self.cond:
                self.wanted = False
                if self.closing:
                    os.close(self.fd)  # releases the lock too
                    return
                if self.waiting and not failed:
                    self.granted = True
                    self.cond.notify_all()
                elif not failed:
                    fcntl.flock(self.fd, fcntl.LOCK_UN)  # its waiter gave up


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


class DatabaseWrapper(base.DatabaseWrapper):
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
        # No statement waits longer than a writer may (module docstring).
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

    def group_commit(self, fn):
        """Run ``fn`` in a write transaction shared with the other threads of
        this process that write at the same time (see the module docstring);
        outside any transaction of the caller's. On an in-memory database,
        whose connections do not share data, a transaction of its own."""
        if self._writer_lock_path() is None:
            with transaction.atomic(using=self.alias):
                return fn()
        key = str(self.settings_dict["NAME"])
        group = _groups.get(key)
        if group is None:
            with _groups_lock:
                group = _groups.setdefault(key, GroupCommit(self.alias))
        return group.run(fn)

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
            self._writer_fd = _open_lock_file(path)
        if self._waiter is None:
            self._waiter = FlockWaiter(self._writer_fd)
        started = time.monotonic()
        left = time_left(self.write_wait)
        if not self._waiter.acquire(max(0.0, left)):
            raise WriterBusy(f"the database writer was busy for more than {self.write_wait:g} s")
        self._writer_held = True
        waited = time.monotonic() - started
        observe_writer_lock_wait(waited)  # /metrics
        return waited + (self.write_wait - left)

    def _drop_writer_lock(self) -> None:
        if self._writer_held:
            self._writer_held = False
            fcntl.flock(self._writer_fd, fcntl.LOCK_UN)

    def _start_transaction_under_autocommit(self):
        if self._wal_path is not None:
            with self.wrap_database_errors:
                self.connection.execute("PRAGMA synchronous=NORMAL")
            self._relaxed = True
        try:
            waited = self._take_writer_lock()
            try:
                # As Django's, on the driver's connection rather than through a
                # cursor wrapper: this runs under the writer lock, on every write.
                with self.wrap_database_errors:
                    contended = waited > 0.05 and self._busy_ms  # a short wait is within the 1 s of slack
                    if contended:  # SQLite's lock gets only what is left of the wait
                        left = max(1, int((self.write_wait - waited) * 1000))
                        self.connection.execute(f"PRAGMA busy_timeout={min(left, self._busy_ms)}")
                    try:
                        self.connection.execute(f"BEGIN {self.transaction_mode or ''}")
                    finally:
                        if contended:
                            self.connection.execute(f"PRAGMA busy_timeout={self._busy_ms}")
            except OperationalError as exc:
                if is_writer_busy(exc):  # SQLite's own lock, held by another program
                    raise WriterBusy(f"the database writer was busy for more than {self.write_wait:g} s") from exc
                raise
        except BaseException:
            self._drop_writer_lock()
            self._restore_full()
            raise

    def _commit(self):
        try:
            try:
                result = super()._commit()
            finally:
                self._drop_writer_lock()
            if self._relaxed:
                self._sync_wal()
            return result
        finally:
            self._restore_full()

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
                self._wal_fd = os.open(self._wal_path, os.O_RDONLY | os.O_CLOEXEC)
            started = time.perf_counter()
            (getattr(os, "fdatasync", None) or os.fsync)(self._wal_fd)  # macOS has no fdatasync
            observe_fsync(time.perf_counter() - started)  # /metrics
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
