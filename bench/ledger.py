"""The ledger's costs: how fast verify recomputes a history, how long a digest takes, what sealing
costs, and what hashing adds to one event's write. A fresh SQLite file in a temporary directory gets
``--events`` events shaped as an SDK's renewals (about one refusal in twenty), written in bulk with
their hashes, sealed in the server's blocks; then the figures.

    .venv/bin/python bench/ledger.py [--events N] [--repeat N]

(Lease throughput before and after is measured by bench/run.py --compare-tree: bench/README.md.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

USER_AGENT = "azsdk-python-storage-blob/12.24.0 Python/3.11.2 (Linux-6.1.0-27-amd64-x86_64-with-glibc2.36)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of verify (the median is printed)")
    args = parser.parse_args()

    workdir = tempfile.TemporaryDirectory(prefix="leasehold-ledger-bench-")
    os.environ["LEASEHOLD_DATABASE"] = str(Path(workdir.name) / "ledger.sqlite3")
    os.environ["LEASEHOLD_VAR_DIR"] = workdir.name
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from leases.domain import ledger as hashes
    from leases.operations import ledger, ledger_verify
    from leases.storage import ledger_rows

    call_command("migrate", verbosity=0)
    start = datetime(2026, 11, 1, tzinfo=timezone.utc)
    columns = ", ".join(("row_hash", *hashes.HASHED))
    marks = ", ".join(["%s"] * (1 + len(hashes.HASHED)))
    made = time.perf_counter()
    hash_seconds = 0.0
    for first in range(0, args.events, 20_000):
        rows = []
        for i in range(first, min(args.events, first + 20_000)):
            at = start + timedelta(microseconds=i * 15_000)
            refused = i % 20 == 19
            values = [str(at.replace(tzinfo=None)), "renew", "refused" if refused else "success", "blob",
                      "devstoreaccount1", "jobs", f"workers/queue-{i % 1000:04d}/lock", "0123456789ab", None, 15,
                      None, None, str((at + timedelta(seconds=15)).replace(tzinfo=None)), "leased", "leased",
                      i % 1000 + 1, 409 if refused else 200, "LeaseIdMismatchWithLeaseOperation" if refused else "",
                      "account:devstoreaccount1", "azure", "", str(uuid.uuid4()), str(uuid.uuid4()), "10.0.0.7",
                      USER_AGENT]
            began = time.process_time()
            row_hash = hashes.event_hash(values)
            hash_seconds += time.process_time() - began
            rows.append([row_hash, *values])
        with transaction.atomic(), connection.cursor() as cursor:  # one commit a chunk, not a row
            cursor.executemany(f"INSERT INTO {ledger_rows.TABLE} ({columns}) VALUES ({marks})", rows)
    print(f"events written: {args.events:,} in {time.perf_counter() - made:.1f} s")
    print(f"hashing one event (as the lease write does), CPU: {hash_seconds / args.events * 1e6:.2f} us")

    began = time.perf_counter()
    blocks = ledger.seal()
    sealed = time.perf_counter() - began
    print(f"seal: {blocks} blocks in {sealed:.2f} s ({args.events / sealed * 60:,.0f} events a minute)")

    runs, cpu = [], []
    for _ in range(args.repeat):
        began, began_cpu = time.perf_counter(), time.process_time()
        report = ledger_verify.verify()
        runs.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
        assert report.ok and report.events == args.events, report
    took, took_cpu = statistics.median(runs), statistics.median(cpu)
    print(f"verify: {args.events:,} events in {took:.2f} s (median of {args.repeat}): "
          f"{args.events / took * 60:,.0f} events a minute (aim: at least 1,000,000); "
          f"its CPU {took_cpu:.2f} s: {args.events / took_cpu * 60:,.0f} events a CPU-minute "
          f"(the machine's other load left it {took_cpu / took:.0%} of a core)")

    timings = []
    for _ in range(50):
        began = time.perf_counter()
        ledger.digest()
        timings.append(time.perf_counter() - began)
    print(f"digest (in process, newest block and genesis read): median {statistics.median(timings) * 1000:.2f} ms, "
          f"max {max(timings) * 1000:.2f} ms (aim: under 100 ms)")
    import subprocess

    began = time.perf_counter()
    subprocess.run([sys.executable, "manage.py", "leasehold_ledger", "digest", "--no-seal"], check=True,
                   cwd=Path(__file__).resolve().parent.parent, capture_output=True)
    print(f"digest (manage.py, a new process with Django's start): {(time.perf_counter() - began) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
