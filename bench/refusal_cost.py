#!/usr/bin/env python3
"""What a refusal costs the event loop, paired: the answers a flood gets (a lease request without
valid credentials past its address's bound: the Azure door's 503 ServerBusy, the JSON API's 429;
below the bound: their 401) made by serving/admission.py's ``admit``, and the front's 431 before
routing (serving/front.py), in one process, no HTTP, the code of this tree against ``--compare-tree
DIR`` (a checkout with the same dependencies, e.g. ``git worktree add /tmp/base main``), each side
in a process of its own, alternating round by round.

    .venv/bin/python bench/refusal_cost.py [--calls 20000] [--rounds 5] [--compare-tree DIR]

Reported: microseconds of CPU per refusal, each kind's median over the rounds, and the ratio of
this tree's to the other's (the median of the rounds' ratios). The machine's load moves every
figure; the ratio of a pair run together moves less.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ACCOUNT = "devstoreaccount1"
AZURE_PATH = f"/{ACCOUNT}/flood/b"
API_PATH = f"/api/v1/leases/acquire/{ACCOUNT}/flood/b"
KINDS = ("azure-busy", "api-busy", "azure-401", "api-401", "front-431-azure", "front-431-api")


def _environ(path: str, authorization: str | None) -> dict:
    environ = {"REQUEST_METHOD": "PUT" if not path.startswith("/api/") else "POST", "PATH_INFO": path,
               "QUERY_STRING": "comp=lease" if not path.startswith("/api/") else "", "REMOTE_ADDR": "192.0.2.7",
               "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "10000", "HTTP_HOST": "127.0.0.1:10000",
               "wsgi.url_scheme": "http", "HTTP_X_MS_VERSION": "2021-12-02", "HTTP_X_MS_LEASE_ACTION": "acquire",
               "HTTP_X_MS_LEASE_DURATION": "15", "CONTENT_TYPE": "application/json", "leasehold.received_at": 0.0}
    if authorization:
        environ["HTTP_AUTHORIZATION"] = authorization
    return environ


def side(calls: int) -> dict:
    """In the tree on sys.path: each kind's CPU seconds for ``calls`` refusals."""
    import asyncio

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from config.asgi import DOORS
    from serving import front
    from serving.admission import Admission

    doors = {door.name: door for door in DOORS}
    past = Admission(rate=1e-9, burst=0, read_wait=5, doors=doors)  # every refusal past the bound
    under = Admission(rate=1e9, burst=1e9, read_wait=5, doors=doors)  # none
    bearer = "Bearer not-a-token"  # refused from memory: neither a JWT nor one of the API's tokens
    cases = {
        "azure-busy": (past, AZURE_PATH, None, 503), "api-busy": (past, API_PATH, bearer, 429),
        "azure-401": (under, AZURE_PATH, None, 401), "api-401": (under, API_PATH, bearer, 401),
    }
    try:
        from leases.domain.refusals import Refusal  # this branch's front: the door renders the bytes

        def front_refusal(url: bytes) -> bytes:
            return front.refusal(url, Refusal(*front.HEADERS_TOO_BIG))
    except ImportError:  # before: the front built them

        def front_refusal(url: bytes) -> bytes:
            return front.refusal(url, 431, *front.HEADERS_TOO_BIG[1:])  # type: ignore[call-arg,arg-type]

    async def admitted(admission, path, authorization, status) -> float:
        environs = [_environ(path, authorization) for _ in range(calls)]
        scope = {"path": path}
        answer = await admission.admit(scope, environs[0])
        assert answer[0] == status, answer
        started = time.process_time()
        for environ in environs:
            await admission.admit(scope, environ)
        return time.process_time() - started

    spent = {}
    for kind, case in cases.items():
        spent[kind] = asyncio.run(admitted(*case))
    for kind, url in (("front-431-azure", AZURE_PATH.encode()), ("front-431-api", API_PATH.encode())):
        assert front_refusal(url).startswith(b"HTTP/1.1 431")
        started = time.process_time()
        for _ in range(calls):
            front_refusal(url)
        spent[kind] = time.process_time() - started
    past.close()
    under.close()
    return spent


def run_side(tree: Path, calls: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "LEASEHOLD_VAR_DIR": tmp,
               "LEASEHOLD_DATABASE": str(Path(tmp) / "db.sqlite3"), "LEASEHOLD_DEBUG": "0",
               "PYTHONPATH": str(tree)}
        out = subprocess.run([sys.executable, __file__, "--side", str(calls)], cwd=tree, env=env, check=True,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--compare-tree", type=Path, default=None)
    ap.add_argument("--side", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side is not None:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(side(args.side)))
        return 0
    trees = {"this": REPO} | ({"other": args.compare_tree.resolve()} if args.compare_tree else {})
    rounds: dict[str, list[dict]] = {name: [] for name in trees}
    for n in range(args.rounds):
        for name in (trees if n % 2 == 0 else reversed(list(trees))):
            rounds[name].append(run_side(trees[name], args.calls))
    print(f"CPU per refusal, microseconds (median of {args.rounds} rounds of {args.calls}); load "
          f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    print(f"{'kind':18} " + " ".join(f"{name:>8}" for name in trees) + ("  this/other" if len(trees) > 1 else ""))
    for kind in KINDS:
        medians = [statistics.median(r[kind] for r in rounds[name]) / args.calls * 1e6 for name in trees]
        line = f"{kind:18} " + " ".join(f"{m:8.2f}" for m in medians)
        if len(trees) > 1:
            ratio = statistics.median(a[kind] / b[kind] for a, b in zip(rounds["this"], rounds["other"]))
            line += f"  {ratio:10.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
