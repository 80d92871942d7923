"""Block uploads through the production server (serving.server, real worker
processes, a real SQLite file): a committed block list and an acknowledged
block survive a power cut (SIGKILL of the whole server); an upload in 4 MiB
blocks does not grow the worker (its bytes stream to chunk storage)."""

from __future__ import annotations

import base64
import os
import threading
import time

import pytest
from azure.storage.blob import BlobBlock, BlobServiceClient

from tests import azure_raw
from tests.azure.test_azure_blocks import MIB, Generated, digest_of, downloaded_digest
from tests.processes.test_processes import Server

pytestmark = pytest.mark.processes

CONNECTION = ("DefaultEndpointsProtocol=http;AccountName={a};AccountKey={k};BlobEndpoint={url}/{a};")


def _sdk(server) -> BlobServiceClient:
    return BlobServiceClient.from_connection_string(
        CONNECTION.format(a=azure_raw.DEV_ACCOUNT, k=azure_raw.DEV_KEY, url=server.url), retry_total=0)


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path, workers=1).migrate().start()
    yield s
    s.kill()


def bid(n: int) -> str:
    return base64.b64encode(f"{n:08d}".encode()).decode()


def test_a_committed_block_list_and_an_acknowledged_block_survive_a_power_cut(server):
    box = _sdk(server).create_container("power")
    blob = box.get_blob_client("b")
    blob.upload_blob(b"x")
    lease = blob.acquire_lease(lease_duration=-1)
    blob.stage_block(bid(1), b"a" * (MIB + 3), lease=lease)
    blob.stage_block(bid(2), b"b" * 5, lease=lease)
    blob.commit_block_list([BlobBlock(bid(1)), BlobBlock(bid(2))], lease=lease)
    blob.stage_block(bid(3), b"c" * (2 * MIB), lease=lease)  # acknowledged, not committed
    server.kill()  # straight after the 201s reached us
    server.start()
    blob = _sdk(server).get_container_client("power").get_blob_client("b")
    assert blob.download_blob().readall() == b"a" * (MIB + 3) + b"b" * 5
    committed, uncommitted = blob.get_block_list("all")
    assert [b.id for b in committed] == [bid(1), bid(2)] and [b.id for b in uncommitted] == [bid(3)]
    props = blob.get_blob_properties()
    assert props.lease.state == "leased"
    blob.commit_block_list([BlobBlock(bid(1)), BlobBlock(bid(3))], lease=lease.id)
    assert blob.download_blob().readall() == b"a" * (MIB + 3) + b"c" * (2 * MIB)


def _worker_pids(server) -> list[int]:
    """The server's worker processes (the master's children; with one
    worker the server is one process)."""
    children = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == server.proc.pid:
                children.append(int(pid))
    return children or [server.proc.pid]


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _upload_keeps_memory_flat(server, size: int) -> tuple[int, int]:
    """Upload ``size`` bytes with the SDK's defaults (4 MiB blocks) while
    sampling the workers' RSS; (RSS before, the highest RSS seen during)."""
    box = _sdk(server).create_container("memory")
    box.upload_blob("warm", Generated(32 * MIB, seed=b"w"))  # a first upload: buffers, connections, imports
    pids = _worker_pids(server)
    assert pids
    before = sum(_rss(p) for p in pids)
    peak, done = [before], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], sum(_rss(p) for p in pids))
            time.sleep(0.05)  # a sampling interval, not a wait for an outcome

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        blob = box.get_blob_client("big")
        blob.upload_blob(Generated(size, seed=b"m"))  # a stream of unknown length: all in 4 MiB blocks
    finally:
        done.set()
        sampler.join()
    assert downloaded_digest(blob) == (digest_of(size, b"m"), size)
    return before, peak[0]


def test_a_block_upload_does_not_grow_the_worker(server):
    before, peak = _upload_keeps_memory_flat(server, 96 * MIB)
    assert peak - before < 48 * MIB, f"RSS grew by {(peak - before) / MIB:.1f} MiB during a 96 MiB upload"


@pytest.mark.big  # make test-big
def test_a_1_gib_block_upload_does_not_grow_the_worker(server):
    before, peak = _upload_keeps_memory_flat(server, 1024 * MIB)
    assert peak - before < 48 * MIB, f"RSS grew by {(peak - before) / MIB:.1f} MiB during a 1 GiB upload"
