"""Uploads in blocks, Put Block / Put Block List / Get Block List, Copy Blob
and Append Block around a leased blob, by the official JavaScript SDK
(@azure/storage-blob, ``make azurite`` installs it into bench/node_modules),
as test_azure_blocks.py and test_azure_append.py drive them with the Python
SDK, and with the same expected codes for each lease cell. One node process
per test runs every case against the live server (tests/azure/blocks_js_sdk.cjs)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from leases.models import BlobContent, LeaseEvent

from tests.azure.test_azure_blocks import MIB, WRITE_CELLS, _setup

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("blocks_js_sdk.cjs")
JS_SDK = REPO / "bench" / "node_modules" / "@azure" / "storage-blob"


def run_node(azure_server: str, cases: list[dict], clock=None, advance: float = 0) -> dict[str, dict]:
    """Run ``cases``; once node has set them all up, move the server's clock by ``advance`` seconds."""
    node = shutil.which("node")
    if node is None or not JS_SDK.exists():
        pytest.fail("the JavaScript SDK is not installed: run `make azurite` (npm install in bench/)")
    payload = json.dumps({"url": azure_server, "account": DEV_ACCOUNT, "key": DEV_KEY, "cases": cases})
    with subprocess.Popen([node, str(SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(payload + "\n")
            proc.stdin.flush()
            ready = proc.stdout.readline()
            if ready.strip() != '{"ready":true}':
                proc.kill()
                pytest.fail(f"node did not set the cases up: {ready!r} {proc.communicate(timeout=30)[1][-3000:]}")
            if advance:
                clock.advance(advance)
            out, err = proc.communicate("go\n", timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err[-3000:]
    return {line["id"]: line for line in map(json.loads, out.splitlines())}


def content_digest(seed: str, size: int) -> str:
    """SHA-256 of the content blocks_js_sdk.cjs uploads: SHA-256 of "seed:0", "seed:1", ... end to end."""
    data = b"".join(hashlib.sha256(f"{seed}:{i}".encode()).digest() for i in range((size + 31) // 32))
    return hashlib.sha256(data[:size]).hexdigest()


def block_name(n: int) -> str:
    return base64.b64encode(f"{n:08d}".encode()).decode()


# ------------------------------------------------------------------ uploads as the SDK makes them

# uploadData above maxSingleShotSize (1 MiB here, as 256 MiB by default) goes in blockSize blocks: 4 of them;
# uploadStream of a stream of unknown length always goes in blocks of its buffer size: 3 of them.
SIZES = {"data": (3 * MIB + 12_345, 4), "stream": (2 * MIB + MIB // 2, 3)}


def test_uploads_in_blocks_onto_unleased_and_leased_blobs_and_block_lists(azure_server):
    cases: list[dict[str, Any]] = [{"id": f"{method}-{lease}", "kind": "upload", "method": method, "lease": lease,
              "size": SIZES[method][0], "seed": f"{method}-{lease}", "container": f"jsup-{method}-{lease}"}
             for method in SIZES for lease in ("none", "right", "missing", "wrong")]
    cases.append({"id": "by-hand", "kind": "by-hand", "container": "jsup-by-hand"})
    results = run_node(azure_server, cases)
    assert len(results) == len(cases)
    for case in cases[:-1]:
        got, (size, blocks) = results[case["id"]], SIZES[case["method"]]
        lease = case["lease"]
        if lease in ("none", "right"):
            assert got["ok"], (case["id"], got)
            assert (got["sha256"], got["size"]) == (content_digest(case["seed"], size), size), case["id"]
            # in blocks: a Put Blob would have left no committed block
            assert len(got["committed"]) == blocks and sum(s for _, s in got["committed"]) == size, case["id"]
            assert got["uncommitted"] == [], case["id"]
            # a write that kept the lease
            assert got["leaseState"] == ("leased" if lease == "right" else "available"), case["id"]
        else:
            code = "LeaseIdMissing" if lease == "missing" else "LeaseIdMismatchWithBlobOperation"
            assert (got["ok"], got.get("status"), got.get("code")) == (False, 412, code), (case["id"], got)
            # the first Put Block was refused: nothing staged, nothing changed
            assert (got["text"], got["committed"], got["uncommitted"], got["leaseState"]) == ("old", [], [], "leased")
            # recorded: the refused Put Blocks (the SDK sends two at once), no Put Block List
            refused = LeaseEvent.objects.filter(container=case["container"]).exclude(error_code="")
            assert set(refused.values_list("action", "error_code")) == {("put-block", code)}, case["id"]
            assert not LeaseEvent.objects.filter(container=case["container"], action="put-block-list").exists()
    assert not BlobContent.objects.filter(state="staged").exists()

    got = results["by-hand"]
    one, two, three = block_name(1), block_name(2), block_name(3)
    assert got["staged"] == {"committed": [], "uncommitted": [[one, 6], [two, 5]]}
    assert got["first"] == "worldhello "
    assert got["committed"] == {"committed": [[two, 5], [one, 6]], "uncommitted": []}
    assert got["uncommitted"] == {"committed": [], "uncommitted": [[three, 1]]}
    assert got["after"] == {"committed": [[one, 6], [three, 1]], "uncommitted": []}
    assert got["text"] == "hello !"


# ------------------------------------------------------------------ lease cells

# The lease id a cell sends (the lease itself is set up as _setup(cell) says, as test_azure_blocks.py does).
def _sent(cell: str) -> str:
    return "missing" if cell == "no-id" or cell.endswith("-no-id") else "wrong" if cell == "wrong-id" else "right"


# Get Block List's cells, as test_azure_blocks.test_lease_cells_of_get_block_list expects them.
LIST_CELLS = {"no-id": (None, None), "right-id": (None, None), "breaking": (None, None),
              "wrong-id": (412, "LeaseIdMismatchWithBlobOperation"), "broken": (412, "LeaseLost"),
              "expired": (412, "LeaseLost")}
OPERATIONS = {"stage": "put-block", "commit": "put-block-list", "copy-sync": "copy-blob",
              "copy-begin": "copy-blob", "append": "append-block", "list": "get-block-list"}
# After the write, the lease state each cell leaves (as test_azure_blocks.py expects it).
LEFT = {"right-id": "leased", "breaking": "breaking"}
# Before it (what a refusal leaves).
SET_UP = {"breaking": "breaking", "broken": "broken", "expired": "expired"}


def test_lease_cells_of_the_block_operations_copy_and_append(azure_server, clock):
    cases = [{"id": f"{op}-{cell}", "kind": "cell", "op": op, "cell": cell, "setup": _setup(cell),
              "lease": _sent(cell), "container": f"jscell-{n}"}
             for n, (op, cell) in enumerate([(op, cell) for op in OPERATIONS if op != "list" for cell in WRITE_CELLS]
                                            + [("list", cell) for cell in LIST_CELLS])]
    # Every lease is infinite but the expired cells' (15 s): 16 s on, those have expired, and the
    # breaking ones (60 s) still break.
    results = run_node(azure_server, cases, clock=clock, advance=16)
    assert len(results) == len(cases)
    one = block_name(1)
    for case in cases:
        op, cell, got = case["op"], case["cell"], results[case["id"]]
        status, code = (LIST_CELLS if op == "list" else WRITE_CELLS)[cell]
        if status is None:
            assert got["ok"], (case["id"], got)
        else:
            assert (got["ok"], got.get("status"), got.get("code")) == (False, status, code), (case["id"], got)
            refusal = LeaseEvent.objects.filter(container=case["container"], error_code=code)
            assert list(refusal.values_list("action", flat=True)) == [OPERATIONS[op]], case["id"]
        wrote = status is None and op != "list"
        # the content, the blocks and the lease after: a refusal (and a read) changed nothing
        text = {"stage": "base", "commit": "new", "copy-sync": "copied", "copy-begin": "copied", "append": "more",
                "list": "base"}[op] if wrote else ("" if op == "append" else "base")
        assert got["text"] == text, (case["id"], got)
        if op == "stage":
            assert got["blocks"] == {"committed": [], "uncommitted": [[one, 3]] if wrote else []}, case["id"]
        elif op == "commit":
            assert got["blocks"] == ({"committed": [[one, 3]], "uncommitted": []} if wrote else
                                     {"committed": [], "uncommitted": [[one, 3]]}), case["id"]
        elif op in ("copy-sync", "copy-begin"):
            assert got["blocks"] == {"committed": [], "uncommitted": []}, case["id"]
            assert got.get("copy") == ("success" if wrote else None), case["id"]
        if wrote and op != "stage":  # a blob write ends a broken or expired lease
            assert got["leaseState"] == LEFT.get(cell, "available"), case["id"]
        else:
            assert got["leaseState"] == SET_UP.get(_setup(cell), "leased"), case["id"]
