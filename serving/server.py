"""The server (``make run``, ``leasehold serve``, ``python -m config.serve`` with settings from
LEASEHOLD_* variables): uvicorn serving serving.asgi on uvloop, with its protocol subclassed in
serving/front.py to keep header name case as Azure does and to bound what a request's head may be
(docs/decisions/0002, 0011), ASGI so that each worker's event loop receives a body whole before a
thread of its lane runs the request (docs/decisions/0003); uvicorn's supervisor forks the workers
from a process that has imported Leasehold once (docs/decisions/0035), restarts a worker that dies,
and SIGTERM stops the workers gracefully."""

from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from multiprocessing import Pipe
from multiprocessing.connection import wait
from typing import Any

from leases import conf
from serving import uvicorn_internals

# Each worker is forked (ForkedWorker), whatever multiprocessing's default start method.
_FORK = multiprocessing.get_context("fork")


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # Metrics of every worker process, added up at scrape (leases/operations/metrics.py):
    # a fresh directory per server start, so no stale counts carry over.
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        import tempfile

        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="leasehold-metrics-")
    settings = conf.or_exit()  # every variable read and checked: a bad one stops the start here
    (host, port), level, workers = settings.bind, settings.log_level, settings.workers
    if settings.tls:
        _check_tls(settings)
    # Refuse an unmigrated, older-schema or read-only database, saying what to run.
    from leases.operations.startup import refuse_unready_database

    refuse_unready_database()
    # On PostgreSQL, one secret key for every instance (an admin login works on all of them).
    from leases.operations import shared_secret

    key = shared_secret.for_workers(settings.secret_key)
    if key:
        os.environ["LEASEHOLD_SECRET_KEY"] = key  # the worker processes' settings read it
        from django.conf import settings as django_settings

        django_settings.SECRET_KEY = key  # and this process's, which serves itself with one worker
    _serve_uvicorn(host, port, workers, level)


def _serve_uvicorn(host: str, port: int, workers: int, level: str) -> None:
    from serving.front import KEEP_ALIVE_SECONDS, LeaseholdHttpProtocol

    settings = conf.current()
    options: dict[str, Any] = dict(
        host=host,
        port=port,
        # Two processes use both cores of a small machine; more only add
        # writer-lock hand-overs and page-cache refreshes between processes.
        # uvicorn's supervisor restarts a worker that dies, and on SIGTERM
        # stops them gracefully (requests in flight are answered).
        workers=workers,
        loop="uvloop",
        http=LeaseholdHttpProtocol,  # httptools + raw header names + header timeout
        ws="none",
        lifespan="on",
        interface="asgi3",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=10,
        # uvicorn's supervisor SIGKILLs a worker that does not answer its
        # ping within this many seconds (5 by default): on a machine loaded
        # far past its cores that killed busy, healthy workers, both at once,
        # cutting every connection they held. Every wait in a worker is
        # bounded (LEASEHOLD_WRITE_WAIT), so only a real hang lasts this long.
        timeout_worker_healthcheck=settings.worker_healthcheck,
        server_header=False,
        # One Date header: uvicorn's is refreshed once a second by its main
        # loop (up to a second stale) and came next to the doors' own; the
        # app's front adds one where a door set none (serving/asgi.py).
        date_header=False,
        # uvicorn's X-Forwarded-* rewriting is off: serving/forwarded.py reads them, from the
        # proxies LEASEHOLD_TRUSTED_PROXIES names only.
        proxy_headers=False,
        log_level=level,
        log_config=_log_config(settings.log_format),
        access_log=settings.access_log,
        # https on the port itself (each worker loads the files as it starts)
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
    )
    config = uvicorn_internals.Config("config.asgi:application", **options)  # sets up uvicorn's logging
    if workers == 1 or not hasattr(socket, "SO_REUSEPORT"):
        Server(config, ready=_ready_line(host, port, level)).run()
        return
    listener = OwnListener.reserve(host, port)
    ready = _ready_line(host, listener.getsockname()[1], level)
    _preload()
    try:
        Supervisor(config, sockets=[listener], ready=ready).run()
    except KeyboardInterrupt:
        pass


def _log_config(log_format: str) -> dict:
    """uvicorn's logging, its own records (uvicorn.error) in Leasehold's one
    line (leases/operations/logformat.py): a traceback only with LEASEHOLD_LOG_TRACEBACKS."""
    config = copy.deepcopy(uvicorn_internals.LOGGING_CONFIG)
    formatter = "JsonFormatter" if log_format == "json" else "OneLineFormatter"
    config["formatters"]["default"] = {"()": f"leases.operations.logformat.{formatter}"}
    return config


