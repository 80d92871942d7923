"""Waiting for a lease: polling (the client helpers before x-leasehold-wait)
against waiting on the server, on one Leasehold server (python -m
serving.server, two workers, a fresh SQLite file), in alternating rounds.

    .venv/bin/python bench/waiting.py [--rounds 5] [--window 20]

Prints, per mode:
* takeover: seconds from a leader's release (LeaderElection, 15 s lease) to
  its standby's election (median and max over rounds);
* requests per waiter per minute: acquires sent by AutoRenewLease waiters
  (timeout 60 s) while someone else holds the lease, over ``--window`` s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "client"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from azure.storage.blob import BlobServiceClient  # noqa: E402

import leasehold_client._common as common  # noqa: E402
from leasehold_client import AutoRenewLease, LeaderElection  # noqa: E402
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY  # noqa: E402
from tests.conftest import CONNECTION  # noqa: E402
from tests.server_process import Instance, prepare  # noqa: E402


def mode(polling: bool) -> contextlib.AbstractContextManager[object]:
    """Polling: the helpers never ask the server to wait (as with Azure or Azurite)."""
    if polling:
        return mock.patch.object(common.ServerWait, "options", lambda self, left, now: {})
    return contextlib.nullcontext()


def service(url: str, counter: list | None = None) -> BlobServiceClient:
    hook = (lambda request: counter.append(request.http_request.method)) if counter is not None else None
    return BlobServiceClient.from_connection_string(CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=url),
                                                    raw_request_hook=hook)


def campaign(election: LeaderElection) -> AutoRenewLease:
    term = election.campaign()
    if term is None:  # only once stopped, which this bench never does
        raise RuntimeError("the campaign stopped")
    return term


def takeover(url: str, container: str, name: str) -> float:
    blob = service(url).get_blob_client(container, name)
    leader = campaign(LeaderElection(blob, duration=15))
    standby = LeaderElection(blob, duration=15)
    elected: list[tuple[AutoRenewLease, float]] = []
    thread = threading.Thread(target=lambda: elected.append((campaign(standby), time.monotonic())))
    thread.start()
    time.sleep(2.0)
    released = time.monotonic()
    leader.release()
    thread.join()
    [(term, at)] = elected
    term.release()
    return at - released


def requests_per_minute(url: str, container: str, name: str, window: float, waiters: int = 4) -> float:
    holder = service(url).get_blob_client(container, name)
    held = AutoRenewLease(holder, -1)  # infinite: nobody gets it during the window
    held.acquire()
    counts: list[list[str]] = [[] for _ in range(waiters)]
    cancel = threading.Event()
    threads = [threading.Thread(target=AutoRenewLease(service(url, counts[i]).get_blob_client(container, name), 15,
                                                      timeout=window, cancel=cancel).acquire)
               for i in range(waiters)]
    for thread in threads:
        thread.start()
    time.sleep(window)
    cancel.set()
    for thread in threads:
        thread.join()
    held.release()
    acquires = [sum(1 for method in count if method == "PUT") for count in counts]
    return statistics.mean(acquires) * 60 / window


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=float, default=20.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="leasehold-bench-waiting-"))
    database = tmp / "leasehold.sqlite3"
    prepare(str(database), tmp)
    server = Instance(str(database), tmp, "server", workers=2).start()
    results: dict[str, dict[str, list[float]]] = {name: {"takeover": [], "rpm": []} for name in ("polling", "waiting")}
    try:
        client = service(server.url)
        client.create_container("bench")
        for round_ in range(args.rounds):
            order = ("polling", "waiting") if round_ % 2 == 0 else ("waiting", "polling")
            for name in order:
                with mode(name == "polling"):
                    results[name]["takeover"].append(takeover(server.url, "bench", f"leader-{round_}-{name}"))
        for name in ("polling", "waiting"):
            with mode(name == "polling"):
                results[name]["rpm"].append(requests_per_minute(server.url, "bench", f"wait-{name}", args.window))
    finally:
        server.stop()
    for name, figures in results.items():
        takeovers = figures["takeover"]
        print(f"{name:8} takeover median {statistics.median(takeovers):.3f} s, max {max(takeovers):.3f} s "
              f"({len(takeovers)} rounds); acquires per waiter per minute {figures['rpm'][0]:.1f}")
    ratio = statistics.median(w / p for w, p in zip(results["waiting"]["takeover"], results["polling"]["takeover"]))
    print(f"takeover waiting/polling, median of paired rounds: {ratio:.3f}")


if __name__ == "__main__":
    main()
