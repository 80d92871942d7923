"""What large uploads cost lease renewals, and nothing else.

    .venv/bin/python bench/upload_renewal.py [--mib 64] [--uploads 4] [--rounds 3]
    .venv/bin/python bench/upload_renewal.py --compare-env NAME=VALUE   # a variant, paired

Starts Leasehold as ``make run`` serves it (bench/servers.py) on a fresh
SQLite file, then per round: 16 holders renew their own 15-s leases every
0.25 s for a few seconds with nothing else running (the baseline), and
again while ``--uploads`` signed Put Blobs of ``--mib`` MiB are sent at full
speed (the bodies arrive in well under a second: what is measured is the
server writing them). Prints renewal p50/p99/max in each phase and how
long the uploads took. Loopback only; the machine's load is printed, as
other work on it moves every figure.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers  # noqa: E402
from hostile import ACCOUNT, CONTAINER, KEY, pct, setup_blobs  # noqa: E402
from loadgen import Connection, LeaseRequests, Signer  # noqa: E402


def renew_loop(server: servers.Leasehold, signer: Signer, name: str, stop: threading.Event,
               out: list[tuple[float, int]]) -> None:
    conn = Connection("127.0.0.1", server.port)
    reqs = LeaseRequests(signer, server.host, f"/{ACCOUNT}/{CONTAINER}/{name}")
    lease_id = str(uuid.uuid4())
    status, _, _ = conn.request(reqs.acquire(lease_id, 15))
    assert status == 201, status
    while not stop.is_set():
        t0 = time.monotonic()
        status, _, _ = conn.request(reqs.renew(lease_id))
        out.append((time.monotonic() - t0, status))
        time.sleep(0.25)
    conn.request(reqs.release(lease_id))
    conn.close()


def upload(server: servers.Leasehold, signer: Signer, name: str, size: int, out: list[tuple[int, float]]) -> None:
    body = os.urandom(1 << 20) * (size >> 20)
    conn = Connection("127.0.0.1", server.port)
    conn._connect().settimeout(300)  # queued behind the other uploads in the server's lane: not a failure
    t0 = time.monotonic()
    status, _, _ = conn.request(signer.build("PUT", server.host, f"/{ACCOUNT}/{CONTAINER}/{name}",
                                             headers={"x-ms-blob-type": "BlockBlob"}, body=body))
    out.append((status, time.monotonic() - t0))
    conn.close()


def phase(server: servers.Leasehold, signer: Signer, uploads: int, size: int,
          seconds: float = 6.0) -> tuple[list[tuple[float, int]], list[tuple[int, float]]]:
    """Renewals for ``seconds`` (no uploads), or for as long as the uploads take:
    (latency, status) of each renewal, (status, seconds) of each upload."""
    lat: list[tuple[float, int]] = []
    done: list[tuple[int, float]] = []
    stop = threading.Event()
    holders = [threading.Thread(target=renew_loop, args=(server, signer, f"holder-{i:02d}", stop, lat))
               for i in range(16)]
    for t in holders:
        t.start()
    time.sleep(0.5)
    lat.clear()  # the acquires' warm-up
    ups = [threading.Thread(target=upload, args=(server, signer, f"big-{i}", size, done)) for i in range(uploads)]
    for t in ups:
        t.start()
    if uploads:
        for t in ups:
            t.join(600)
    else:
        time.sleep(seconds)
    stop.set()
    for t in holders:
        t.join(60)
    return lat, done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--uploads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=10121)
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="for the server")
    ap.add_argument("--compare-env", action="append", default=[], metavar="NAME=VALUE",
                    help="also measure a server with these settings, the two alternating round by round")
    args = ap.parse_args()
    servers.BENCH.joinpath("var").mkdir(exist_ok=True)
    base_env = dict(e.split("=", 1) for e in args.env)
    arms = {"Leasehold": base_env}
    if args.compare_env:
        arms["variant"] = {**base_env, **dict(e.split("=", 1) for e in args.compare_env)}
    dirs = {name: Path(tempfile.mkdtemp(prefix="upload-", dir=servers.BENCH / "var")) for name in arms}
    fleet = {name: servers.Leasehold(args.port + i, dirs[name], extra_env=env) for i, (name, env) in
             enumerate(arms.items())}
    p99s: dict[str, list[float]] = {name: [] for name in arms}
    try:
        signer = Signer(ACCOUNT, KEY)
        for name, server in fleet.items():
            server.prepare()
            server.start()
            setup_blobs(server, [f"holder-{i:02d}" for i in range(16)])
            env = " ".join(f"{k}={v}" for k, v in arms[name].items())
            print(f"# {name}: {server.settings_summary()} {env}")
        print(f"# {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for rnd in range(args.rounds):
            order = list(fleet.items()) if rnd % 2 == 0 else list(reversed(fleet.items()))
            for name, server in order:
                base, _ = phase(server, signer, 0, 0)
                busy, done = phase(server, signer, args.uploads, args.mib << 20)
                p99s[name].append(pct([t for t, _ in busy], .99))
                print(f"round {rnd + 1} {name}: renewals alone {summary(base)}; during {args.uploads} x "
                      f"{args.mib} MiB uploads {summary(busy)}; uploads {sorted(s for s, _ in done)} in "
                      f"{', '.join(f'{d:.1f}' for _, d in sorted(done, key=lambda x: x[1]))} s; "
                      f"load {os.getloadavg()[0]:.1f}", flush=True)
        if len(fleet) == 2:
            ratios = sorted(a / b for a, b in zip(p99s["Leasehold"], p99s["variant"]))
            print(f"renewal p99 during uploads, Leasehold/variant by round: "
                  f"{', '.join(f'{r:.2f}' for r in ratios)} (median {ratios[len(ratios) // 2]:.2f})")
    finally:
        import shutil

        for name, server in fleet.items():
            server.stop()
            shutil.rmtree(dirs[name], ignore_errors=True)
    return 0


def summary(rs: list[tuple[float, int]]) -> str:
    lat = [t for t, _ in rs]
    failed = sum(1 for _, st in rs if st != 200)
    return (f"p50 {pct(lat, .5) * 1e3:.1f} p99 {pct(lat, .99) * 1e3:.1f} max {max(lat) * 1e3:.1f} ms "
            f"(n={len(rs)}, not 200: {failed})")


if __name__ == "__main__":
    sys.exit(main())
