"""Robustness scenarios of bench/run.py: lease holders under a
hostile load, and under a stuck writer. Each prints what the holders saw.

* ``hostile``: 16 holders of 15-second leases renew every 5 s, each on its
  own blob, while slow clients trickle headers and bodies to the admin, API
  and Azure paths (``--hostile-slow``, a byte every second), slow Put Blobs
  of ``--hostile-upload-mb`` MiB arrive over the run (``--hostile-uploads``)
  and, on Leasehold, full CSV exports of the history
  (``--hostile-exports``; the history is first grown to
  ``--hostile-events`` events by copying rows). Reported: renewals, lost
  leases (a renewal refused or unanswered: the holder no longer holds it),
  renewal p50/p99, 5xx, exports completed, cut short and their MB/s
  (complete or still running at the end). Azurite has no history export;
  the rest is the same.
* ``stuck``: another process holds SQLite's write lock (``BEGIN IMMEDIATE``
  on the database file, as any program could) for ``--stuck-seconds``,
  while 4 readers (Get Blob) and 4 writers (acquire, release) run.
  Reported: read p99 during the hold, the longest time a writer waited for
  its answer and how it was answered (503 ServerBusy expected within
  LEASEHOLD_WRITE_WAIT + 1 s), and how long after the lock is let go the
  writers succeed again. Azurite has no database to lock: not run there.

CPU burners (``busy`` scenarios in run.py) are processes spinning in a loop,
started before and killed after each measured run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid

from loadgen import Connection, LeaseRequests, Signer

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONTAINER = "bench"


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


@contextlib.contextmanager
def cpu_burners(n: int):
    """``n`` processes spinning on the CPU for as long as the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
             for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


# ------------------------------------------------------------------ holders


