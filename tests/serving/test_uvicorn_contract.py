"""The uvicorn and asyncio internals serving/uvicorn_internals.py names, checked against the installed
uvicorn and Python: an upgrade that changes one fails here, by name, not as a TLS handshake that waits
60 s again or a supervisor that starts spawned workers. And the fence holds: uvicorn is imported
nowhere else, and no private name of uvicorn's or asyncio's is used that the fence does not list."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import inspect
import re
import threading
import types
from functools import cache
from pathlib import Path

import uvicorn
from uvicorn.supervisors import multiprocess

from serving import uvicorn_internals as fence

REPO = Path(__file__).resolve().parents[2]
SERVER_CODE = ("leases", "engines", "serving", "config")
FENCE = "serving/uvicorn_internals.py"


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
        with fence.handshake_bounded(types.SimpleNamespace(ssl=object()), 2.5):
            seen.append(getattr(loop.create_server, "keywords"))
        seen.append(loop.create_server == original)
        with fence.handshake_bounded(types.SimpleNamespace(ssl=None), 2.5):
            seen.append(loop.create_server == original)  # plain http: asyncio refuses the argument

    asyncio.run(run())
    assert seen == [{"ssl_handshake_timeout": 2.5}, True, True]


def test_every_name_the_fence_lists_is_still_uvicorns():
    missing = []
    for cls, names in fence.USED.items():
        source = inspect.getsource(cls)
        missing += [f"{cls.__name__}.{name}" for name in names
                    if not hasattr(cls, name) and not re.search(rf"\bself\.{name}\b", source)]
    assert not missing, f"no longer in the installed uvicorn: {missing}"


def test_the_copied_data_received_is_uvicorns_as_it_was_copied():
    source = inspect.getsource(fence.HttpToolsProtocol.data_received)
    assert hashlib.sha256(source.encode()).hexdigest() == fence.DATA_RECEIVED_SHA256, (
        "uvicorn's HttpToolsProtocol.data_received changed: bring serving/front.py's copy up to it, then "
        "set DATA_RECEIVED_SHA256 in serving/uvicorn_internals.py")


def test_the_signatures_the_server_relies_on():
    assert list(inspect.signature(fence.HttpToolsProtocol._start_asgi_task).parameters) == ["self", "cycle", "app"]
    for cls in (fence.Process, fence.Multiprocess):  # ForkedWorker and Supervisor are made so
        assert list(inspect.signature(cls.__init__).parameters) == ["self", "config", "sockets"]
    assert list(inspect.signature(fence.Process.wait_until_ready).parameters) == ["self", "timeout", "should_exit"]


def test_the_supervisor_makes_every_worker_with_its_modules_process():
    for name in fence.WORKER_MAKERS:
        source = inspect.getsource(getattr(fence.Multiprocess, name))
        assert "Process(self.config, self.sockets)" in source, name
    original = multiprocess.Process
    try:
        fence.use_worker(dict)  # type: ignore[arg-type]
        assert multiprocess.Process is dict
    finally:
        multiprocess.Process = original  # type: ignore[misc]


def test_asyncios_private_functions_do_what_the_server_relies_on():
    from leases.storage import queue_intake  # noqa: F401  (the module that lends the loop exists)

    assert set(fence.ASYNCIO_USED_IN) == {"_set_running_loop"}
    seen = []

    async def run():
        loop = asyncio.get_running_loop()
        seen.append(asyncio.events._get_running_loop() is loop)
        asyncio._set_running_loop(None)  # the loop's thread lent to one synchronous call
        try:
            seen.append(asyncio.events._get_running_loop() is None)
        finally:
            asyncio._set_running_loop(loop)
        seen.append(asyncio.get_running_loop() is loop)

    asyncio.run(run())
    off_loop = threading.Thread(target=lambda: seen.append(asyncio.events._get_running_loop() is None))
    off_loop.start()
    off_loop.join()
    assert seen == [True, True, True, True]


# ------------------------------------------------------------------ the fence holds

@cache
def uvicorn_private_names() -> frozenset[str]:
    pattern = re.compile(r"(?:\.|\bdef )(_[A-Za-z]\w*)")
    return frozenset(name for path in Path(uvicorn.__file__).parent.rglob("*.py")
                     for name in pattern.findall(path.read_text(encoding="utf-8")))


def fence_breaches(root: Path) -> list[str]:
    """Where the server's code, outside the fence, imports uvicorn, uses one of uvicorn's private
    names the fence does not list, or calls asyncio's private functions in a module the fence
    does not name."""
    listed = {name for names in fence.USED.values() for name in names}
    found = []
    for path in sorted(p for top in SERVER_CODE for p in (root / top).rglob("*.py")):
        where = path.relative_to(root).as_posix()
        if where == FENCE:
            continue
        text = path.read_text(encoding="utf-8")
        for name in re.findall(r"\basyncio\.(?:events\.)?(_[A-Za-z]\w*)", text):
            if where not in fence.ASYNCIO_USED_IN.get(name, ()):
                found.append(f"{where}: asyncio's {name}")
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [f"{where}:{node.lineno}: imports {a.name}" for a in node.names
                          if a.name.split(".")[0] == "uvicorn"]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "uvicorn":
                found.append(f"{where}:{node.lineno}: imports from {node.module}")
            if where.startswith("serving/"):
                name = node.attr if isinstance(node, ast.Attribute) else (
                    node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else "")
                if (name.startswith("_") and not name.startswith("__") and name in uvicorn_private_names()
                        and name not in listed):
                    found.append(f"{where}:{getattr(node, 'lineno', 0)}: uvicorn's {name}")
    return found


def test_uvicorn_and_asyncio_internals_are_used_only_through_the_fence():
    found = fence_breaches(REPO)
    assert not found, (f"list it in {FENCE} (which the tests above check against the installed uvicorn), "
                       f"or use public API:\n" + "\n".join(f"  {f}" for f in found))


def test_a_breach_of_the_fence_is_found(tmp_path):
    (tmp_path / "serving").mkdir()
    (tmp_path / "serving" / "front.py").write_text(
        "import asyncio\nfrom uvicorn.protocols.http import h11_impl\n\n\nclass P:\n"
        "    def _unset_keepalive_if_required(self):\n        self.line = h11_impl._get_status_line(200)\n"
        "        return asyncio._get_running_loop()\n")
    assert fence_breaches(tmp_path) == [
        "serving/front.py: asyncio's _get_running_loop",
        "serving/front.py:2: imports from uvicorn.protocols.http",
        "serving/front.py:7: uvicorn's _get_status_line"]
