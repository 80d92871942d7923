"""A linearizability checker for leases: is a recorded history of answers
one that a single correct lease could have given?

A history is each client's lease operations: resource, action, what the
request carried, when it was sent and when its answer came (``invoke``,
``complete``, seconds on the lease-time axis: any origin, the server's
rate), and the answer (status, error code, lease id, generation, lease
time), or ``status=None`` when the outcome is unknown (a timeout, a lost
connection, a 503 that may have committed). ``check(ops)`` searches for a
legal order against the sequential model, the pure state machine
(leases/domain/machine.py), each operation taking effect at one instant of its
window [invoke, complete], lease time never going back:

- per resource (P-compositionality, as Porcupine): leases on different
  resources are independent, so each resource's history is checked alone;
- Wing & Gong's search with Lowe's memoization (as Porcupine): an operation
  may be linearized next when no other pending known operation completed
  before it was invoked; (linearized set, model state) pairs already seen
  are not searched again;
- lease time as the database's clock allows: an operation's instant is the
  earliest its window and the model's clock allow, an instant at which the
  current lease or break ends by itself, or, for an operation that sets a
  deadline, the latest, or one that puts its deadline on (or just after)
  another operation's invoke or completion (at most MAX_SHIFTED): the state
  changes only at deadlines, and a deadline matters only against the other
  operations' windows. A break's lease time is compared within its rounding
  (whole seconds, +-1);
- unknown outcomes: the operation may have taken effect, with any answer,
  at an instant of its window (open-ended for a lost connection: up to
  ``horizon`` seconds), or not at all;
- lease ids: an acquire or change answers the id the model holds; an id the
  server drew is new (no request or answer named it before it was asked for);
- generations: the first generation seen fixes the offset between the
  model's count and the server's (a name keeps its sequence across
  deletions); every later one must be the model's count plus that offset.

A failure reports the smallest failing sub-history it finds: the shortest
failing prefix (operations completing after its end kept as unknown), whose
last answer is the culprit (the one no order explains), cut to the
culprit's last 1, 2, 4, ... 64 seconds if those show it, then shrunk
(halves, quarters, ... single operations, for 30 s at most) while it still fails, stays linearizable
without the culprit, and leaves the culprit the same possible answers (so
what explains them, such as the lease it acts on, stays); generations may
skip numbers there, for the new leases left out. The search is bounded
(``budget`` model states: GaveUp beyond).
"""

from __future__ import annotations

import bisect
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from leases.domain import machine
from leases.domain.errors import STATUS, LeaseholdError

EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
SUCCESS = {"acquire": 201, "renew": 200, "change": 200, "release": 200, "break": 202}
REFUSALS = [(STATUS.get(code, 409), code) for code in (
    "LeaseAlreadyPresent", "LeaseIdMismatchWithLeaseOperation", "LeaseNotPresentWithLeaseOperation",
    "LeaseIsBrokenAndCannotBeRenewed", "LeaseIsBreakingAndCannotBeAcquired", "LeaseIsBreakingAndCannotBeChanged")]


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


US = 1_000_000  # the search counts time in whole microseconds, as the database's timestamps do
MAX_SHIFTED = 16  # instants tried per operation that sets a deadline (see _moments)


