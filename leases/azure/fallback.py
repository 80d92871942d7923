"""Paths that belong to the Azure door by position (not /admin, /api or
/static) but name no account Leasehold could hold (upper case, too short or
long, other characters): Azure's XML 400 InvalidUri, not Django's HTML 404,
so an SDK pointed at a wrong URL reads an error it understands."""

from __future__ import annotations

from leases.domain import clock, guids
from leases.domain.errors import LeaseholdError
from leases.azure import wire


def invalid_uri(request, *args, **kwargs):
    response = wire.error_response(LeaseholdError("InvalidUri"), request_id=guids.request_id(), now=clock.now(),
                                   head=request.method == "HEAD")
    response["x-ms-request-id"] = guids.request_id()
    response["Date"] = wire.http_date(clock.now())
    return response
