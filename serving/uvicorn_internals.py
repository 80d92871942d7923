"""Every name of uvicorn and asyncio the server relies on beyond their documented API, in one place
(as leases/storage/django_internals.py for Django's): uvicorn's modules are imported here only, each
class's undocumented attributes and methods the server reads or overrides are listed in USED, the
one method copied is pinned by its source's digest, and asyncio's private functions are listed with
the modules that call them. tests/serving/test_uvicorn_contract.py checks all of it against the
installed uvicorn and Python, so an upgrade that changes one fails there, by name (hence the pin
below uvicorn's next minor release in pyproject.toml)."""

from __future__ import annotations

import asyncio
import contextlib
import functools

# The documented API: uvicorn.Config, uvicorn.Server, the http= protocol class, LOGGING_CONFIG.
from uvicorn import Config, Server
from uvicorn.config import LOGGING_CONFIG, STARTUP_FAILURE

# The protocol serving/front.py subclasses (uvicorn's http="httptools" class).
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# The supervisor serving/server.py subclasses, its worker class and the signals it relays.
from uvicorn.supervisors import Multiprocess, multiprocess
from uvicorn.supervisors.multiprocess import SIGNALS, Process

# Per class, the undocumented attributes (set in uvicorn's methods) and methods the server reads,
# calls or overrides.
USED: dict[type, tuple[str, ...]] = {
    # serving/front.py: data_received is uvicorn's, copied with the size limits added (its source is
    # pinned below); _start_asgi_task is overridden to know the request being answered.
    HttpToolsProtocol: (
        "data_received", "_unset_keepalive_if_required", "parser", "_should_upgrade",
        "handle_websocket_upgrade", "_unsupported_upgrade_warning", "send_400_response",
        "_start_asgi_task", "shutdown", "connection_made", "connection_lost", "on_message_begin",
        "on_url", "on_header", "on_headers_complete", "on_message_complete",
        "transport", "loop", "cycle", "pipeline", "scope", "url",
    ),
    # serving/server.py's Supervisor: uvicorn's run loop rewritten, its health check replaced.
    Multiprocess: (
        "init_processes", "keep_subprocess_alive", "handle_signals", "terminate_all", "join_all",
        "should_exit", "processes", "config", "sockets",
    ),
    # serving/server.py's ForkedWorker: made with (config, sockets), its server set before the fork.
    Process: (
        "_server", "server", "target", "parent_conn", "child_conn", "process", "start",
        "wait_until_ready", "kill", "join", "exitcode", "pid",
    ),
}

# sha256 of inspect.getsource(HttpToolsProtocol.data_received), the method serving/front.py copies:
# a new uvicorn that changes it fails the contract test, and the copy is brought up to it.
DATA_RECEIVED_SHA256 = "010a7ae59a5d3b1a5e7326ce246878568629d126a076d8af5ba10cab040fae43"

# Where each of uvicorn's supervisor methods makes a worker, it calls its module's global Process:
# setting that global (use_worker) makes every worker one of ours (at start, in a dead one's place,
# on SIGHUP and SIGTTIN).
WORKER_MAKERS = ("init_processes", "restart_all", "keep_subprocess_alive", "handle_ttin")

# asyncio's private functions, and the only modules that call them (below serving's layer, they
# cannot import this one): asyncio._set_running_loop marks the loop's thread as running none while
# it lends itself to one synchronous write (the write queue's intake).
ASYNCIO_USED_IN = {
    "_set_running_loop": ("leases/storage/queue_intake.py",),
}


def use_worker(worker: type[Process]) -> None:
    """Every worker uvicorn's supervisor makes from now on is a ``worker``."""
    multiprocess.Process = worker  # type: ignore[misc]


@contextlib.contextmanager
def handshake_bounded(config, seconds: float):
    """While uvicorn's startup runs: its TLS listeners (``config.ssl`` set) drop a connection whose
    handshake is not done in ``seconds``. uvicorn.Server.startup makes its listeners with
    loop.create_server(..., ssl=config.ssl) and no ssl_handshake_timeout, and uvicorn.Config has no
    setting for it (asyncio's and uvloop's default is 60 s): one is passed, for the time of the
    startup, through the running loop's create_server (an attribute set on the loop instance)."""
    if config.ssl is None:
        yield
        return
    loop = asyncio.get_running_loop()
    loop.create_server = functools.partial(  # type: ignore[method-assign]
        loop.create_server, ssl_handshake_timeout=seconds)
    try:
        yield
    finally:
        del loop.create_server


__all__ = ["Config", "HttpToolsProtocol", "LOGGING_CONFIG", "Multiprocess", "Process", "SIGNALS",
           "STARTUP_FAILURE", "Server", "handshake_bounded", "use_worker"]
