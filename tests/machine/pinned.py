"""The counterexamples of the planted bugs, pinned on the properties with
hypothesis's ``@example`` so that each property fails on its bug in every run,
not only when its few hundred random examples happen to reach it (at its own
budget two_clients found "a lease runs one second short" in 2-3 runs of 10-20).
test_machine_mutants.py checks that each property, run as the suite runs it,
fails on each of its mutants; the random examples keep searching beyond these.
Each example is in the property's own input space (its strategy's shape)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from hypothesis import example

from leases.domain import machine as m

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)  # the properties' NOW
A, B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)  # the ids OWN gives p and q
FOREVER = ("acquire", {"duration": -1, "proposed_id": None})
FIFTEEN = ("acquire", {"duration": 15, "proposed_id": None})

PINNED: dict[str, list[tuple]] = {
    "every_outcome_is_consistent": [
        (m.LeaseRecord(), FIFTEEN, 0.0),  # the new lease's fencing token
        (m.LeaseRecord(m.BREAKING, A, None, None, NOW + timedelta(seconds=1)), ("break", {"break_period": 1}),
         0.5),  # re-breaking a breaking lease
    ],
    "two_clients_never_both_hold": [
        ([("p", FOREVER, 0), ("q", FOREVER, 0)],),  # a second holder
        ([("p", FIFTEEN, 0), ("q", FIFTEEN, 14)],),  # a lease one second short
        ([("p", FIFTEEN, 0), ("p", ("renew", {"lease_id": A}), 10), ("q", FIFTEEN, 10)],),  # a renew not renewing
        ([("q", FOREVER, 0), ("p", ("change", {"lease_id": A, "proposed_id": A}), 0), ("p", FOREVER, 0)],),
        ([("q", FOREVER, 0), ("p", ("release", {"lease_id": A}), 0), ("p", FOREVER, 0)],),
        ([("p", FOREVER, 0), ("p", ("break", {"break_period": 1}), 0), ("q", FOREVER, 0)],),
    ],
    "legacy_and_current_agree": [
        (m.LeaseRecord(), ("acquire", {}), 0.0),  # a legacy lease is 60 s
        (m.LeaseRecord(m.BREAKING, A, None, None, NOW + timedelta(seconds=5)), ("break", {}), 0.0),
    ],
    "legacy_release_invisible": [
        (m.LeaseRecord(m.AVAILABLE, B, 15), ("renew", {"lease_id": B}), 0.0, "blob"),
    ],
    "old_and_new_never_both_hold": [
        ([("p", False, ("acquire", {}), FOREVER, 0), ("q", False, ("acquire", {}), FOREVER, 0)],),
        ([("p", True, ("acquire", {}), FOREVER, 0), ("p", True, ("release", {"lease_id": A}), FOREVER, 0),
          ("q", True, ("renew", {"lease_id": B}), FOREVER, 0)],),  # a legacy renew of p's released lease
    ],
}


def pinned(prop: str):
    """The property test with its pinned counterexamples as ``@example``s."""
    def decorate(test):
        for args in reversed(PINNED[prop]):
            test = example(*args)(test)
        return test
    return decorate
