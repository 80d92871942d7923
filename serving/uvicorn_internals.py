"""What the server relies on in uvicorn beyond its documented options, in one place (as
leases/storage/django_internals.py for Django's): tests/serving/test_uvicorn_contract.py checks each
against the installed uvicorn, so an upgrade that changes one fails there, by name."""

# - uvicorn.Server.startup makes its listeners with loop.create_server(..., ssl=config.ssl) and no
#   ssl_handshake_timeout, and uvicorn.Config has no setting for it: a TLS handshake could take
#   asyncio's (and uvloop's) default 60 s where headers get LEASEHOLD_HEADER_TIMEOUT.
#   handshake_bounded passes one, for the time of the startup, through the running loop's
#   create_server (an attribute set on the loop instance, removed after).
# - uvicorn.supervisors.multiprocess.Process.server: the property that answers a worker's
#   uvicorn.Server (Process._server), making one only if there is none; the forked worker
#   (serving/server.py) sets Process._server to its own server class's before the fork.

from __future__ import annotations

import asyncio
import contextlib
import functools


@contextlib.contextmanager
def handshake_bounded(config, seconds: float):
    """While uvicorn's startup runs: its TLS listeners (``config.ssl``
    set) drop a connection whose handshake is not done in ``seconds``."""
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
