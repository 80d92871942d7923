"""A door's lean lease call as the write queue takes it: its arguments made a LeaseWrite, the
write's outcome settled as the call's result or error (a signing key the write found gone, as the
door refuses a key that does not sign)."""

from __future__ import annotations

from typing import cast

from leases.domain.errors import LeaseholdError
from leases.services.lease_actions import LeaseResult, LeaseWrite
from leases.services.lease_rows import KeyGone


class QueuedLeaseCall:
    """A door's lean lease call as the write queue takes it (its Call): ``writes`` makes its
    ``arguments`` (None: refused or declined before the write) a LeaseWrite, ``written`` settles
    the outcome as ``result`` or ``error``."""

    __slots__ = ("arguments", "pending", "result", "error")
    arguments: dict | None
    pending: LeaseWrite | None
    result: LeaseResult | None
    error: Exception | None

    def writes(self):
        """Its write, for the write queue (None: nothing to write)."""
        if self.arguments is None:
            return None
        self.pending = LeaseWrite(self.arguments)
        return self.pending.write

    def written(self, result, error: BaseException | None) -> None:
        """The write's outcome, once committed: the service's result or refusal."""
        answer = cast(LeaseWrite, self.pending).outcome(result, error)  # writes() made it
        self.settle(self.key_gone(answer) if isinstance(answer, KeyGone) else answer)

    def key_gone(self, gone: KeyGone) -> Exception:
        """The door's refusal of a request whose signing key the write found
        gone (``gone.keys``: the account's keys in its snapshot)."""
        return LeaseholdError("AuthenticationFailed")

    def settle(self, answer) -> None:
        """The service's answer: a result, or the error it raised."""
        if isinstance(answer, Exception):
            self.error = answer
        else:
            self.result = answer
