"""The writer busy past the wait, as the doors answer it: 503 ServerBusy
with Retry-After (nothing was written; the SDKs retry it); and a commit
whose outcome is not known: 500 OperationTimedOut (it may or may not have
been made; docs/decisions/0045)."""

from __future__ import annotations

from engines.writer_wait import RETRY_AFTER_SECONDS, CommitOutcomeUnknown, is_writer_busy

from leases.domain.errors import LeaseholdError

__all__ = ["RETRY_AFTER_SECONDS", "is_writer_busy", "outcome_unknown", "server_busy"]


def server_busy(exc: BaseException):
    """The LeaseholdError a door answers for ``exc`` if the writer was busy
    past the wait (503 ServerBusy: nothing was written, retry), else None."""
    if not is_writer_busy(exc):
        return None
    err = LeaseholdError("ServerBusy", message="The server is currently unable to receive requests. "
                                               "Please retry your request.",
                         detail={"retry_after": RETRY_AFTER_SECONDS})
    err.status = 503
    return err


def outcome_unknown(exc: BaseException) -> tuple[LeaseholdError, str] | None:
    """The LeaseholdError a door answers for ``exc`` if its commit's outcome
    is not known (500 OperationTimedOut, no Retry-After: the write may or may
    not have been made), with the cause to log; else None."""
    link: BaseException | None = exc
    for _ in range(8):  # the exception, or what it was raised from
        if link is None:
            return None
        if isinstance(link, CommitOutcomeUnknown):
            return LeaseholdError("OperationTimedOut"), str(link)
        link = link.__cause__ or link.__context__
    return None
