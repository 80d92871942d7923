"""Fixtures of the client-helper tests (tests/client/): two backends, the
live in-process Leasehold server on a frozen clock moved together with the
client's ManualClock (no sleeping), and Azurite from bench/node_modules
(``make azurite``) on real time. Plain helpers are in helpers.py."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

from leasehold_client.clock import ManualClock, SystemClock
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests.conftest import CONNECTION, free_port

from .helpers import AZURITE_MAIN, Backend


@pytest.fixture
def mclock(clock):
    """A ManualClock moving the frozen server clock (leases.domain.clock) in step."""
    clock.freeze()
    return ManualClock(on_advance=clock.advance)


@pytest.fixture
def leasehold(azure_server, mclock) -> Backend:
    def advance(seconds: float) -> None:
        mclock.advance(seconds)
        mclock.settle()

    return Backend("leasehold", CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=azure_server), mclock, advance)


@pytest.fixture(scope="session")
def azurite_url(tmp_path_factory):
    """Azurite's blob service from bench/node_modules, started once per session
    (per xdist worker)."""
    node = shutil.which("node")
    if node is None or not AZURITE_MAIN.exists():
        pytest.fail("Azurite is not installed: run `make azurite` (npm install in bench/)")
    port = free_port()
    location = tmp_path_factory.mktemp("azurite")
    proc = subprocess.Popen(
        [node, str(AZURITE_MAIN), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(location),
         "--silent", "--loose", "--skipApiVersionCheck", "--disableTelemetry"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    assert proc.stderr is not None  # spawned with a pipe
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
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()


@pytest.fixture
def azurite(azurite_url) -> Backend:
    return Backend("azurite", CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=azurite_url), SystemClock(), time.sleep)


@pytest.fixture(params=["leasehold", "azurite"])
def backend(request, transactional_db) -> Backend:
    # transactional_db asked statically: pytest-django sets the test database
    # up only for tests that name a database fixture before they run.
    return request.getfixturevalue(request.param)
