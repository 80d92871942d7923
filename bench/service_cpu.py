"""CPU of the services the Azure door's everyday requests call, in one process, no HTTP.

    .venv/bin/python bench/service_cpu.py [--calls 500] [--rounds 5] [--compare-tree DIR]

On a fresh, migrated SQLite file (synchronous=NORMAL: the fsync is not what is measured), one
account, container and small blob: the CPU of one call of each of Put Blob's service, Get Blob's,
loading a blob's row (every request on a blob does), a container's, and the blob content clean-up a
write runs after its answer. With ``--compare-tree`` (a checkout of other code, with its own .venv)
each round runs this script in both trees, alternating, and the ratios (this tree / other) are
printed as medians of the rounds' ratios. The machine's load moves every figure: read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def measure(calls: int) -> dict[str, float]:
    """Microseconds of CPU per call of each operation, in this tree."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from leases import services
    from leases.services import Actor, ResourceRef
    from leases.services.common import load_resource
    from leases.storage import blob_content

    call_command("migrate", verbosity=0)
    ref = ResourceRef("devstoreaccount1", "bench", "b.txt")
    actor = Actor(name="account:devstoreaccount1", via="azure")
    services.account_ensure(name=ref.account, key1="a2V5")
    services.container_create(account=ref.account, name=ref.container)
    services.blob_put(ref=ref, actor=actor, content=b"hello")
    operations = {
        "blob_put": lambda: services.blob_put(ref=ref, actor=actor, content=b"hello"),
        "blob_read": lambda: services.blob_read(ref=ref, actor=actor),
        "load blob row": lambda: load_resource(ref, for_update=False, content=False),
        "load container row": lambda: load_resource(ResourceRef(ref.account, ref.container), for_update=False),
        "clean-up after a write": lambda: blob_content.collect_after_request(0),
    }
    figures = {}
    for name, operation in operations.items():
        operation()
        started = time.process_time()
        for _ in range(calls):
            operation()
        figures[name] = (time.process_time() - started) / calls * 1e6
    return figures


def run_tree(tree: Path, calls: int) -> dict[str, float]:
    """This script's figures in ``tree`` (its own venv), on a database of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "LEASEHOLD_DATABASE": f"{tmp}/bench.sqlite3", "LEASEHOLD_VAR_DIR": tmp,
               "LEASEHOLD_SQLITE_SYNCHRONOUS": "NORMAL", "PYTHONPATH": str(tree)}
        out = subprocess.run([str(tree / ".venv/bin/python"), str(Path(__file__).resolve()), "--one", str(calls)],
                             cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compare-tree", type=Path)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: measure, print JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.calls} calls, {args.rounds} rounds")
    trees = [HERE] + ([args.compare_tree.resolve()] if args.compare_tree else [])
    rounds: list[list[dict[str, float]]] = [[] for _ in trees]
    for _ in range(args.rounds):
        for i, tree in enumerate(trees):
            rounds[i].append(run_tree(tree, args.calls))
    names = list(rounds[0][0])
    header = f"{'operation':<24} {'this tree us':>12}"
    if len(trees) > 1:
        header += f" {'other us':>10} {'this/other':>10}"
    print(header)
    for name in names:
        mine = statistics.median(r[name] for r in rounds[0])
        line = f"{name:<24} {mine:>12.0f}"
        if len(trees) > 1:
            other = statistics.median(r[name] for r in rounds[1])
            ratio = statistics.median(a[name] / b[name] for a, b in zip(rounds[0], rounds[1]))
            line += f" {other:>10.0f} {ratio:>10.2f}"
        print(line)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
