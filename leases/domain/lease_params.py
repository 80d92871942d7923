"""Lease parameters as the doors receive them, parsed once. The Azure door gets ``x-ms-lease-id``,
``x-ms-proposed-lease-id``, ``x-ms-lease-duration`` and ``x-ms-lease-break-period`` as header
strings; the JSON API gets lease ids as JSON strings and the numbers as JSON integers. Both parse
them here, by the same rules (lease ids in any .NET GUID spelling, leases.domain.guids; whole
numbers), into the typed values the services take. A value that does not parse is 400
InvalidHeaderValue naming its field. Ranges (15-60 s, -1; 0-60 s) are not checked here: the state
machine checks them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields

from leases.domain import guids, numbers
from leases.domain.errors import LeaseholdError


@dataclass(frozen=True)
class LeaseParams:
    lease_id: uuid.UUID | None = None
    proposed_lease_id: uuid.UUID | None = None
    duration: int | None = None  # seconds, or machine.INFINITE
    break_period: int | None = None  # seconds

    def as_kwargs(self) -> dict:
        # Not dataclasses.asdict, which deep-copies every value (the UUIDs
        # too), on every lease request (bench/README.md, figures).
        return {"lease_id": self.lease_id, "proposed_lease_id": self.proposed_lease_id,
                "duration": self.duration, "break_period": self.break_period}


NAMES = tuple(f.name for f in fields(LeaseParams))  # as the services' keyword arguments are named
if set(LeaseParams().as_kwargs()) != set(NAMES):  # as_kwargs is written out: it must name every field
    raise AssertionError("LeaseParams.as_kwargs does not name every field")


def lease_id(value: str | None, *, noun: str, field: str = "lease_id") -> uuid.UUID | None:
    """An optional lease id (None when absent)."""
    return guids.parse(value, field, noun=noun)


def parse_int(value: str | int | None, field: str, *, noun: str) -> int | None:
    """A header's text or a JSON integer, by the one strict parser
    (leases/domain/numbers.py), in the range the history's columns hold (32 bits on
    PostgreSQL), checked before any arithmetic; anything else is 400
    InvalidHeaderValue naming the field."""
    if value is None:
        return value
    number = numbers.whole(value, low=-(2**31), high=2**31 - 1)  # the history's integer columns, on every database
    if number is None:
        raise LeaseholdError("InvalidHeaderValue", noun=noun, field=field,
                             value=value if isinstance(value, str) else str(value)[:40])
    return number


def parse(*, noun: str, lease_id: str | None = None, proposed_lease_id: str | None = None,
          duration: str | int | None = None, break_period: str | int | None = None) -> LeaseParams:
    """The parameters of a lease action; the first that does not parse
    raises, in this order (Azure's)."""
    return LeaseParams(lease_id=guids.parse(lease_id, "lease_id", noun=noun),
                       proposed_lease_id=guids.parse(proposed_lease_id, "proposed_lease_id", noun=noun),
                       duration=parse_int(duration, "duration", noun=noun),
                       break_period=parse_int(break_period, "break_period", noun=noun))


def parse_for_action(*, noun: str, **raw) -> tuple[LeaseParams, LeaseholdError | None]:
    """``parse(**raw)``, or no parameters and the 400 to refuse the action
    with: the services record a lease action refused for its parameters in
    the history, as every refused attempt (services.lease_action's
    ``unparsed``), after checking the action itself, as Azure does."""
    try:
        return parse(noun=noun, **raw), None
    except LeaseholdError as err:
        return LeaseParams(), err
