"""The production server's worker processes (serving/server.py): connections
are spread over them, and a worker that is slow to answer its supervisor is
not killed for it. Linux only (/proc, SO_REUSEPORT), as served."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest

from tests import azure_raw
from .test_processes import Server

pytestmark = [pytest.mark.processes,
              pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads /proc")]


def _workers(server) -> list[int]:
    """The supervisor's worker processes: its children that listen on the port."""
    children = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and _parent(int(pid)) == server.proc.pid]
    listening = _inodes(server.port, state="0A")  # TCP_LISTEN
    return sorted(pid for pid in children if _socket_inodes(pid) & listening)


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (state first)."""
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def _parent(pid: int) -> int | None:
    try:
        return int(_stat(pid)[1])
    except (OSError, IndexError, ValueError):
        return None


def _inodes(port: int, *, state: str, peer_port: int | None = None) -> set[str]:
    """Socket inodes of the server's port in this TCP state (/proc/net/tcp),
    of the connection from ``peer_port`` only if given."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh)
                for line in fh:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state and (
                            peer_port is None or int(fields[2].rsplit(":", 1)[1], 16) == peer_port):
                        found.add(fields[9])
        except OSError:
            continue
    return found


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def _live(sock: socket.socket) -> bytes:
    """GET /health/live on ``sock``: its whole answer (the body is "ok\\n")."""
    sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return _answer(sock)


def _unread_ping(pid: int) -> bool:
    """Is a message waiting, unread, on one of ``pid``'s Unix sockets (its
    supervisor's ping, on the pipe a stopped worker cannot read)? Read from
    ``ss`` (iproute2), which shows a Unix socket's receive queue."""
    mine = _socket_inodes(pid)
    listed = subprocess.run(["ss", "-x", "-n"], capture_output=True, text=True, check=True).stdout
    for line in listed.splitlines()[1:]:
        fields = line.split()  # Netid State Recv-Q Send-Q Local-Address Inode Peer-Address Inode
        if len(fields) >= 6 and fields[5] in mine and int(fields[2]) > 0:
            return True
    return False


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read()


def _answer(sock: socket.socket) -> bytes:
    got = b""
    while not got.endswith(b"ok\n"):
        piece = sock.recv(4096)
        if not piece:
            break
        got += piece
    return got


def _wait_for_both_workers(server) -> None:
    deadline = time.monotonic() + 30
    while len(_workers(server)) < 2:
        assert time.monotonic() < deadline, "the second worker never listened"
        time.sleep(0.1)


def _wait_until_replaced(server, victim: int) -> None:
    deadline = time.monotonic() + 30
    while victim in _workers(server) or len(_workers(server)) < 2:
        assert time.monotonic() < deadline, f"worker {victim} was not replaced"
        time.sleep(0.1)  # waiting for the supervisor (it looks every 0.5 s), not for lease time


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One server for the tests that leave it as they found it: two workers
    serving (a worker they stop runs again, one they kill or SIGHUP replaces
    is replaced), at the default log level, the health check at 60 s (the
    stalled and the dying workers' tests wait well inside it)."""
    s = Server(tmp_path_factory.mktemp("workers"), workers=2)
    s.env.pop("LEASEHOLD_LOG_LEVEL", None)
    s.env["LEASEHOLD_WORKER_HEALTHCHECK"] = "60"
    s.migrate().start()
    yield s
    s.kill()


@pytest.fixture
def server(shared):
    """The shared server, both its workers listening (a worker the test
    before replaced is serving)."""
    _wait_for_both_workers(shared)
    return shared


@pytest.fixture
def own(tmp_path):
    """A server of the test's own, for settings the shared one cannot have; not started."""
    s = Server(tmp_path, workers=2)
    yield s
    s.kill()


def test_connections_opened_together_are_spread_over_the_workers(server):
    """32 clients connecting at once, as a fleet of lease holders restarting
    does: each worker gets a share (with one listening socket shared by the
    workers, the first worker awake took nearly all of them)."""
    clients = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(32)]
    try:
        for sock in clients:  # each connection answered: it is held by a worker, not queued
            assert _live(sock).startswith(b"HTTP/1.1 200")
        established = _inodes(server.port, state="01")
        shares = [len(_socket_inodes(pid) & established) for pid in _workers(server)]
        assert sum(shares) == 32, shares
        # a hash of each connection's ports: 16 each on average; a share of
        # 4 or fewer happens about twice in 100,000 runs
        assert min(shares) > 4, shares
    finally:
        for sock in clients:
            sock.close()


