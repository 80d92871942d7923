#!/usr/bin/env python3
"""How many of the project's functions (and modules) one lease renewal crosses, on each door: a live
server in this process (uvicorn with serving's HTTP protocol, the served application of config/asgi.py,
a fresh SQLite file), one renewal sent over a socket after a few to warm it up, every function call of
the server's threads recorded with a profile hook (sys.setprofile through threading.setprofile, set
before the server's threads start; recording only while the traced request is in flight). Counted: the
distinct functions whose code is in the project's own packages (config, engines, leases, serving), not
Django's, uvicorn's or the tests'; the median of seven renewals, and their range.

    .venv/bin/python bench/traced_calls.py [--compare-tree DIR] [--list]

``--compare-tree DIR``: the same count on another checkout (its own .venv), printed beside this one's.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve()
PACKAGES = ("config", "engines", "leases", "serving")
SERVER_THREADS = ("server", "lease", "write-", "admission", "read", "other", "upload")  # the request's threads
TRACED = 7  # renewals traced per door: the median's figures (a renewal now and then also re-reads a cache)
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def count(repo: Path) -> dict:
    """In this process, on ``repo``'s code: {door: {"functions": n, "modules": m}}."""
    sys.path[:0] = [str(repo), str(repo / "bench")]  # its own load generator
    tmp = Path(tempfile.mkdtemp(prefix="traced-"))
    os.environ.update({"DJANGO_SETTINGS_MODULE": "config.settings", "LEASEHOLD_VAR_DIR": str(tmp),
                       "LEASEHOLD_DATABASE": str(tmp / "db.sqlite3"), "LEASEHOLD_DEBUG": "0"})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import loadgen
    from appbench import api_token

    from leases.services import account_ensure

    account_ensure(name=ACCOUNT, key1=KEY)
    token = api_token()
    roots = tuple(str(repo / package) + os.sep for package in PACKAGES)
    seen: set[tuple[str, str, int]] = set()
    recording = threading.Event()

    def profile(frame, event, arg):
        if event == "call" and recording.is_set():
            code = frame.f_code
            if code.co_filename.startswith(roots) and threading.current_thread().name.startswith(SERVER_THREADS):
                seen.add((code.co_filename, code.co_name, code.co_firstlineno))
        return None

    threading.setprofile(profile)  # every thread the server starts from now on
    port = _serve()
    host = f"127.0.0.1:{port}"
    connection = loadgen.Connection("127.0.0.1", port)
    signer = loadgen.Signer(ACCOUNT, KEY)
    for raw in (signer.build("PUT", host, f"/{ACCOUNT}/traced", {"restype": "container"}),
                signer.build("PUT", host, f"/{ACCOUNT}/traced/b", headers={"x-ms-blob-type": "BlockBlob"}, body=b"x")):
        status, _, body = connection.request(raw)
        assert status == 201, (status, body)
    counts = {}
    for door, requests in (("azure", loadgen.LeaseRequests(signer, host, f"/{ACCOUNT}/traced/b")),
                           ("api", loadgen.ApiLeaseRequests(token, host, f"/{ACCOUNT}/traced/b"))):
        lease_id = str(uuid.uuid4())
        status, _, body = connection.request(requests.acquire(lease_id))
        assert status == 201, (door, status, body)
        for _ in range(20):  # warm: caches filled, connections open, the lazy imports done
            status, _, body = connection.request(requests.renew(lease_id))
            assert status == 200, (door, status, body)
        traced = []
        for _ in range(TRACED):
            seen.clear()
            recording.set()
            status, _, body = connection.request(requests.renew(lease_id))
            recording.clear()
            assert status == 200, (door, status, body)
            traced.append(sorted(seen))
        traced.sort(key=len)
        median = traced[len(traced) // 2]
        counts[door] = {"functions": len(median), "modules": len({path for path, _, _ in median}),
                        "range": [len(traced[0]), len(traced[-1])],
                        "names": [f"{os.path.relpath(path, repo)}:{name}" for path, name, _ in median]}
        status, _, body = connection.request(requests.release(lease_id))
        assert status == 200, (door, status, body)
    connection.close()
    return counts


def _serve() -> int:
    """The served application on a free port, in a thread named "server"; its port once it serves."""
    import uvicorn

    from config.asgi import application
    from serving.front import LeaseholdHttpProtocol

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    config = uvicorn.Config(application, host="127.0.0.1", port=port, loop="asyncio", http=LeaseholdHttpProtocol,
                            lifespan="on", log_level="warning", access_log=False, server_header=False,
                            date_header=False)
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, name="server", daemon=True).start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("the server did not start")
        time.sleep(0.05)
    return port


def _in_child(repo: Path) -> dict:
    python = repo / ".venv" / "bin" / "python"
    out = subprocess.run([str(python), str(HERE), "--child", str(repo)], cwd=repo, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise SystemExit(f"{repo}: {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compare-tree", type=Path, default=None)
    ap.add_argument("--list", action="store_true", help="also each function crossed (the median renewal's)")
    ap.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        result = count(args.child.resolve())
        print(json.dumps(result), flush=True)
        os._exit(0)  # the server's threads are daemons: no orderly stop needed for a count
    trees = [("this tree", HERE.parent.parent)]
    if args.compare_tree is not None:
        trees.append((f"{args.compare_tree}", args.compare_tree.resolve()))
    print(f"{'tree':<28} {'door':<6} {'functions':>9} {'range':>9} {'modules':>8}")
    for name, repo in trees:
        for door, figures in _in_child(repo).items():
            low, high = figures["range"]
            print(f"{name:<28} {door:<6} {figures['functions']:>9} {f'{low}-{high}':>9} {figures['modules']:>8}")
            if args.list:
                print("\n".join(f"    {function}" for function in figures["names"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