class Holders:
    """``n`` holders of ``duration``-second leases, renewing every ``every`` s."""

    def __init__(self, port: int, host: str, n: int = 16, duration: int = 15, every: float = 5.0):
        self.port, self.host, self.n, self.duration, self.every = port, host, n, duration, every
        self.renew_lat: list[float] = []
        self.renewals = 0
        self.lost = 0
        self.err5xx = 0
        self.lock = threading.Lock()

    def run(self, seconds: float) -> None:
        signer = Signer(ACCOUNT, KEY)
        stop = time.monotonic() + seconds
        threads = [threading.Thread(target=self._holder, args=(signer, i, stop), daemon=True)
                   for i in range(self.n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 120)

    def _holder(self, signer: Signer, i: int, stop: float) -> None:
        reqs = LeaseRequests(signer, self.host, f"/{ACCOUNT}/{CONTAINER}/holder-{i:02d}")
        conn = Connection("127.0.0.1", self.port)
        lease_id = str(uuid.uuid4())
        try:
            status, _, _ = conn.request(reqs.acquire(lease_id, self.duration))
            if status != 201:
                with self.lock:
                    self.lost += 1
                return
            next_at = time.monotonic() + self.every
            while next_at < stop:
                time.sleep(max(0.0, next_at - time.monotonic()))
                next_at += self.every
                t0 = time.perf_counter()
                try:
                    status, _, _ = conn.request(reqs.renew(lease_id))
                except OSError:
                    status = 0
                lat = time.perf_counter() - t0
                with self.lock:
                    self.renewals += 1
                    self.renew_lat.append(lat)
                    if status >= 500:
                        self.err5xx += 1
                    if status != 200 or lat >= self.duration - self.every:
                        self.lost += 1  # refused, or answered after the lease had run out
                        return
            conn.request(reqs.release(lease_id))
        finally:
            conn.close()


# ------------------------------------------------------------------ hostile clients


def _trickle(port: int, head: bytes, body_len: int, stop: float, refused: list[int]) -> None:
    """Send ``head`` a byte a second, then a body of ``body_len`` bytes a
    byte a second; start over when the server closes the connection."""
    while time.monotonic() < stop:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                for b in head + b"u" * body_len:
                    if time.monotonic() >= stop:
                        return
                    sock.sendall(bytes([b]))
                    time.sleep(1.0)
        except OSError:
            refused[0] += 1
            time.sleep(0.5)


def slow_clients(port: int, host: str, n: int, stop: float) -> tuple[list[threading.Thread], list[int]]:
    """``n`` connections trickling headers and bodies to the admin, the JSON
    API and the Azure endpoint."""
    signer = Signer(ACCOUNT, KEY)
    heads = [
        (f"POST /admin/login/ HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
         "Content-Length: 1000\r\n\r\n").encode(),
        (f"POST /api/v1/leases/acquire/{ACCOUNT}/{CONTAINER}/slow HTTP/1.1\r\nHost: {host}\r\n"
         "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n").encode(),
    ]
    refused = [0]
    threads = []
    for i in range(n):
        if i % 3 == 2:  # a signed Put Blob, its headers sent at once, the body trickled
            head = signer.build("PUT", host, f"/{ACCOUNT}/{CONTAINER}/slow-{i}",
                                headers={"x-ms-blob-type": "BlockBlob"}, body=b"u" * 1000)[:-1000]
            threads.append(threading.Thread(target=_send_slowly, args=(port, head, 1000, 1.0, stop, refused),
                                            daemon=True))
        else:  # admin or API: headers and body trickled
            threads.append(threading.Thread(target=_trickle, args=(port, heads[i % 3], 1000, stop, refused),
                                            daemon=True))
    for t in threads:
        t.start()
    return threads, refused


def _send_slowly(port: int, head: bytes, size: int, rate: float, stop: float, refused: list[int],
                 piece: int = 1, answers: list | None = None) -> None:
    """Send ``head`` at once, then ``size`` body bytes at ``rate`` pieces a
    second (``piece`` bytes each); start over if the server closes."""
    while time.monotonic() < stop:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(head)
                sent = 0
                while sent < size:
                    if time.monotonic() >= stop:
                        return
                    n = min(piece, size - sent)
                    sock.sendall(b"u" * n)
                    sent += n
                    time.sleep(1.0 / rate)
                answer = sock.recv(4096)
                if answers is not None:
                    answers.append(answer[9:12].decode(errors="replace"))
                return
        except OSError:
            refused[0] += 1
            time.sleep(0.5)


def slow_uploads(port: int, host: str, n: int, mib: int, seconds: float, stop: float,
                 answers: list) -> list[threading.Thread]:
    """``n`` signed Put Blobs of ``mib`` MiB, each body spread over
    ``seconds``; ``answers`` gets each one's status."""
    signer = Signer(ACCOUNT, KEY)
    size = mib << 20
    piece = 64 << 10
    rate = max(1.0, size / piece / seconds)  # pieces per second
    threads = []
    for i in range(n):
        body = b"u" * size
        head = signer.build("PUT", host, f"/{ACCOUNT}/{CONTAINER}/upload-{i}",
                            headers={"x-ms-blob-type": "BlockBlob"}, body=body)[:-size]
        del body
        threads.append(threading.Thread(target=_send_slowly, args=(port, head, size, rate, stop, [0], piece, answers),
                                        daemon=True))
    for t in threads:
        t.start()
    return threads


def grow_history(db: str, events: int) -> int:
    """Copies of the history's rows until it holds ``events`` (inserts only:
    the history is append-only)."""
    con = sqlite3.connect(db, timeout=60)
    cols = ", ".join(f'"{r[1]}"' for r in con.execute("PRAGMA table_info(leases_leaseevent)") if r[1] != "id")
    while (count := con.execute("SELECT count(*) FROM leases_leaseevent").fetchone()[0]) < events:
        if not count:
            raise SystemExit("grow_history: the history has no event to copy")
        with con:
            con.execute(f"INSERT INTO leases_leaseevent ({cols}) SELECT {cols} FROM leases_leaseevent "
                        f"LIMIT {min(count, events - count, 200_000)}")
    # The copies went into the WAL (hundreds of MB): copy them into the
    # database now, as the end of any bulk load would, so that the scenario
    # is not charged with this set-up's checkpoint (the server's first
    # commit would find the WAL far past its bound and checkpoint it all).
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return count


def api_token(env: dict, repo) -> str:
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c",
                          "from django.contrib.auth import get_user_model\n"
                          "from leases.models.tokens import ApiToken\n"
                          "u = get_user_model().objects.filter(is_superuser=True).first()\n"
                          "print(ApiToken.issue(user=u, name='bench-export')[1])"],
                         cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise SystemExit(f"could not issue an API token for the exports: {out.stderr[-2000:]}")
    return out.stdout.strip().splitlines()[-1]


