"""Fixtures and helpers shared by the client-helper tests (leasehold_client);
this module holds no tests. Test modules take the fixtures (``__all__``) with
one ``import *`` and import the helpers they call by name.

Two backends: the live in-process Leasehold server, whose clock is frozen and
moved together with the client's ManualClock (no sleeping), and Azurite
started from bench/node_modules (``make azurite``), where time is real and
waits are kept short."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from azure.core.exceptions import ServiceRequestError
from azure.storage.blob import BlobClient, BlobServiceClient

from leasehold_client.clock import ManualClock, SystemClock
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests.conftest import CONNECTION, free_port

__all__ = ["mclock", "leasehold", "azurite_url", "azurite", "backend"]

REPO = Path(__file__).resolve().parents[2]
AZURITE_MAIN = REPO / "bench" / "node_modules" / "azurite" / "dist" / "src" / "blob" / "main.js"


@dataclass
class Backend:
    """A server and the clock the client helpers run on against it.

    advance(seconds): on Leasehold moves the frozen server clock and the
    client's ManualClock together, then lets the woken helper threads act;
    on Azurite sleeps (real time: keep it short)."""

    name: str
    connection_string: str
    clock: SystemClock
    advance: Callable[[float], None]

    @property
    def fake_time(self) -> bool:
        return isinstance(self.clock, ManualClock)

    def service(self, **kwargs) -> BlobServiceClient:
        return BlobServiceClient.from_connection_string(self.connection_string, retry_total=0, **kwargs)

    def blob(self, container: str, blob: str, **kwargs) -> BlobClient:
        """A client of its own (as another instance would have)."""
        return BlobClient.from_connection_string(self.connection_string, container, blob, retry_total=0, **kwargs)

    def start(self, target, *args) -> threading.Thread:
        """A thread (an instance of a service), counted by the clock from its start."""
        thread = self.clock.enlist(threading.Thread(target=target, args=args, daemon=True))
        thread.start()
        return thread

    def names(self) -> tuple[str, str]:
        return f"c{uuid.uuid4().hex[:12]}", "locks/job.lock"

    def run_until(self, done: Callable[[], bool], *, step: float = 0.5, limit: float = 120.0) -> float:
        """Advance time by ``step`` until ``done()``; the time it took (fails past ``limit``)."""
        start = self.clock.monotonic()
        while not done():
            if self.clock.monotonic() - start > limit:
                # Where every thread stands: which helper did not get there.
                stacks = "\n".join("".join(traceback.format_stack(f)[-6:]) for f in sys._current_frames().values())
                raise AssertionError(f"not done within {limit} s of {self.name} time\n{stacks}")
            self.advance(step)
        return self.clock.monotonic() - start


@pytest.fixture
def mclock(clock):
    """A ManualClock moving the frozen server clock (leases.clock) in step."""
    clock.freeze()
    return ManualClock(on_advance=clock.advance)


@pytest.fixture
def leasehold(azure_server, mclock) -> Backend:
    def advance(seconds: float) -> None:
        mclock.advance(seconds)
        mclock.settle()

    return Backend("leasehold", CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=azure_server), mclock, advance)


# One Azurite for the whole session: every test module that star-imports the
# fixtures gets its own copy of the fixture, so the process is kept here.
_AZURITE: dict = {}


@pytest.fixture(scope="session")
def azurite_url(tmp_path_factory):
    """Azurite's blob service from bench/node_modules, started once per session."""
    if "url" in _AZURITE:
        yield _AZURITE["url"]
        return
    node = shutil.which("node")
    if node is None or not AZURITE_MAIN.exists():
        pytest.fail("Azurite is not installed: run `make azurite` (npm install in bench/)")
    port = free_port()
    location = tmp_path_factory.mktemp("azurite")
    proc = subprocess.Popen(
        [node, str(AZURITE_MAIN), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(location),
         "--silent", "--loose", "--skipApiVersionCheck", "--disableTelemetry"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            pytest.fail(f"Azurite exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                pytest.fail("Azurite did not listen within 60 s")
            time.sleep(0.1)
    _AZURITE["url"] = f"http://127.0.0.1:{port}"
    try:
        yield _AZURITE["url"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
        _AZURITE.clear()


@pytest.fixture
def azurite(azurite_url) -> Backend:
    return Backend("azurite", CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=azurite_url), SystemClock(), time.sleep)


@pytest.fixture(params=["leasehold", "azurite"])
def backend(request, transactional_db) -> Backend:
    # transactional_db asked statically: pytest-django sets the test database
    # up only for tests that name a database fixture before they run.
    return request.getfixturevalue(request.param)


class Partition:
    """A network partition for one client: while ``blocked``, every request
    fails before it leaves (the holder's process lives, its renewals and
    everything else stop reaching the server). Give it to the client as
    ``raw_request_hook=`` (the storage SDK takes no extra policies)."""

    def __init__(self):
        self.blocked = False
        self.refused = 0

    def __call__(self, request):
        if self.blocked:
            self.refused += 1
            raise ServiceRequestError("partitioned by the test")
