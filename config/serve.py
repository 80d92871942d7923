"""The production server (`make run`): granian serving config.wsgi.

    python -m config.serve        # settings from LEASEHOLD_* variables

granian was chosen by measurement (bench/README.md): it parses HTTP and
keeps connections alive in Rust, so Python spends its time on requests, not
on sockets; on a 2-core machine it answered 1.4x (one client) to 1.6x (16
clients) the lease requests of gunicorn's gthread workers with the same code.

Workers and threads were measured too (bench/run.py, paired rounds): two
worker processes of one Python thread each beat every threaded setting, by
about 15% at 16 clients (2x1: 783 req/s, 2x2: 682, 2x4: 664, 2x8: ~620),
because threads of one process contend for the GIL while granian already
holds the idle connections. The cost: a worker runs one request at a time,
so a slow request (a 64 MiB upload) delays the others sent to that worker;
raise LEASEHOLD_THREADS for such workloads (a worker's threads then share
commits: group commit, leases/sqlite_backend). All workers share one
database safely (the writer lock).
"""

from __future__ import annotations

import os


def _bind() -> tuple[str, int]:
    host, _, port = os.environ.get("LEASEHOLD_BIND", "127.0.0.1:10000").rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit("LEASEHOLD_BIND must be HOST:PORT, e.g. 127.0.0.1:10000")
    return host.strip("[]"), int(port)


def main() -> None:
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings
    from granian.log import LogLevels

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # granian starts every request's WSGI environ as a copy of the process
    # environment, so an HTTP_* variable (HTTP_PROXY, ...) would read like a
    # request header; the server makes no outgoing HTTP requests that need them.
    for name in [n for n in os.environ if n.upper().startswith("HTTP_")]:
        del os.environ[name]
    host, port = _bind()
    # Refuse an unmigrated, older-schema or read-only database, saying what to run.
    from leases.startup import refuse_unready_database

    refuse_unready_database()
    level = os.environ.get("LEASEHOLD_LOG_LEVEL", "warning").lower()
    if level not in ("critical", "error", "warning", "info", "debug"):
        raise SystemExit("LEASEHOLD_LOG_LEVEL must be one of critical, error, warning, info, debug")
    Granian(
        "config.wsgi:application",
        address=host,
        port=port,
        interface=Interfaces.WSGI,
        # Two processes use both cores of a small machine; more only add
        # writer-lock hand-overs and page-cache refreshes between processes.
        workers=int(os.environ.get("LEASEHOLD_WORKERS", "2")),
        blocking_threads=int(os.environ.get("LEASEHOLD_THREADS", "1")),
        runtime_threads=1,
        http=HTTPModes.http1,
        websockets=False,
        http1_settings=HTTP1Settings(keep_alive=True),
        log_level=LogLevels(level),
        log_access=bool(os.environ.get("LEASEHOLD_ACCESS_LOG")),
        respawn_failed_workers=True,
        workers_kill_timeout=10,
    ).serve()


if __name__ == "__main__":
    main()
