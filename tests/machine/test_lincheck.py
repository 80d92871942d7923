"""The linearizability checker (tests/lincheck.py) on histories written by
hand: it accepts the histories a correct lease can give, unknown outcomes
included, rejects each planted violation and reports it small."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from typing import Any

from leases.domain import machine
from leases.domain.errors import LeaseholdError
from tests.lincheck import EPOCH, Op, check

A, B, C = (str(uuid.UUID(int=n)) for n in (1, 2, 3))
R = "/acct/c/b"


def op(client, action, start, status, *, end=None, **kw) -> Op:
    """An operation of ``client`` sent at ``start``, answered 0.05 s later
    (or at ``end``; None with status None: never answered)."""
    if status is None and end is None:
        end = start + 0.05 if kw.pop("answered", True) else None
    elif end is None:
        end = start + 0.05
    if client in (A, B, C):
        if action == "acquire":
            kw.setdefault("proposed_id", client)
            kw.setdefault("duration", 15)
            if status == 201:
                kw.setdefault("result_id", client)
        elif action in ("renew", "release", "change"):
            kw.setdefault("lease_id", client)
    return Op({A: "a", B: "b", C: "c"}.get(client, client), R, action, start, end, status, **kw)


def rejected(history: list[Op]) -> tuple[list[Op], Op]:
    verdict = check(history)
    assert not verdict, history
    assert list(verdict.failures) == [R]
    assert R in verdict.explain()
    return verdict.failures[R], verdict.culprits[R]


def test_a_correct_history_with_handovers_expiry_and_a_break_is_linearizable():
    history = [
        op(A, "acquire", 0, 201, generation=1),
        op(B, "acquire", 0.01, 409, code="LeaseAlreadyPresent"),  # overlaps A's: either order
        op(A, "renew", 10, 200),
        op(A, "release", 11, 200),
        op(B, "acquire", 12, 201, generation=2),
        op(C, "acquire", 20, 409, code="LeaseAlreadyPresent"),
        op(C, "acquire", 27.01, 201, generation=3),  # B's lease ended at 27
        op(B, "renew", 28, 409, code="LeaseIdMismatchWithLeaseOperation"),
        op("breaker", "break", 30, 202, break_period=5, lease_time=5),
        op(A, "acquire", 32, 409, code="LeaseAlreadyPresent"),
        op(A, "acquire", 35.1, 201, generation=4),
    ]
    verdict = check(history)
    assert verdict, verdict.explain()
    assert (verdict.ops, verdict.resources) == (11, 1)


def test_unknown_outcomes_may_have_taken_effect_or_not():
    took_effect = [op(A, "acquire", 0, None, answered=False), op(B, "acquire", 1, 409, code="LeaseAlreadyPresent"),
                   op(A, "renew", 2, 200)]
    did_not = [op(A, "acquire", 0, None), op(B, "acquire", 1, 201, generation=1)]
    release_lost = [op(A, "acquire", 0, 201), op(A, "release", 1, None), op(B, "acquire", 2, 201)]
    release_made = [op(A, "acquire", 0, 201), op(A, "release", 1, None), op(B, "acquire", 2, 409,
                                                                            code="LeaseAlreadyPresent")]
    # a retried release finds its first attempt (answered 503) made it
    retried = [op(A, "acquire", 0, 201), op(A, "release", 1, None), op(A, "release", 1.1, 409,
                                                                         code="LeaseIdMismatchWithLeaseOperation")]
    for history in (took_effect, did_not, release_lost, release_made, retried):
        assert check(history), check(history).explain()


def test_the_instant_within_a_window_is_chosen_as_the_database_clock_allows():
    """The server granted A's lease late in its window: B, 15.02 s after A
    sent it, is still refused."""
    history = [op(A, "acquire", 0, 201, end=0.05), op(B, "acquire", 15.02, 409, end=15.03,
                                                      code="LeaseAlreadyPresent")]
    assert check(history)
    # and early in it: B, 15.04 s after A's answer, gets it
    assert check([op(A, "acquire", 0, 201, end=0.05), op(B, "acquire", 15.01, 201, end=15.06)])
    # and in the middle of a long one: C refused at 15.3, B granted at 15.6 (A's lease began in 0.3-0.62)
    middle = [op(A, "acquire", 0, 201, end=1), op(C, "acquire", 15.3, 409, end=15.31, code="LeaseAlreadyPresent"),
              op(B, "acquire", 15.6, 201, end=15.62)]
    assert check(middle), check(middle).explain()
    # but not later than its window: refused at 16.2, A's lease (begun by 1) had ended
    assert not check(middle[:1] + [op(C, "acquire", 16.2, 409, end=16.21, code="LeaseAlreadyPresent")])


def test_two_holders_at_once_are_rejected():
    history = [op(A, "acquire", 0, 201), op(C, "acquire", 0.5, 409, code="LeaseAlreadyPresent"),
               op(B, "acquire", 1, 201), op(A, "renew", 2, 200)]
    failing, culprit = rejected(history)
    assert (culprit.client, culprit.action) == ("b", "acquire")
    assert [(o.client, o.action) for o in failing] == [("a", "acquire"), ("b", "acquire")]


def test_an_acknowledged_renewal_lost_is_rejected():
    """A renewed at 10 (until 25); B got the lease at 20: the renewal was lost."""
    history = [op(A, "acquire", 0, 201), op(A, "renew", 10, 200), op(B, "acquire", 20, 201)]
    failing, culprit = rejected(history)
    assert (culprit.client, culprit.action) == ("b", "acquire")
    assert len(failing) == 3  # without the renewal, B's acquire at 20 is legal
    assert check(history[:1] + history[2:])


def test_a_generation_going_back_is_rejected():
    history = [op(A, "acquire", 0, 201, generation=7), op(A, "release", 1, 200),
               op(B, "acquire", 2, 201, generation=7)]
    failing, culprit = rejected(history)
    assert culprit.generation == 7 and culprit.client == "b"
    assert check(history[:2] + [op(B, "acquire", 2, 201, generation=8)])
    # renewals and a same-id acquire keep the generation
    assert check(history[:1] + [op(A, "acquire", 1, 201, generation=7), op(A, "renew", 2, 200)])
    assert not check(history[:1] + [op(A, "acquire", 1, 201, generation=8)])


def test_a_break_that_ends_at_the_wrong_time_is_rejected():
    held = [op(A, "acquire", 0, 201, duration=60), op("breaker", "break", 5, 202, break_period=10, lease_time=10)]
    early = held + [op(B, "acquire", 8, 201)]  # the break ends at 15
    failing, culprit = rejected(early)
    assert (culprit.client, culprit.action) == ("b", "acquire")  # (A's 60 s lease alone shows it)
    late = held + [op(B, "acquire", 16, 409, code="LeaseAlreadyPresent")]
    assert len(rejected(late)[0]) == 3
    wrong_time = [held[0], op("breaker", "break", 5, 202, break_period=10, lease_time=30)]
    rejected(wrong_time)
    assert check(held + [op(B, "acquire", 12, 409, code="LeaseAlreadyPresent"), op(B, "acquire", 15.1, 201)])


def test_a_violation_in_a_long_history_is_reported_small():
    """A long valid history with one double grant planted in the middle:
    the report names the few operations that show it, not the history."""
    history = _valid_history(random.Random(7), clients=6, count=200)
    assert check(history), check(history).explain()
    holder = next(o for o in history[len(history) // 2:] if o.action == "acquire" and o.status == 201)
    assert holder.complete is not None  # answered: 201
    intruder = str(uuid.uuid4())  # granted the holder's generation: a second lease of that generation
    planted = Op("intruder", R, "acquire", holder.complete + 0.001, holder.complete + 0.002, 201,
                 proposed_id=intruder, duration=15, result_id=intruder, generation=holder.generation)
    failing, culprit = rejected(history + [planted])
    assert planted in failing and len(failing) <= 4, failing


def test_a_random_correct_history_of_many_clients_is_linearizable():
    for seed in range(3):
        history = _valid_history(random.Random(seed), clients=8, count=600)
        verdict = check(history)
        assert verdict, verdict.explain()


def _valid_history(rng: random.Random, *, clients: int, count: int) -> list[Op]:
    """What a correct server answers: the machine applied at instants that
    only go forwards, each inside a window of its own (some a second wide)
    that overlaps others; 5% with their outcomes unknown."""
    record, now, ops = machine.LeaseRecord(), 0.0, []
    ids = [str(uuid.UUID(int=n + 1)) for n in range(clients)]
    for _ in range(count):
        now += rng.choice([0.001, 0.01, 0.2, 3, 14.9, 15.1, 16])  # leases end between and within windows
        who = rng.randrange(clients)
        action = rng.choice(["acquire", "acquire", "renew", "release", "break", "change"])
        requests: dict[str, dict[str, Any]] = {  # the headers each action sends, as keyword arguments
            "acquire": {"proposed_id": ids[who], "duration": 15},
            "renew": {"lease_id": ids[who]}, "release": {"lease_id": ids[who]},
            "change": {"lease_id": ids[who], "proposed_id": ids[who]},
            "break": {"break_period": rng.choice([None, 0, 2])}}
        sent = requests[action]
        parse: dict[str, Any] = {k: uuid.UUID(v) if k.endswith("id") else v for k, v in sent.items()}
        try:
            outcome = machine.apply(action, record, _at(now), **parse)
            record = outcome.record
            answer: dict[str, Any] = dict(status={"acquire": 201, "break": 202}.get(action, 200),
                          result_id=str(outcome.lease_id) if action in ("acquire", "change") else None,
                          generation=record.generation if action == "acquire" else None,
                          lease_time=outcome.lease_time if action == "break" else None)
        except LeaseholdError as error:
            answer = dict(status=error.status, code=error.code)
        if rng.random() < 0.05:  # the answer never came
            answer = dict(status=None)
        wide = 1.0 if rng.random() < 0.3 else 0.02  # a slow answer: its instant anywhere in a second
        ops.append(Op(f"c{who}", R, action, now - rng.uniform(0, wide), now + rng.uniform(0, wide), **answer,
                      **{k: v for k, v in sent.items()}))
    return ops


def _at(seconds: float):
    return EPOCH + timedelta(seconds=seconds)


def test_an_answered_lease_id_the_model_would_not_hold_is_rejected():
    """Each grant names the lease the model holds after it: the id proposed,
    the id a change proposed, and an id the server drew is a new one."""
    wrong_grant = [op(A, "acquire", 0, 201, result_id=B)]  # proposed A, told B
    failing, culprit = rejected(wrong_grant)
    assert culprit.result_id == B
    assert check([op(A, "acquire", 0, 201)])
    wrong_change = [op(A, "acquire", 0, 201), op(A, "change", 1, 200, proposed_id=B, result_id=A)]
    assert rejected(wrong_change)[1].action == "change"
    assert check(wrong_change[:1] + [op(A, "change", 1, 200, proposed_id=B, result_id=B)])
    # drawn by the server (no id proposed): A's lease ended, and B is told A's id again, so A's renew
    # with its old id would hold the lease B believes it holds
    drawn = [op("a", "acquire", 0, 201, duration=15, result_id=A), op("a", "release", 1, 200, lease_id=A)]
    failing, culprit = rejected(drawn + [op("b", "acquire", 20, 201, duration=15, result_id=A)])
    assert (culprit.client, culprit.result_id) == ("b", A) and len(failing) == 2
    assert check(drawn + [op("b", "acquire", 20, 201, duration=15, result_id=B)])
    # an id a client proposed before is not a draw either, even if the lease it names never existed
    proposed = [drawn[0], op(C, "acquire", 0.5, 409, code="LeaseAlreadyPresent", proposed_id=B), drawn[1]]
    assert rejected(proposed + [op("b", "acquire", 2, 201, duration=15, result_id=B)])[1].client == "b"
    assert check(proposed + [op("b", "acquire", 2, 201, duration=15, result_id=C)])
