"""The uvicorn internals serving/uvicorn_internals.py names, checked against the installed uvicorn:
an upgrade that changes one fails here, by name, not as a TLS handshake that waits 60 s again."""

from __future__ import annotations

import asyncio
import inspect
import types

import uvicorn
from uvicorn.supervisors import multiprocess

from serving import uvicorn_internals


def test_startup_makes_its_listeners_with_create_server_and_no_handshake_timeout():
    source = inspect.getsource(uvicorn.Server.startup)
    assert "loop.create_server(" in source and "ssl=config.ssl" in source
    # uvicorn passing a handshake timeout of its own (or offering one in its
    # Config) would make the wrapping unneeded: use uvicorn's instead.
    assert "ssl_handshake_timeout" not in source
    assert "ssl_handshake_timeout" not in inspect.signature(uvicorn.Config).parameters


def test_a_worker_process_uses_the_server_it_was_given_in_the_server_property():
    assert isinstance(inspect.getattr_static(multiprocess.Process, "server"), property)
    assert "self._server" in inspect.getsource(multiprocess.Process.__init__)
    getter = inspect.getsource(inspect.getattr_static(multiprocess.Process, "server").fget)
    assert "if self._server is None:" in getter and "return self._server" in getter


def test_handshake_bounded_passes_the_timeout_to_create_server_for_its_time_only():
    seen = []

    async def run():
        loop = asyncio.get_running_loop()
        original = loop.create_server
        with uvicorn_internals.handshake_bounded(types.SimpleNamespace(ssl=object()), 2.5):
            seen.append(getattr(loop.create_server, "keywords"))
        seen.append(loop.create_server == original)
        with uvicorn_internals.handshake_bounded(types.SimpleNamespace(ssl=None), 2.5):
            seen.append(loop.create_server == original)  # plain http: asyncio refuses the argument

    asyncio.run(run())
    assert seen == [{"ssl_handshake_timeout": 2.5}, True, True]