def _ready_line(host: str, port: int, level: str):
    """The one line `make run` shows at the default log level once every
    worker serves; quiet when the operator asked for errors only."""
    shown = f"[{host}]" if ":" in host else host
    scheme = "https" if conf.current().tls else "http"
    line = f"Leasehold ready on {scheme}://{shown}:{port} (admin: /admin/)"

    def say() -> None:
        if level in ("debug", "info", "warning"):
            print(line, file=sys.stderr, flush=True)

    return say


def _preload() -> None:
    """What every worker imports (Django set up, its middleware, the URL
    configuration with every view, the serving front), imported once here:
    a forked worker starts with it. The
    application itself is made in each worker (uvicorn imports it there), so
    nothing with threads, locks or connections is shared."""
    import django
    from django.core.handlers.wsgi import WSGIHandler
    from django.urls import get_resolver

    import serving.asgi  # noqa: F401

    django.setup(set_prefix=False)
    WSGIHandler()  # imports every middleware
    get_resolver().url_patterns  # imports the URL configuration and every view


class Server(uvicorn_internals.Server):
    """uvicorn's Server, with the TLS handshake bounded by the header timeout
    (serving/uvicorn_internals.py says how, and why it takes a private way);
    ``ready`` is called once it serves (a single-process server's ready line)."""

    def __init__(self, config, ready=None) -> None:
        super().__init__(config=config)
        self.ready = ready

    async def startup(self, sockets=None) -> None:
        with uvicorn_internals.handshake_bounded(self.config, conf.or_exit().header_timeout):
            await super().startup(sockets)
        if self.started and self.ready is not None:
            self.ready()


class Supervisor(uvicorn_internals.Multiprocess):
    """uvicorn's supervisor, with two changes. A worker's exit is seen at
    once: between health checks the supervisor waits on its workers'
    process sentinels (uvicorn sleeps half a second), and the health
    check waits on each worker's sentinel beside its pipe, so a worker
    that dies while its ping is in flight is replaced at once too, not
    after LEASEHOLD_WORKER_HEALTHCHECK (uvicorn's wait on the pipe alone
    sees no end of file: the supervisor holds the pipe's other end). And a
    replaced worker is a warning saying how it ended (uvicorn says it at
    info level, without how): died with its signal or exit status, or
    hung past the health check and killed. Its workers are ForkedWorkers."""

    def __init__(self, config, sockets, ready) -> None:
        # uvicorn's supervisor makes every worker (at start, in a dead one's place,
        # on SIGHUP and SIGTTIN) with its module's Process: ours forks.
        uvicorn_internals.use_worker(ForkedWorker)
        super().__init__(config, sockets)
        self.ready = ready

    def run(self) -> None:
        """uvicorn's loop, woken by a worker's end as well as every half
        second: a dead worker is replaced at once, not on the next turn."""
        log = logging.getLogger("uvicorn.error")
        log.info("Started parent process [%s]", os.getpid())
        self.init_processes()
        while not self.should_exit.is_set():
            wait([p.process.sentinel for p in self.processes], timeout=0.5)
            self.handle_signals()
            self.keep_subprocess_alive()
        self.terminate_all()
        self.join_all()
        log.info("Stopping parent process [%s]", os.getpid())

    def init_processes(self) -> None:
        super().init_processes()
        timeout = self.config.timeout_worker_healthcheck
        if all(p.wait_until_ready(timeout, self.should_exit) for p in self.processes):
            self.ready()

    def keep_subprocess_alive(self) -> None:
        if self.should_exit.is_set():
            return
        timeout = self.config.timeout_worker_healthcheck
        waiting: dict[uvicorn_internals.Process, float] = {}
        for process in list(self.processes):
            if not process.process.is_alive():
                self._replace(process, hung=False)
                continue
            try:
                process.parent_conn.send(b"ping")
            except OSError:
                self._replace(process, hung=False)
                continue
            waiting[process] = time.monotonic() + timeout
        while waiting and not self.should_exit.is_set():
            handles = [h for p in waiting for h in (p.parent_conn, p.process.sentinel)]
            ready = wait(handles, timeout=0.5)
            for process in list(waiting):
                if process.process.sentinel in ready or not process.process.is_alive():
                    del waiting[process]
                    self._replace(process, hung=False)
                elif process.parent_conn in ready:
                    del waiting[process]
                    try:
                        process.parent_conn.recv()
                    except (OSError, EOFError):
                        self._replace(process, hung=False)
                elif time.monotonic() >= waiting[process]:
                    del waiting[process]
                    self._replace(process, hung=True)
            self.handle_signals()  # a SIGTERM is not kept waiting behind a hung worker

    def _replace(self, old: uvicorn_internals.Process, *, hung: bool) -> None:
        old.kill()
        old.join()
        log = logging.getLogger("uvicorn.error")
        if old.exitcode == uvicorn_internals.STARTUP_FAILURE and not hung:  # would fail the same way again
            log.error("Worker process %s failed to start; stopping.", old.pid)
            self.should_exit.set()
            return
        if self.should_exit.is_set():
            return
        new = ForkedWorker(self.config, self.sockets)
        new.start()
        self.processes[self.processes.index(old)] = new
        how = (f"did not answer for {self.config.timeout_worker_healthcheck} s and was killed" if hung
               else _how_it_ended(old.exitcode))
        log.warning("Worker process %s %s; worker %s started in its place.", old.pid, how, new.pid)


