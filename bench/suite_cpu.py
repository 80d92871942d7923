"""Where the test suite's CPU goes, per module: a pytest plugin and the script that runs it.

    .venv/bin/python bench/suite_cpu.py [--top 40] [--tests] [--] PYTEST_ARGS...

Runs ``pytest PYTEST_ARGS`` (e.g. ``-n 2 -p no:randomly tests/processes``) with
this module as a plugin. In each test process, at each test's start and end
(setup and teardown included), the plugin reads the CPU (user+sys) of: the
process itself, the children it reaped (server processes, ``manage.py`` runs,
initdb), and its live descendants and what they reaped, from ``/proc``. A
test's CPU is the difference. A process that outlives its test (a module's
server) is counted in the test that stops it, so the figures are read per
module. Each process also reports what it spent outside tests (start-up,
imports, collection, session fixtures).

PostgreSQL's processes are daemons (pg_ctl detaches them), no test process's
descendants; this script makes itself their subreaper (PR_SET_CHILD_SUBREAPER),
so they are reaped here and counted in the run's total, which is every
process's CPU, the daemons' included (``--pg``: pytest runs inside
tests/pg_cluster.py's cluster, as ``make test``'s PostgreSQL pass). Prints CPU per module (sorted), per test
with ``--tests``, the time outside tests, and the run's wall time and total.
The figures of a loaded machine are a little high (polling spins more).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest

OUT = "SUITE_CPU_DIR"
TICK = os.sysconf("SC_CLK_TCK")
PR_SET_CHILD_SUBREAPER = 36


# ------------------------------------------------------------------ the plugin (in each test process)

def _descendants_cpu(root: int) -> float:
    """CPU seconds of ``root``'s live descendants, and of the children they reaped."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # fields[0] is the state (field 3)
        parent[int(entry)] = int(fields[1])
        cpu[int(entry)] = sum(int(v) for v in fields[11:15]) / TICK  # utime stime cutime cstime
    total = 0.0
    for pid in cpu:
        ancestor = parent.get(pid)
        while ancestor is not None and ancestor > 1:
            if ancestor == root:
                total += cpu[pid]
                break
            ancestor = parent.get(ancestor)
    return total


def _cpu_now() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + _descendants_cpu(os.getpid())


class _Recorder:
    def __init__(self, path: Path):
        self.file = open(path, "a", buffering=1)
        self.in_tests = 0.0

    def write(self, **record) -> None:
        self.file.write(json.dumps(record) + "\n")


_recorder: _Recorder | None = None


def pytest_configure(config):
    global _recorder
    out = os.environ.get(OUT)
    if out:
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _recorder = _Recorder(Path(out) / f"{name}-{os.getpid()}.jsonl")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _recorder is None:
        yield
        return
    before = _cpu_now()
    yield
    spent = _cpu_now() - before
    _recorder.in_tests += spent
    _recorder.write(test=item.nodeid, module=item.nodeid.split("::")[0], cpu=spent)


def pytest_unconfigure(config):
    if _recorder is None:
        return
    if os.environ.get("PYTEST_XDIST_WORKER") is None and getattr(config.option, "numprocesses", None):
        t = os.times()  # an xdist controller: its own CPU, not its workers' (each reports its own)
        outside = t.user + t.system
    else:
        outside = _cpu_now() - _recorder.in_tests
    _recorder.write(process=os.environ.get("PYTEST_XDIST_WORKER", "main"), outside=outside)
    _recorder.file.close()


# ------------------------------------------------------------------ the script

def _reap_all(pid: int) -> int:
    """Wait for pytest, then reap what was left to this subreaper; pytest's status."""
    status = 0
    deadline: float | None = None
    while True:
        try:
            done, raw = os.waitpid(-1, os.WNOHANG if deadline else 0)
        except ChildProcessError:
            return status
        if done == pid:
            status = os.waitstatus_to_exitcode(raw)
            deadline = time.monotonic() + 30  # daemons still stopping
        elif done == 0:
            if deadline is not None and time.monotonic() > deadline:
                print("suite_cpu: processes still running after 30 s, not counted", file=sys.stderr)
                return status
            time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=40, help="modules (and tests) printed")
    parser.add_argument("--tests", action="store_true", help="also the costliest tests")
    parser.add_argument("--pg", action="store_true",
                        help="run pytest on a throwaway PostgreSQL cluster, as make test's second pass does")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("suite_cpu: no subreaper; PostgreSQL's daemons are not in the total", file=sys.stderr)
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as out:
        env = {**os.environ, OUT: out, "PYTHONPATH": os.pathsep.join(
            p for p in (str(repo / "bench"), os.environ.get("PYTHONPATH", "")) if p)}
        started = time.monotonic()
        command = [sys.executable, "-m", "pytest", "-p", "suite_cpu", *pytest_args]
        if args.pg:
            command = [sys.executable, "tests/pg_cluster.py", *command]
        proc = subprocess.Popen(command, env=env, cwd=repo)
        status = _reap_all(proc.pid)
        wall = time.monotonic() - started
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        records = [json.loads(line) for f in sorted(Path(out).glob("*.jsonl")) for line in f.read_text().splitlines()]
    report(records, args.top, args.tests, wall, usage.ru_utime + usage.ru_stime)
    return status


def report(records: list[dict], top: int, tests: bool, wall: float, total: float) -> None:
    modules: dict[str, list[float]] = defaultdict(list)
    for record in records:
        if "test" in record:
            modules[record["module"]].append(record["cpu"])
    in_tests = sum(sum(v) for v in modules.values())
    outside = [r for r in records if "process" in r]
    print(f"\n{'module':<60} {'tests':>6} {'CPU-s':>8}")
    for module, cpus in sorted(modules.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(f"{module:<60} {len(cpus):>6} {sum(cpus):>8.1f}")
    if tests:
        print(f"\n{'test':<100} {'CPU-s':>8}")
        for record in sorted((r for r in records if "test" in r), key=lambda r: -r["cpu"])[:top]:
            print(f"{record['test'][:100]:<100} {record['cpu']:>8.2f}")
    print(f"\nin tests: {in_tests:.1f} CPU-s over {sum(len(v) for v in modules.values())} tests")
    print("outside tests (start-up, collection, session fixtures): "
          + ", ".join(f"{r['process']} {r['outside']:.1f}" for r in sorted(outside, key=lambda r: r["process"]))
          + f" = {sum(r['outside'] for r in outside):.1f} CPU-s")
    counted = in_tests + sum(r["outside"] for r in outside)
    print(f"the whole run (every process, PostgreSQL's daemons included): {total:.1f} CPU-s in {wall:.1f} s wall, "
          f"load average at the end {os.getloadavg()[0]:.1f}")
    print(f"  of which in no test process (PostgreSQL's daemons, tests/pg_cluster.py): {total - counted:.1f} CPU-s")


if __name__ == "__main__":
    sys.exit(main())