def test_a_worker_stalled_past_uvicorns_health_check_is_not_killed(server):
    """A worker that cannot answer its supervisor's ping for a few seconds
    (a machine loaded far past its cores; here SIGSTOP) keeps running and
    keeps its connections (uvicorn's supervisor, left to itself, SIGKILLs it
    after 5 s, cutting every request it holds). Its request is answered once it runs
    again."""
    assert azure_raw.signed("PUT", server.url, "/devstoreaccount1/stall?restype=container").status_code == 201
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    try:
        assert _live(sock).startswith(b"HTTP/1.1 200")  # accepted: a worker holds it
        ours = _inodes(server.port, state="01", peer_port=sock.getsockname()[1])
        holder, = [pid for pid in _workers(server) if _socket_inodes(pid) & ours]
        os.kill(holder, signal.SIGSTOP)
        try:
            sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            time.sleep(6.5)  # the supervisor pings every 0.5 s; uvicorn gave up after 5
        finally:
            os.kill(holder, signal.SIGCONT)
        assert _answer(sock).startswith(b"HTTP/1.1 200")
        assert holder in _workers(server)  # the same process, not a replacement
    finally:
        sock.close()


def test_headers_sent_in_time_are_read_after_the_worker_was_stalled(own):
    """The header timeout (LEASEHOLD_HEADER_TIMEOUT) is for clients that are
    slow, not for a worker that was: headers sent on time but not yet read
    because the worker was stalled past the timeout (SIGSTOP here; a machine
    loaded past its cores in life) are answered, not cut off. The event loop
    runs due timers before it reads sockets, and closing the connection
    then reset it under the client's feet."""
    server = own
    server.env["LEASEHOLD_HEADER_TIMEOUT"] = "1"
    server.migrate().start()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    try:
        deadline = time.monotonic() + 10
        # (a connection not yet accepted has no inode: look again until it has)
        while not (holder := [pid for pid in _workers(server) if _socket_inodes(pid) & _inodes(
                server.port, state="01", peer_port=sock.getsockname()[1])]):
            assert time.monotonic() < deadline, "no worker accepted the connection"
            time.sleep(0.01)
        os.kill(holder[0], signal.SIGSTOP)
        try:
            sock.sendall(b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # well within the second
            time.sleep(2)
        finally:
            os.kill(holder[0], signal.SIGCONT)
        assert _answer(sock).startswith(b"HTTP/1.1 200")
        # and a client that really is too slow is still cut off
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        slow.sendall(b"GET /health/live HTTP/1.1\r\n")
        assert slow.recv(64) == b""  # closed, after about a second
        slow.close()
    finally:
        sock.close()


@pytest.mark.parametrize("sig, healthcheck, said", [
    (signal.SIGKILL, None, "was ended by signal SIGKILL"),  # a crash, the OOM killer
    (signal.SIGSTOP, "1", "did not answer for 1 s and was killed"),  # a hang (past LEASEHOLD_WORKER_HEALTHCHECK)
], ids=["died", "hung"])
def test_a_worker_that_died_or_hung_is_replaced_and_the_log_says_so(request, sig, healthcheck, said):
    """A worker that died, or did not answer its supervisor for
    LEASEHOLD_WORKER_HEALTHCHECK seconds, is replaced by a new one, which
    serves; the server's log says which worker ended and how at the default
    log level (uvicorn says it only at info, and not how)."""
    if healthcheck:  # a server of its own: a 1-s health check would kill the other tests' stalled workers
        server = request.getfixturevalue("own")
        server.env["LEASEHOLD_WORKER_HEALTHCHECK"] = healthcheck
        server.migrate().start()
        _wait_for_both_workers(server)
    else:
        server = request.getfixturevalue("server")
    victim = _workers(server)[0]
    os.kill(victim, sig)
    _wait_until_replaced(server, victim)
    assert f"Worker process {victim} {said}; worker " in server.output()
    for _ in range(4):  # connections land on both workers, the new one among them
        assert azure_raw.signed("GET", server.url, "/devstoreaccount1?comp=list").status_code == 200
    # The supervisor wakes when a worker ends: with every worker alive again it
    # sleeps between its half-second health checks (a loop woken for good by a
    # dead worker's sentinel would take a whole core).
    before, started = _cpu_seconds(server.proc.pid), time.monotonic()
    time.sleep(1)
    used = _cpu_seconds(server.proc.pid) - before
    assert used < 0.25 * (time.monotonic() - started), used


def _cpu_seconds(pid: int) -> float:
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_worker_that_dies_while_its_health_check_waits_is_replaced_at_once(server):
    """The supervisor pings each worker every half second and waits up to
    LEASEHOLD_WORKER_HEALTHCHECK (60 s here) for the answer. A worker that
    dies during that wait is seen dying (its process sentinel), not waited
    for: it is replaced long before the health check could have run out
    (within the 30 s every wait here has) and logged as died, with its
    signal. How soon is a figure, not a check."""
    victim = _workers(server)[0]
    os.kill(victim, signal.SIGSTOP)  # its next ping goes unanswered: the supervisor waits on it
    deadline = time.monotonic() + 30
    while not _unread_ping(victim):  # the ping is sent, unread: the supervisor is waiting on it
        assert time.monotonic() < deadline, "the supervisor never pinged the stopped worker"
        time.sleep(0.05)
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    _wait_until_replaced(server, victim)  # within 30 s: well before the 60-s health check runs out
    print(f"replaced {time.monotonic() - killed:.2f} s after it died")
    assert f"Worker process {victim} was ended by signal SIGKILL; worker " in server.output()
    assert "did not answer" not in server.output()
    assert azure_raw.signed("GET", server.url, "/devstoreaccount1?comp=list").status_code == 200


def test_workers_are_forked_from_a_supervisor_with_one_thread_and_no_database_open(server):
    """Workers are forked from the supervisor (docs/decisions/0035): safe only
    while the supervisor runs one thread (a lock another thread held at the
    fork stays held in the child for ever) and holds no database connection
    (one connection used by two processes corrupts SQLite's locking). Both
    hold at start and after SIGHUP, which replaces every worker by a new
    fork that serves."""
    database = os.path.realpath(server.env["LEASEHOLD_DATABASE"])

    def supervisor_is_fork_safe() -> None:
        pid = server.proc.pid
        assert os.listdir(f"/proc/{pid}/task") == [str(pid)]
        files = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                files.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except FileNotFoundError:  # closed since it was listed (a replaced worker's pipe)
                continue
        assert not [f for f in files if f.startswith(database)], files

    supervisor_is_fork_safe()
    first = _workers(server)
    for pid in first:  # forked, not a new interpreter (multiprocessing's spawn runs `python -c ...`)
        assert _cmdline(pid) == _cmdline(server.proc.pid)
    os.kill(server.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 30
    while set(_workers(server)) & set(first) or len(_workers(server)) < 2:
        assert time.monotonic() < deadline, "SIGHUP did not replace the workers"
        time.sleep(0.1)
    supervisor_is_fork_safe()
    for _ in range(4):  # both new workers serve, each on a socket of its own
        assert azure_raw.signed("GET", server.url, "/devstoreaccount1?comp=list").status_code == 200
    assert "Traceback" not in server.output()


@pytest.mark.parametrize("workers", [1, 2])
def test_the_server_says_once_that_it_is_ready_at_the_default_log_level(request, tmp_path, workers):
    """Once, at the start: a single process, and a supervisor and its workers
    (the shared server, which says it once in its whole life: the workers the
    other tests replaced do not say it again)."""
    s = Server(tmp_path, workers=1) if workers == 1 else request.getfixturevalue("server")
    try:
        if workers == 1:
            s.env.pop("LEASEHOLD_LOG_LEVEL", None)
            s.migrate().start()
        line = f"Leasehold ready on http://127.0.0.1:{s.port} (admin: /admin/)"
        deadline = time.monotonic() + 30
        while line not in s.output():
            assert time.monotonic() < deadline, s.output()
            time.sleep(0.05)
        assert s.output().count(line) == 1
    finally:
        if workers == 1:
            s.kill()
