"""What hostile requests cost other clients.

    .venv/bin/python bench/hostile_input.py [--rounds 3] [--seconds 8]

Starts Leasehold as ``make run`` serves it (bench/servers.py) on a fresh
SQLite file, then:

1. memory: each worker's RSS before and after 1,000 requests carrying 64 KiB
   of random header values (signed with an unknown account: they are refused);
2. per round, 16 holders renew their own 15-s leases every 0.25 s, alone and
   then while another client sends 60 MB JSON bodies to the JSON API's
   acquire and 1 MiB headers, alternating; renewal p50/p99/max of each phase,
   their ratio, and the attacker's answers.

Loopback only; the machine's load is printed, as other work on it moves
every figure.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers  # noqa: E402
from hostile import ACCOUNT, CONTAINER, KEY, pct, setup_blobs  # noqa: E402
from loadgen import Signer  # noqa: E402
from upload_renewal import renew_loop as holder  # noqa: E402  (16 holders renewing every 0.25 s)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS"))


def raw(port: int, head: bytes, body: bytes = b"") -> bytes:
    """Send a request (the body may be cut off by the server), read what comes back."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        try:
            sock.sendall(head + body)
        except OSError:
            pass
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError:
            pass
        return answer
    finally:
        sock.close()


def attacker(port: int, stop: threading.Event, answers: list) -> None:
    body = b'{"duration": 15, "pad": "' + b"x" * (60 << 20) + b'"}'
    big_json = (b"POST /api/v1/leases/acquire/%s/%s/victim HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nConnection: close\r\n" % (ACCOUNT.encode(), CONTAINER.encode())
                + b"Content-Length: %d\r\n\r\n" % len(body))
    big_header = (b"GET /%s?comp=list HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" % ACCOUNT.encode()
                  + b"x-ms-date: %s\r\n\r\n" % (b"A" * (1 << 20)))
    turn = 0
    while not stop.is_set():
        answer = raw(port, big_json, body) if turn % 2 == 0 else raw(port, big_header)
        answers.append(answer.split(b"\r\n", 1)[0].decode(errors="replace"))
        turn += 1


def phase(server, signer, seconds: float, attack: bool) -> tuple[list, list]:
    lat: list = []
    answers: list = []
    stop = threading.Event()
    holders = [threading.Thread(target=holder, args=(server, signer, f"holder-{i:02d}", stop, lat)) for i in range(16)]
    for t in holders:
        t.start()
    time.sleep(0.5)
    lat.clear()
    bad = threading.Thread(target=attacker, args=(server.port, stop, answers)) if attack else None
    if bad:
        bad.start()
    time.sleep(seconds)
    stop.set()
    for t in holders + ([bad] if bad else []):
        t.join(120)
    return lat, answers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--port", type=int, default=10141)
    args = ap.parse_args()
    servers.BENCH.joinpath("var").mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="hostile-input-", dir=servers.BENCH / "var"))
    server = servers.Leasehold(args.port, workdir)
    server.prepare()
    server.start()
    try:
        signer = Signer(ACCOUNT, KEY)
        setup_blobs(server, [f"holder-{i:02d}" for i in range(16)] + ["victim"])
        print(f"# Leasehold ({server.settings_summary()}), {os.cpu_count()} CPUs, "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        workers = [p for p in server.pids() if p != server.pid]
        before = {p: rss_kib(p) for p in workers}
        for i in range(1000):
            junk = os.urandom(24 << 10).hex().encode()[: 64 << 10]  # 64 KiB of random header values
            raw(args.port, b"PUT /%s/%s/b%d?comp=lease HTTP/1.1\r\nHost: 127.0.0.1\r\n" % (
                ACCOUNT.encode(), CONTAINER.encode(), i) + b"Authorization: SharedKey nobody:AAAA\r\n"
                b"Connection: close\r\nx-ms-date: %s\r\n\r\n" % junk)
        after = {p: rss_kib(p) for p in workers}
        print("memory after 1,000 requests of 64 KiB header values: " + ", ".join(
            f"worker {p} {before[p] / 1024:.1f} -> {after[p] / 1024:.1f} MiB (+{(after[p] - before[p]) / 1024:.1f})"
            for p in workers))
        ratios = []
        for rnd in range(args.rounds):
            quiet, _ = phase(server, signer, args.seconds, attack=False)
            loud, answers = phase(server, signer, args.seconds, attack=True)

            def summary(rs):
                lat = [t for t, _ in rs]
                return (f"p50 {pct(lat, .5) * 1e3:.1f} p99 {pct(lat, .99) * 1e3:.1f} max {max(lat) * 1e3:.1f} ms "
                        f"(n={len(rs)}, not 200: {sum(1 for _, s in rs if s != 200)})")

            ratio = pct([t for t, _ in loud], .99) / pct([t for t, _ in quiet], .99)
            ratios.append(ratio)
            kinds = sorted(set(answers))
            print(f"round {rnd + 1}: renewals alone {summary(quiet)}; under attack {summary(loud)}; "
                  f"p99 ratio {ratio:.2f}; attacker sent {len(answers)} requests, answered {kinds}; "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"median p99 ratio (attack / alone): {statistics.median(ratios):.2f}")
    finally:
        server.stop()
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
