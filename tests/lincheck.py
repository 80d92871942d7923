"""A linearizability checker for leases: is a recorded history of answers
one that a single correct lease could have given?

A history is each client's lease operations: resource, action, what the
request carried, when it was sent and when its answer came (``invoke``,
``complete``, seconds on the lease-time axis: any origin, the server's
rate), and the answer (status, error code, lease id, generation, lease
time), or ``status=None`` when the outcome is unknown (a timeout, a lost
connection, a 503 that may have committed). ``check(ops)`` searches for a
legal order against the sequential model, the pure state machine
(leases/machine.py), each operation taking effect at one instant of its
window [invoke, complete], lease time never going back:

- per resource (P-compositionality, as Porcupine): leases on different
  resources are independent, so each resource's history is checked alone;
- Wing & Gong's search with Lowe's memoization (as Porcupine): an operation
  may be linearized next when no other pending known operation completed
  before it was invoked; (linearized set, model state) pairs already seen
  are not searched again;
- lease time as the database's clock allows: an operation's instant is the
  earliest its window and the model's clock allow, an instant at which the
  current lease or break ends by itself, or (for an operation that sets a
  deadline) the latest; the state only changes at those instants, so these
  choices are all the outcomes an instant can make. A break's lease time is
  compared within its rounding (whole seconds, +-1);
- unknown outcomes: the operation may have taken effect, with any answer,
  at an instant of its window (open-ended for a lost connection: up to
  ``horizon`` seconds), or not at all;
- generations: the first generation seen fixes the offset between the
  model's count and the server's (a name keeps its sequence across
  deletions); every later one must be the model's count plus that offset.

A failure reports the smallest failing sub-history it finds: the shortest
failing prefix (operations completing after its end kept as unknown), then
shrunk op by op while it still fails and stays linearizable without the
culprit (the operation whose answer no order explains).
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from leases import machine
from leases.errors import LeaseholdError

EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
SUCCESS = {"acquire": 201, "renew": 200, "change": 200, "release": 200, "break": 202}
SETS_DEADLINE = {"acquire", "renew", "break"}


@dataclass(frozen=True)
class Op:
    client: str
    resource: str
    action: str
    invoke: float
    complete: float | None  # None: no answer came (the server may have acted later, up to the horizon)
    status: int | None  # None: outcome unknown
    code: str | None = None  # the error code of a refusal
    lease_id: str | None = None  # x-ms-lease-id sent (renew, change, release)
    proposed_id: str | None = None
    duration: int | None = None
    break_period: int | None = None
    result_id: str | None = None  # x-ms-lease-id answered (acquire, change)
    generation: int | None = None  # Leasehold-Generation answered
    lease_time: int | None = None  # x-ms-lease-time answered (break)
    noun: str = machine.BLOB

    @property
    def known(self) -> bool:
        return self.status is not None

    def unknown(self) -> "Op":
        return replace(self, status=None, code=None, result_id=None, generation=None, lease_time=None)

    def __str__(self) -> str:
        sent = {k: v for k, v in (("lease", self.lease_id), ("proposed", self.proposed_id),
                                  ("duration", self.duration), ("period", self.break_period)) if v is not None}
        got = "unknown" if self.status is None else " ".join(
            str(v) for v in (self.status, self.code, self.result_id and f"id={self.result_id}",
                             self.generation is not None and f"gen={self.generation}",
                             self.lease_time is not None and f"time={self.lease_time}") if v)
        end = "?" if self.complete is None else f"{self.complete:.3f}"
        return f"[{self.invoke:.3f}, {end}] {self.client} {self.action} {sent} -> {got}"


@dataclass
class Verdict:
    ok: bool
    ops: int
    resources: int
    seconds: float
    states: int  # model states searched
    failures: dict[str, list[Op]] = field(default_factory=dict)  # resource -> smallest failing sub-history
    culprits: dict[str, Op] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.ok

    def explain(self) -> str:
        if self.ok:
            return (f"linearizable: {self.ops} operations on {self.resources} resources, checked in "
                    f"{self.seconds:.2f} s ({self.states} model states)")
        lines = []
        for resource, ops in self.failures.items():
            lines.append(f"{resource}: no legal order; smallest failing sub-history ({len(ops)} operations), "
                         f"unexplained: {self.culprits.get(resource)}")
            lines.extend(f"  {op}" for op in ops)
        return "\n".join(lines)


class GaveUp(Exception):
    """The search met its bound of model states before deciding."""


def check(ops: list[Op], *, horizon: float = 30.0, budget: int = 2_000_000) -> Verdict:
    started = time.monotonic()
    by_resource: dict[str, list[Op]] = {}
    for op in ops:
        by_resource.setdefault(op.resource, []).append(op)
    verdict = Verdict(True, len(ops), len(by_resource), 0.0, 0)
    for resource, history in by_resource.items():
        search = _Search(history, horizon, budget)
        if search.run():
            verdict.states += search.states
            continue
        verdict.states += search.states
        verdict.ok = False
        verdict.failures[resource], verdict.culprits[resource] = _smallest(history, horizon, budget)
    verdict.seconds = time.monotonic() - started
    return verdict


def _t(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def _s(moment: datetime) -> float:
    return (moment - EPOCH).total_seconds()


class _Search:
    def __init__(self, history: list[Op], horizon: float, budget: int, *, gaps: bool = False):
        self.gaps = gaps  # generations may skip numbers (a sub-history leaves new leases out)
        self.ops = sorted(history, key=lambda op: op.invoke)
        self.ends = [op.complete if op.complete is not None else op.invoke + horizon for op in self.ops]
        self.known = sum(1 for op in self.ops if op.known)
        self.budget, self.states = budget, 0
        self.seen: set = set()
        self.ids = [uuid.uuid5(uuid.NAMESPACE_OID, f"{n}") for n in range(len(self.ops))]

    def run(self) -> bool:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 4 * len(self.ops) + 1000))
        try:
            return self._step(0, 0, machine.LeaseRecord(), float("-inf"), None)
        finally:
            sys.setrecursionlimit(limit)

    def _step(self, done: int, linearized: int, record, now: float, base: int | None) -> bool:
        if linearized == self.known:
            return True
        key = (done, record, now, base)
        if key in self.seen:
            return False
        self.seen.add(key)
        self.states += 1
        if self.states > self.budget:
            raise GaveUp(f"more than {self.budget} model states")
        first_end = float("inf")  # the earliest completion of a pending known operation
        for n, op in enumerate(self.ops):
            if done >> n & 1:
                continue
            if op.invoke > first_end:
                break
            if op.known:
                first_end = min(first_end, self.ends[n])
            if self.ends[n] < now:
                if op.known:
                    return False  # its window is over and it never took effect
                continue
            for at, after, new_base in self._outcomes(n, op, record, now, base):
                if self._step(done | 1 << n, linearized + op.known, after, at, new_base):
                    return True
        return False

    def _outcomes(self, n: int, op: Op, record, now: float, base: int | None):
        low, high = max(now, op.invoke), self.ends[n]
        moments = [low]
        for end in (record.expires_at, record.break_at):
            if end is not None and low < _s(end) <= high:
                moments.append(_s(end))
        if op.action in SETS_DEADLINE and high > low and op.complete is not None:
            moments.append(high)
        for at in sorted(set(moments)):
            result = self._apply(n, op, record, at, base)
            if result is not None:
                yield (at, *result)

    def _apply(self, n: int, op: Op, record, at: float, base: int | None):
        """(record after, base) if the model at ``at`` answers as recorded."""
        new_id = uuid.UUID(op.result_id) if op.result_id and not op.proposed_id else self.ids[n]
        try:
            outcome = machine.apply(op.action, record, _t(at), duration=op.duration, break_period=op.break_period,
                                    lease_id=_uuid(op.lease_id), proposed_id=_uuid(op.proposed_id), new_id=new_id,
                                    noun=op.noun)
        except LeaseholdError as error:
            if not op.known or op.status != error.status or (op.code is not None and op.code != error.code):
                return None  # an unknown operation refused changed nothing: the same as not taking effect
            return record, base
        if not op.known:
            return outcome.record, base
        if op.status != SUCCESS[op.action]:
            return None
        if op.result_id is not None and uuid.UUID(op.result_id) != outcome.lease_id:
            return None
        if op.lease_time is not None and abs(op.lease_time - (outcome.lease_time or 0)) > 1:
            return None
        if op.generation is not None:
            offset = op.generation - outcome.record.generation
            new_lease = outcome.record.generation != record.generation
            if base is not None and offset != base and not (self.gaps and new_lease and offset > base):
                return None
            base = offset
        return outcome.record, base


def _uuid(value: str | None) -> uuid.UUID | None:
    return None if value is None else uuid.UUID(value)


def _passes(ops: list[Op], horizon: float, budget: int, gaps: bool = False) -> bool:
    return _Search(ops, horizon, budget, gaps=gaps).run()


def _prefix(ops: list[Op], end: float) -> list[Op]:
    """The history as seen at ``end``: answers after it unknown."""
    return [op if op.complete is not None and op.complete <= end else op.unknown()
            for op in ops if op.invoke <= end]


def _smallest(history: list[Op], horizon: float, budget: int) -> tuple[list[Op], Op]:
    """The shortest failing prefix, then shrunk: drop an operation while the
    rest still fails and stays linearizable without the culprit."""
    ends = sorted({op.complete for op in history if op.known and op.complete is not None})
    lo, hi = 0, len(ends) - 1  # the prefix at ends[hi] fails (the whole history does)
    while lo < hi:
        mid = (lo + hi) // 2
        if _passes(_prefix(history, ends[mid]), horizon, budget):
            lo = mid + 1
        else:
            hi = mid
    failing = sorted(_prefix(history, ends[lo]), key=lambda op: op.invoke)
    culprit = next(op for op in failing if op.known and op.complete == ends[lo])

    def smaller(ops: list[Op]) -> bool:
        """Still failing, and linearizable without the culprit (generations may skip)."""
        try:
            return not _passes(ops, horizon, budget, True) and \
                _passes([op for op in ops if op is not culprit], horizon, budget, True)
        except GaveUp:
            return False

    deadline = time.monotonic() + 30  # shrinking is a courtesy: bounded
    chunk = len(failing) // 2  # drop halves, then quarters, ... then single operations until none goes
    while chunk >= 1 and time.monotonic() < deadline:
        start, before = 0, len(failing)
        while start < len(failing) and time.monotonic() < deadline:
            dropped = [op for op in failing[start:start + chunk] if op is not culprit]
            fewer = [op for op in failing if op not in dropped]
            if dropped and smaller(fewer):
                failing = fewer
            else:
                start += chunk
        if chunk > 1 or len(failing) == before:
            chunk //= 2
    return sorted(failing, key=lambda op: op.invoke), culprit


class Recorder:
    """Operations recorded by client threads as they happen (thread-safe).
    ``clock`` gives lease-time seconds (time.time by default: the server's
    lease time is its database's clock, read at the server's rate)."""

    def __init__(self, clock=time.time):
        self.clock = clock
        self.ops: list[Op] = []
        self._lock = threading.Lock()

    def add(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)

    def http(self, client: str, resource: str, action: str, invoke: float, response, *,
             unknown: frozenset = frozenset({503}), **sent) -> None:
        """One Azure lease request and its ``response`` (None: no answer);
        statuses in ``unknown`` say nothing about whether it took effect."""
        complete = self.clock() if response is not None else None
        status = None if response is None or response.status_code in unknown else response.status_code
        headers = response.headers if status is not None else {}
        generation = headers.get("Leasehold-Generation")
        lease_time = headers.get("x-ms-lease-time")
        self.add(Op(client, resource, action, invoke, complete, status, code=headers.get("x-ms-error-code"),
                    result_id=headers.get("x-ms-lease-id") if action in ("acquire", "change") else None,
                    generation=int(generation) if generation is not None else None,
                    lease_time=int(lease_time) if lease_time is not None else None, **sent))

    def check(self, **kwargs) -> Verdict:
        with self._lock:
            ops = list(self.ops)
        return check(ops, **kwargs)
