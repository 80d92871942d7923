"""A request the server refused before its door handled it (its head or body too large, its
credentials failed, too many refusals from its address): what with, as serving decides it, which
each door renders in its own protocol's shape (serving/doors.py, ``Door.refusal``)."""

from __future__ import annotations

from dataclasses import dataclass

from leases.domain.errors import LeaseholdError


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int  # HTTP's: 413, 414, 431 (sizes), 401, 403 (credentials), 429 (too many refused; retry)
    code: str  # the error code, of the vocabulary both doors share (leases/domain/errors.py)
    message: str = ""  # the server's own words; "": the door's for the code
    reason: str = ""  # why, where the door's shape has room for it (the JSON API's "reason")
    retry_after: int | None = None  # seconds
    error: LeaseholdError | None = None  # the credentials check's own error, as the door would raise it
