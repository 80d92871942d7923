"""Failover under Patroni, timed over several runs (docs/deploy/patroni.md).

    .venv/bin/python bench/ha_failover.py [--runs 5] [--scenario "node killed" ...]
        [--ttl 20 --loop-wait 2 --retry-timeout 5] [--primary-start-timeout 0]
        [--keep DIR]

Each run is one scenario of tests/processes/test_patroni_failover.py (a
cluster of its own: etcd, two Patroni-managed PostgreSQL nodes, two server
instances, 8 clients), with its assertions: no acknowledged operation lost,
no double holder, a linearizable history. Prints, per scenario, how long
until a primary answered again and until both instances served again
(from the fault), the longest wait of one operation, and the runs that
failed, with the machine's load average (1 minute) before and after
each run. Every run keeps its logs (Patroni's and PostgreSQL's, the
instances') under --keep (var/ha_failover/ by default), from which a
timeline (bench/failover_timeline.py) says where the run's time went:
Patroni's notice, its decision, the postmaster's start, PostgreSQL
accepting writes, the instances' reconnect, both serving. Needs what
`make test-ha` installs. About two minutes a run."""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from failover_timeline import show, timeline  # noqa: E402  # bench/, run as a script

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/processes/test_patroni_failover.py::test_patroni_promotes_and_both_instances_follow"
SCENARIOS = ["node killed", "postgres killed", "node hung", "switchover"]
LINE = re.compile(r"^\.?(?P<how>[a-z ]+): a primary \((?P<moved>[a-z ]+)\) again after (?P<primary>[\d.]+) s .*"
                  r"both instances served (?P<served>[\d.]+) s after the fault; (?P<busy>\d+) answers 503; "
                  r"longest wait of an operation (?P<longest>[\d.]+) s", re.M)
SYNC = re.compile(r"a synchronous standby again ([\d.]+) s after the fault")


def load() -> float:
    return os.getloadavg()[0]


def run(how: str, env: dict, keep: Path) -> dict | str:
    kept = keep / f"{how.replace(' ', '-')}-{time.strftime('%H%M%S')}"
    kept.mkdir(parents=True)
    before = load()
    done = subprocess.run([str(ROOT / ".venv/bin/pytest"), "-q", "-s", "-p", "no:randomly",
                           f"--basetemp={kept / 'pt'}", f"{TEST}[{how}]"],
                          cwd=ROOT, env={**env, "HA_KEEP": str(kept)}, capture_output=True, text=True)
    (kept / "out.txt").write_text(done.stdout + done.stderr)
    found = LINE.search(done.stdout)
    steps = show(timeline(kept, done.stdout))
    where = f"load {before:.1f}-{load():.1f}; logs in {kept}"
    if done.returncode != 0 or not found:
        return f"failed (exit {done.returncode}; {where}): " + done.stdout[-1500:]
    sync = SYNC.search(done.stdout)
    return {**found.groupdict(), "linearizable": "linearizable:" in done.stdout, "where": where,
            "timeline": steps, "sync": f", a synchronous standby again {sync[1]} s" if sync else ""}


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return (f"min {min(values):.1f} median {statistics.median(values):.1f} max {max(values):.1f} s"
            f" ({', '.join(f'{v:.1f}' for v in values)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scenario", action="append", choices=SCENARIOS)
    parser.add_argument("--ttl", type=int, default=20)
    parser.add_argument("--loop-wait", type=int, default=2)
    parser.add_argument("--retry-timeout", type=int, default=5)
    parser.add_argument("--primary-start-timeout", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=ROOT / "var" / "ha_failover")
    args = parser.parse_args()
    env = {**os.environ, "HA_TTL": str(args.ttl), "HA_LOOP_WAIT": str(args.loop_wait),
           "HA_RETRY_TIMEOUT": str(args.retry_timeout), "HA_PRIMARY_START_TIMEOUT": str(args.primary_start_timeout)}
    print(f"Patroni ttl {args.ttl}, loop_wait {args.loop_wait}, retry_timeout {args.retry_timeout}, "
          f"primary_start_timeout {args.primary_start_timeout}; {args.runs} runs of each scenario", flush=True)
    failed = 0
    for how in args.scenario or SCENARIOS:
        results = []
        for n in range(args.runs):
            result = run(how, env, args.keep)
            if isinstance(result, str):
                failed += 1
                print(f"  {how} run {n + 1}: {result}", flush=True)
            else:
                results.append(result)
                print(f"  {how} run {n + 1}: primary again {result['primary']} s ({result['moved']}), "
                      f"served {result['served']} s, longest wait {result['longest']} s{result['sync']} "
                      f"({result['where']})\n"
                      f"    timeline: {result['timeline']}", flush=True)
        print(f"{how}: {len(results)}/{args.runs} runs passed (nothing lost, no double holder, linearizable)")
        print(f"  primary again:          {spread([float(r['primary']) for r in results])}")
        print(f"  both serving again:     {spread([float(r['served']) for r in results])}")
        print(f"  longest operation wait: {spread([float(r['longest']) for r in results])}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