def exports(port: int, host: str, token: str, n: int, stop: float, done: list) -> list[threading.Thread]:
    """``n`` full CSV exports of the history, read as fast as they come,
    again and again until ``stop``; ``done`` gets (bytes, seconds, how it
    ended: "complete", "cut" (the server closed it early or an error) or
    "running" (still streaming at ``stop``)) each."""
    def run():
        while time.monotonic() < stop:
            t0 = time.monotonic()
            total = 0
            ended = "cut"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
                    sock.sendall(f"GET /api/v1/events/export/?format=csv HTTP/1.1\r\nHost: {host}\r\n"
                                 f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode())
                    last = b""
                    while piece := sock.recv(1 << 20):
                        total += len(piece)
                        last = (last + piece)[-7:]
                        if time.monotonic() >= stop:
                            ended = "running"
                            break
                    else:
                        ended = "complete" if last == b"0\r\n\r\n" else "cut"  # the chunked body's end
            except OSError:
                pass
            done.append((total, time.monotonic() - t0, ended))
    threads = [threading.Thread(target=run, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def hostile(server, seconds: float, *, slow: int, uploads: int, upload_mib: int, export_n: int,
            events: int, repo) -> dict:
    host = server.host
    is_leasehold = hasattr(server, "db")
    setup_blobs(server, [f"holder-{i:02d}" for i in range(16)])
    if is_leasehold and export_n:
        conn = Connection("127.0.0.1", server.port)  # an event to copy
        reqs = LeaseRequests(Signer(ACCOUNT, KEY), host, f"/{ACCOUNT}/{CONTAINER}/holder-00")
        lease_id = str(uuid.uuid4())
        conn.request(reqs.acquire(lease_id, 15))
        conn.request(reqs.release(lease_id))
        conn.close()
        grow_history(str(server.db), events)
    stop = time.monotonic() + seconds + 2
    _, refused = slow_clients(server.port, host, slow, stop)
    uploaded: list[str] = []
    slow_uploads(server.port, host, uploads, upload_mib, seconds * 0.8, stop, uploaded)
    done: list = []
    if is_leasehold and export_n:
        if getattr(server, "bench_token", None) is None:
            server.bench_token = api_token(server.env, repo)
        export_threads = exports(server.port, host, server.bench_token, export_n, stop, done)
    time.sleep(1.0)  # the hostile clients connect first
    holders = Holders(server.port, host)
    holders.run(seconds)
    time.sleep(max(0.0, stop - time.monotonic()))  # the uploads' answers
    for t in export_threads if is_leasehold and export_n else ():
        t.join(timeout=5)  # each export thread records its run once its next piece comes after stop
    return {"renewals": holders.renewals, "lost": holders.lost, "5xx": holders.err5xx,
            "renew p50 ms": pct(holders.renew_lat, 0.5) * 1e3, "renew p99 ms": pct(holders.renew_lat, 0.99) * 1e3,
            "renew max ms": max(holders.renew_lat, default=float("nan")) * 1e3,
            "slow reconnects": refused[0], "uploads 201": sum(1 for a in uploaded if a == "201"),
            "exports done": sum(1 for _, _, ended in done if ended == "complete"),
            "exports cut": sum(1 for _, _, ended in done if ended == "cut"),
            # each export's own rate, complete or still running at the end
            "export MB/s": (sum(b for b, _, _ in done) / max(1e-9, sum(s for _, s, _ in done)) / 1e6
                            if done else float("nan"))}


def setup_blobs(server, names: list[str]) -> None:
    signer = Signer(ACCOUNT, KEY)
    conn = Connection("127.0.0.1", server.port)
    try:
        conn.request(signer.build("PUT", server.host, f"/{ACCOUNT}/{CONTAINER}", {"restype": "container"}))
        for name in names:
            conn.request(signer.build("PUT", server.host, f"/{ACCOUNT}/{CONTAINER}/{name}",
                                      headers={"x-ms-blob-type": "BlockBlob"}, body=b"x"))
    finally:
        conn.close()


# ------------------------------------------------------------------ stuck writer


def stuck(server, hold: float, write_wait: float) -> dict:
    """SQLite's write lock held by another process for ``hold`` seconds."""
    setup_blobs(server, [f"stuck-{i}" for i in range(4)])
    signer = Signer(ACCOUNT, KEY)
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sqlite3, sys, time\n"
                               "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
                               "c.execute('BEGIN IMMEDIATE'); print('held', flush=True)\n"
                               "time.sleep(float(sys.argv[2])); c.execute('ROLLBACK')\n",
                               str(server.db), str(hold)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None  # spawned with a pipe
    assert holder.stdout.readline().strip() == "held"
    held_from = time.monotonic()
    held_until = held_from + hold
    after = held_until + 5
    reads: list[tuple[float, float, int]] = []
    writes: list[tuple[float, float, int]] = []

    def reader(i):
        conn = Connection("127.0.0.1", server.port)
        while time.monotonic() < after:
            t0 = time.monotonic()
            try:
                st, _, _ = conn.request(signer.build("GET", server.host, f"/{ACCOUNT}/{CONTAINER}/stuck-{i}"))
            except OSError:
                st = 0
            reads.append((t0, time.monotonic() - t0, st))
            time.sleep(0.05)

    def writer(i):
        conn = Connection("127.0.0.1", server.port)
        reqs = LeaseRequests(signer, server.host, f"/{ACCOUNT}/{CONTAINER}/stuck-{i}")
        while time.monotonic() < after:
            lease_id = str(uuid.uuid4())
            t0 = time.monotonic()
            try:
                st, _, _ = conn.request(reqs.acquire(lease_id, 15))
            except OSError:
                st = 0
            writes.append((t0, time.monotonic() - t0, st))
            if st == 201:
                conn.request(reqs.release(lease_id))
            time.sleep(0.05)

    threads = [threading.Thread(target=f, args=(i,), daemon=True) for f in (reader, writer) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(hold + 120)
    holder.wait()
    during = [r for r in reads if r[0] + r[1] < held_until]
    w_during = [w for w in writes if w[0] + w[1] < held_until]
    first_ok = min((w[0] + w[1] for w in writes if w[2] == 201 and w[0] >= held_until - write_wait), default=None)
    return {"reads": len(during), "read p99 ms": pct([r[1] for r in during], 0.99) * 1e3,
            "reads not 200": sum(1 for r in during if r[2] != 200),
            "writes": len(w_during), "writes 503": sum(1 for w in w_during if w[2] == 503),
            "writes other": sum(1 for w in w_during if w[2] not in (503,)),
            "write max wait s": max((w[1] for w in w_during), default=float("nan")),
            "full service after s": (first_ok - held_until) if first_ok else float("nan")}