class _Search:
    def __init__(self, history: list[Op], horizon: float, budget: int, *, gaps: bool = False):
        self.gaps = gaps  # generations may skip numbers (a sub-history leaves new leases out)
        self.ops = sorted(history, key=lambda op: op.invoke)
        self.starts = [round(op.invoke * US) for op in self.ops]
        self.ends = [round((op.complete if op.complete is not None else op.invoke + horizon) * US) for op in self.ops]
        # every instant at which an answer came or a request went: the moments a deadline set by an
        # operation of a wide window may have to fall on for the others to be explained
        self.points = sorted({*self.starts, *(end for op, end in zip(self.ops, self.ends) if op.known)})
        self.known = sum(1 for op in self.ops if op.known)
        self.unknowns = [n for n, op in enumerate(self.ops) if not op.known]  # scanned apart: few, long windows
        self.budget, self.states = budget, 0
        self.seen: set = set()
        # each operation's ids parsed once: the lease id sent, the proposed id, the id to grant under
        self.sent = [(_uuid(op.lease_id), _uuid(op.proposed_id),
                      _uuid(op.result_id) if op.result_id and not op.proposed_id else
                      uuid.uuid5(uuid.NAMESPACE_OID, f"{n}"), _uuid(op.result_id)) for n, op in enumerate(self.ops)]
        named: dict[str, float] = {}  # when each id was first sent or answered: a drawn id is new
        for value, at in ((v, t) for op in self.ops for v, t in ((op.lease_id, op.invoke), (
                op.proposed_id, op.invoke), (op.result_id, op.complete)) if v is not None and t is not None):
            named[value] = min(named.get(value, at), at)
        self.stale = [op.action == "acquire" and not op.proposed_id and op.result_id is not None
                      and named[op.result_id] < op.invoke for op in self.ops]

    def run(self) -> bool:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 4 * len(self.ops) + 1000))
        try:
            first = next((n for n, op in enumerate(self.ops) if op.known), len(self.ops))
            return self._step(0, first, 0, machine.LeaseRecord(), -(2 ** 62), None)
        finally:
            sys.setrecursionlimit(limit)

    def _step(self, done: int, first: int, linearized: int, record, now: int, base: int | None) -> bool:
        """``done``: the operations linearized (a bit each, in invoke order);
        ``first``: the first known one not linearized."""
        if linearized == self.known:
            return True
        key = (done, record, now, base)
        if key in self.seen:
            return False
        self.seen.add(key)
        self.states += 1
        if self.states > self.budget:
            raise GaveUp(f"more than {self.budget} model states")
        first_end = 2 ** 62  # the earliest completion of a pending known operation
        known, unknown = [], []  # the operations that may go next
        for n in range(first, len(self.ops)):
            if done >> n & 1 or not self.ops[n].known:
                continue
            if self.starts[n] > first_end:
                break
            if self.ends[n] < now:
                return False  # its window is over and it never took effect
            first_end = min(first_end, self.ends[n])
            known.append(n)
        for n in self.unknowns:
            if self.starts[n] > first_end:
                break
            if not done >> n & 1 and self.ends[n] >= now:
                unknown.append(n)
        # Known answers first: an unknown outcome is taken into effect only where
        # the answers need it (a wrong guess there would be undone much later).
        for n in known + unknown:
            op = self.ops[n]
            for at in self._moments(n, op, record, now):
                result = self._apply(n, op, record, at, base)
                if result is None:
                    continue
                if self._step(*self._after(done, first, n), linearized + op.known, result[0], at, result[1]):
                    return True
        return False

    def _after(self, done: int, first: int, n: int) -> tuple[int, int]:
        """``done`` and ``first`` once operation ``n`` is linearized."""
        done |= 1 << n
        while first < len(self.ops) and (done >> first & 1 or not self.ops[first].known):
            first += 1
        return done, first

    def _moments(self, n: int, op: Op, record, now: int) -> list[int]:
        """The instants of the window worth trying: the earliest; each at
        which the current lease or break ends by itself; and for an operation
        that sets a deadline, the latest and those that put its deadline on
        another operation's invoke or completion (the state changes only at
        such instants, and a deadline only matters against those)."""
        low, high = max(now, self.starts[n]), self.ends[n]
        moments = {low}
        for end in (record.expires_at, record.break_at):
            if end is not None and low < (at := _us(end)) <= high:
                moments.add(at)
        if op.action == "break" and op.lease_time is not None:  # when the lease time it answered was whole
            for end in (record.expires_at, record.break_at):
                if end is not None and low <= (at := _us(end) - op.lease_time * US) <= high:
                    moments.add(at)
        shift = {"acquire": op.duration, "renew": record.duration, "break": op.break_period}.get(op.action)
        if shift is not None and shift >= 0 and op.complete is not None and high > low:
            moments.add(high)
            shift *= US
            first, last = bisect.bisect_right(self.points, low + shift), bisect.bisect_left(self.points, high + shift)
            step = max(1, (last - first) // MAX_SHIFTED)
            for point in self.points[first:last:step]:  # the deadline on it, and just after it
                moments.update(at for at in (point - shift, point - shift + 1) if at <= high)
        return sorted(moments)

    def _apply(self, n: int, op: Op, record, at: int, base: int | None):
        """(record after, base) if the model at ``at`` answers as recorded."""
        lease_id, proposed_id, new_id, result_id = self.sent[n]
        try:
            outcome = machine.apply(op.action, record, EPOCH + timedelta(microseconds=at), duration=op.duration,
                                    break_period=op.break_period, lease_id=lease_id, proposed_id=proposed_id,
                                    new_id=new_id, noun=op.noun)
        except LeaseholdError as error:
            if not op.known or op.status != error.status or (op.code is not None and op.code != error.code):
                return None  # an unknown operation refused changed nothing: the same as not taking effect
            return record, base
        if not op.known:
            return outcome.record, base
        if op.status != SUCCESS[op.action]:
            return None
        if result_id is not None and (result_id != outcome.lease_id or self.stale[n]):
            return None  # not the id the model holds, or a drawn id that is not new
        if op.lease_time is not None and abs(op.lease_time - (outcome.lease_time or 0)) > 1:
            return None
        if op.generation is not None:
            offset = op.generation - outcome.record.generation
            new_lease = outcome.record.generation != record.generation
            if base is not None and offset != base and not (self.gaps and new_lease and offset > base):
                return None
            base = offset
        return outcome.record, base


def _us(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)


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

    def answers(ops: list[Op]) -> set:
        """The answers (status, code) the culprit could have had, the others as recorded."""
        found = set()
        for status, code in [(SUCCESS[culprit.action], None), *REFUSALS]:
            other = replace(culprit, status=status, code=code, result_id=None, generation=None, lease_time=None)
            if _passes([other if op is culprit else op for op in ops], horizon, budget, True):
                found.add((status, code))
        return found

    expected = answers(failing)

    def smaller(ops: list[Op]) -> bool:
        """Still failing for the same reason: linearizable without the culprit
        (generations may skip), and the culprit's possible answers the same
        (so what explains them, such as the lease it acts on, stays)."""
        try:
            return not _passes(ops, horizon, budget, True) and \
                _passes([op for op in ops if op is not culprit], horizon, budget, True) and answers(ops) == expected
        except GaveUp:
            return False

    deadline = time.monotonic() + 30  # shrinking is a courtesy: bounded
    grants = [op.invoke for op in failing if op.action == "acquire" and op.status == 201 and op.complete is not None]
    for window in (1, 2, 4, 8, 16, 32, 64):  # first the culprit's last seconds alone, if they show it,
        since = culprit.invoke - window  # from the last new lease granted before them (the state they start in)
        since = max([g for g in grants if g < since] or [since])
        recent = [op for op in failing if op.complete is None or op.complete >= since]
        if len(recent) < len(failing) and smaller(recent):
            failing = recent
            break
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
             unknown: frozenset = frozenset({503}), server_gone: bool = False, **sent) -> None:
        """One Azure lease request and its ``response`` (None: no answer);
        statuses in ``unknown`` say nothing about whether it took effect.
        ``server_gone``: no answer because the server process died (killed):
        it took effect before now or never, so its window ends now."""
        complete = self.clock() if response is not None or server_gone else None
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
