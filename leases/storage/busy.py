"""The writer busy past the wait, as the doors answer it: 503 ServerBusy
with Retry-After (nothing was written; the SDKs retry it)."""

from __future__ import annotations

from engines.busy import RETRY_AFTER_SECONDS, is_writer_busy

from leases.domain.errors import LeaseholdError

__all__ = ["RETRY_AFTER_SECONDS", "is_writer_busy", "server_busy"]


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