class ForkedWorker(uvicorn_internals.Process):
    """A worker forked from the supervisor, instead of uvicorn's spawned
    interpreter that imports everything again (docs/decisions/0035). No
    database connection crosses the fork (the
    supervisor's are closed first), the supervisor's signal handlers are
    undone in the child, and the child listens on a socket of its own
    (OwnListener)."""

    def __init__(self, config, sockets) -> None:
        self.config = config
        # Made here, before the fork, not lazily by uvicorn's property: the child's health-check
        # thread and its main thread each read that property, and two servers made at once left
        # the checked one never started (a SIGHUP's new worker never ready, the old one kept).
        self._server = Server(config)
        self.parent_conn, self.child_conn = Pipe()
        self.process = _FORK.Process(  # type: ignore[assignment]  # uvicorn's type says spawn
            target=_worker_main, args=(self.target, sockets, tuple(uvicorn_internals.SIGNALS)))

    def start(self) -> None:
        from django.db import connections

        connections.close_all()
        super().start()


def _worker_main(target, sockets, signals) -> None:
    """In a forked worker: uvicorn's server on its own sockets."""
    for sig in signals:
        signal.signal(sig, signal.SIG_DFL)
    own = [_worker_listener(*s.address) if isinstance(s, OwnListener) else s for s in sockets]
    try:
        target(sockets=own)
    except KeyboardInterrupt:
        pass


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was ended by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            pass
    return f"exited with status {exitcode}"


class OwnListener(socket.socket):
    """Each worker process listens on a socket of its own, all bound to the
    address with SO_REUSEPORT, so that the kernel spreads new connections
    over the workers evenly (by a hash of each connection's addresses).

    Why: uvicorn shares one listening socket between its workers, and the
    worker whose event loop wakes first accepts every connection waiting.
    Clients that connect together (an SDK's pool, a fleet of lease holders
    restarting) then mostly land on one worker, whose lease thread then sets
    the pace for all of them (docs/decisions/0003 has the figures).

    The supervisor keeps this socket, bound and not listening: the address
    stays taken (another program, or a second Leasehold, cannot bind it:
    ``reserve`` binds without SO_REUSEPORT first to find out). uvicorn hands
    it to each worker it starts (restarts too) by pickling it; unpickled in
    the worker, it is that worker's own new listening socket."""

    address: tuple[str, int]

    @classmethod
    def reserve(cls, host: str, port: int) -> "OwnListener":
        with socket.socket(_family(host)) as probe:  # refused if anything else holds the address
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                raise SystemExit(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        sock = _reuseport_socket(host, port, kind=cls)
        assert isinstance(sock, cls)
        sock.address = (host, port)
        return sock

    def __reduce__(self):
        return _worker_listener, self.address


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _reuseport_socket(host: str, port: int, kind=socket.socket) -> socket.socket:
    sock = kind(_family(host))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _worker_listener(host: str, port: int) -> socket.socket:
    """In a worker: its own socket on the supervisor's address (uvicorn listens on it)."""
    return _reuseport_socket(host, port)


def _check_tls(settings: conf.Settings) -> None:
    """The certificate and key load, and belong together: else one line at
    start, not a failure in every worker."""
    import ssl

    assert settings.tls_cert is not None and settings.tls_key is not None  # settings.tls
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(settings.tls_cert, settings.tls_key)
    except (ssl.SSLError, OSError) as exc:
        raise SystemExit(f"Leasehold will not start: LEASEHOLD_TLS_CERT={settings.tls_cert} with "
                         f"LEASEHOLD_TLS_KEY={settings.tls_key}: {exc}") from None


if __name__ == "__main__":
    main()
