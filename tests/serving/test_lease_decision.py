"""One decision of "is it a lease request" (leases/domain/paths.py
``is_lease_request``), from the percent-decoded query, shared by the
server's lease lane (and so its credential gate) and the Azure door's
router: ``?comp=%6Cease`` is a lease request in both, ``?x=comp=lease`` in
neither (issue 48, point 6)."""

from __future__ import annotations

import pytest

from leases.domain import paths
from serving.asgi import LeaseholdASGI

LEASES = [("/devstoreaccount1/c/b", "comp=lease"), ("/devstoreaccount1/c/b", "comp=%6Cease"),
          ("/devstoreaccount1/c/b", "%63omp=%6c%65%61%73%65"), ("/devstoreaccount1/c", "restype=container&comp=lease"),
          ("/devstoreaccount1/c/b", "sv=2025-11-05&sig=a%2Bb&comp=lease&timeout=30"),
          ("/api/v1/leases/renew/devstoreaccount1/c/b", "")]
OTHERS = [("/devstoreaccount1/c/b", "x=comp=lease"), ("/devstoreaccount1/c/b", "comp=leases"),
          ("/devstoreaccount1/c/b", "xcomp=lease"), ("/devstoreaccount1/c/b", "comp=Lease"),
          ("/devstoreaccount1/c/b", "comp=lease%00"), ("/devstoreaccount1/c/b", "comp=metadata&y=comp=lease"),
          ("/devstoreaccount1/c/b", "comp=lease&comp=metadata"),  # the last, as request.GET (the door refuses both)
          ("/admin/leases/", "comp=lease"), ("/api/v1/blobs/devstoreaccount1/c/b", "comp=lease")]


@pytest.mark.parametrize("path, query", LEASES)
def test_lease_requests(path, query):
    assert paths.is_lease_request(path, query)
    assert LeaseholdASGI.lane_name({"path": path, "query_string": query.encode(), "method": "PUT"}) == "lease"


@pytest.mark.parametrize("path, query", OTHERS)
def test_not_lease_requests(path, query):
    assert not paths.is_lease_request(path, query)
    assert LeaseholdASGI.lane_name({"path": path, "query_string": query.encode(), "method": "PUT",
                                    "headers": []}) != "lease"


def test_the_door_reads_comp_as_the_lane_does():
    from django.http import QueryDict

    for _, query in LEASES + OTHERS:
        assert paths.query_value(query, "comp") == QueryDict(query).get("comp"), query
