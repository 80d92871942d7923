"""The access log never shows a full lease id typed into the admin (issue 48):
in an admin URL's query string every GUID, in any spelling and encoding (the
search box, a made-up parameter), is shown as its fingerprint, on the
uvicorn access logger's record as serving/front.py filters it. Other admin
parameters, and the rest of the line, are left as they were."""

from __future__ import annotations

import logging
import uuid

import pytest

from leases.domain import fingerprints
from leases.operations.logformat import LeaseIdsOut, without_lease_ids

ID = "6f1c2a9e-3b7d-4c55-9a1e-0d2b8f7c4e31"
SHOWN = f"fingerprint:{fingerprints.of(ID)}"


def _access_record(path: str) -> logging.LogRecord:
    """A record as uvicorn's access logger makes it: (client, method, path with query, version, status)."""
    return logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                             ("127.0.0.1:5000", "GET", path, "1.1", 200), None)


@pytest.mark.parametrize("query, expected", [
    (f"q={ID}", f"q={SHOWN}"),
    (f"q={ID.upper()}", f"q={SHOWN}"),
    (f"q={ID.replace('-', '')}", f"q={SHOWN}"),
    (f"q=%7B{ID}%7D&state=leased", f"q=%7B{SHOWN}%7D&state=leased"),
    (f"q=%28{ID}%29", f"q=%28{SHOWN}%29"),
    (f"q=orders+{ID}+x", f"q=orders+{SHOWN}+x"),
    (f"q=orders%20{ID.replace('-', '%2D')}", f"q=orders+{SHOWN}"),
    (f"action=acquire&lease_id__lt={ID}", f"action=acquire&lease_id__lt={SHOWN}"),
    (f"{ID}=1", f"{SHOWN}=1"),
])
@pytest.mark.parametrize("path", ["/admin/leases/blob/", "/admin/leases/leaseevent/", "/admin/leases/leaseevent/export.csv"])
def test_a_lease_id_in_an_admin_query_string_is_shown_as_its_fingerprint(path, query, expected):
    record = _access_record(f"{path}?{query}")
    assert LeaseIdsOut().filter(record)
    line = record.getMessage()
    assert line == f'127.0.0.1:5000 - "GET {path}?{expected} HTTP/1.1" 200'
    assert ID not in line.lower() and uuid.UUID(ID).hex not in line.lower()


@pytest.mark.parametrize("url", [
    "/admin/leases/blob/?state=leased&holder=account%3Aopsstore+from+10.1.2.3&o=5&p=2",
    "/admin/leases/leaseevent/?occurred_at__year=2026&q=BUCKET-0042",
    "/admin/leases/leaseevent/?q=" + "a" * 40,  # 40 hex digits: a hash, no GUID
    "/admin/leases/blob/12/change/",
    f"/api/v1/events/?request_id={ID}",  # the API's request ids are no lease ids: only ?lease_id= is hidden there
])
def test_the_rest_of_a_line_is_left_alone(url):
    assert without_lease_ids(url) == url
