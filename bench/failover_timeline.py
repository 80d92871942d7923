"""A failover's timeline from the logs one run of
tests/processes/test_patroni_failover.py kept (``HA_KEEP``, and pytest's
``--basetemp``): seconds from the fault to each step, so that a slow run
says where its time went (bench/ha_failover.py prints it per run).

    .venv/bin/python bench/failover_timeline.py KEPT_DIR

The steps, each the first after the fault in any node's or instance's log:
Patroni's notice (its loop finds PostgreSQL down, or the standby finds the
leader key gone), its decision (restart in place, or promote the standby),
the postmaster started (Patroni starts it from a spawned Python process),
PostgreSQL accepting writes, the instances' notice and reconnect (their log
lines), both instances serving (the test's own instant), and a
synchronous standby named again (until then the primary's commits are on
one node only)."""

from __future__ import annotations

import re
import sys
from datetime import datetime, timezone
from pathlib import Path

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[.,](\d{3})( UTC)?")
TIMELINE = re.compile(r"timeline: fault (?P<fault>[\d.]+) primary (?P<primary>[\d.]+) served (?P<served>[\d.]+)")

# (step, the log it is read from, what its line says); the first match after the fault wins
STEPS = [
    ("patroni saw postgres down", "patroni", re.compile(r"Postgresql is not running")),
    ("patroni saw no leader", "patroni", re.compile(r"Lock owner: None|acquired session lock as a leader")),
    ("decided: restart in place", "patroni", re.compile(r"starting primary after failure")),
    ("decided: promote", "patroni", re.compile(r"promoted self to leader")),
    ("postmaster started", "patroni", re.compile(r"LOG:  starting PostgreSQL|received promote request")),
    ("postgres accepting writes", "patroni",
     re.compile(r"database system is ready to accept connections|archive recovery complete")),
    ("instance saw the outage", "instance", re.compile(r"database failover or outage: ")),
    ("instance reconnected", "instance", re.compile(r"database failover or outage over")),
    ("a synchronous standby again", "patroni", re.compile(r"Assigning synchronous standby status to \['")),
]


def stamp(line: str) -> float | None:
    found = STAMP.match(line)
    if not found:
        return None
    when = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S")
    when = when.replace(tzinfo=timezone.utc) if found.group(3) else when.astimezone()
    return when.timestamp() + int(found.group(2)) / 1000


def _lines(kept: Path, kind: str):
    pattern = "*/node*/patroni.log" if kind == "patroni" else "pt/*/[ab].log"
    for path in sorted({found.resolve() for found in kept.glob(pattern)}):  # pytest's "current" links too
        for line in path.read_text(errors="replace").splitlines():
            yield path, line


def timeline(kept: Path, output: str) -> list[tuple[str, float]]:
    """[(step, seconds after the fault)] in order, from a run's kept logs
    and the test's printed ``timeline:`` line ([] without it)."""
    found = TIMELINE.search(output)
    if not found:
        return []
    fault = float(found["fault"])
    steps: list[tuple[str, float]] = []
    for name, kind, pattern in STEPS:
        first = None
        for _, line in _lines(kept, kind):
            at = stamp(line)
            if at is not None and at >= fault - 0.05 and pattern.search(line):
                first = at if first is None else min(first, at)
        if first is not None:
            steps.append((name, first - fault))
    steps += [("a primary (test)", float(found["primary"]) - fault),
              ("both instances serving (test)", float(found["served"]) - fault)]
    return sorted(steps, key=lambda step: step[1])


def show(steps: list[tuple[str, float]]) -> str:
    return "; ".join(f"{name} +{at:.1f}" for name, at in steps)


if __name__ == "__main__":
    kept = Path(sys.argv[1])
    out = (kept / "out.txt").read_text() if (kept / "out.txt").exists() else sys.stdin.read()
    print(show(timeline(kept, out)))
