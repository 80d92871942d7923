"""The header rules both doors share (leases/domain/client_headers.py): the client
request id, echoed and recorded only when valid, on the Azure endpoint and
the JSON API alike; metadata names as WSGI hands them over."""

from __future__ import annotations

import pytest

from leases.domain import client_headers
from leases.domain.client_headers import API_CLIENT_REQUEST_ID, AZURE_CLIENT_REQUEST_ID
from leases.models import LeaseEvent

from tests import azure_raw
from tests.api.helpers import lease

BOTH = (API_CLIENT_REQUEST_ID, AZURE_CLIENT_REQUEST_ID)


@pytest.mark.parametrize("meta, keys, expected", [
    ({AZURE_CLIENT_REQUEST_ID: "trace-1"}, (AZURE_CLIENT_REQUEST_ID,), "trace-1"),
    ({API_CLIENT_REQUEST_ID: "trace-1"}, (AZURE_CLIENT_REQUEST_ID,), ""),  # not the Azure door's header
    ({API_CLIENT_REQUEST_ID: "api", AZURE_CLIENT_REQUEST_ID: "azure"}, BOTH, "api"),
    ({API_CLIENT_REQUEST_ID: "", AZURE_CLIENT_REQUEST_ID: "azure"}, BOTH, "azure"),  # empty counts as absent
    ({AZURE_CLIENT_REQUEST_ID: "x" * 1024}, BOTH, "x" * 1024),
    ({AZURE_CLIENT_REQUEST_ID: "x" * 1025}, BOTH, ""),
    ({AZURE_CLIENT_REQUEST_ID: "tab\there"}, BOTH, ""),
    ({AZURE_CLIENT_REQUEST_ID: "line\n"}, BOTH, ""),
    ({AZURE_CLIENT_REQUEST_ID: "caf\u00e9"}, BOTH, ""),
    ({}, BOTH, ""),
])
def test_client_request_id_rule(meta, keys, expected):
    assert client_headers.client_request_id(meta, keys) == expected


def test_metadata_names_from_wsgi():
    environ = {"HTTP_X_MS_META_BUILD_ID": "42", "HTTP_X_MS_META_OWNER": "ops", "HTTP_X_MS_VERSION": "2025-11-05"}
    assert client_headers.metadata_from_environ(environ) == {"build_id": "42", "owner": "ops"}
    assert client_headers.signed_metadata_header("HTTP_X_MS_META_BUILD_ID") == "x-ms-meta-build_id"
    assert client_headers.signed_metadata_header("HTTP_X_MS_META_BUILD_ID", dash=True) == "x-ms-meta-build-id"
    assert client_headers.metadata_names_could_hold_dashes(environ)
    assert not client_headers.metadata_names_could_hold_dashes({"HTTP_X_MS_META_OWNER": "ops"})
    err = client_headers.dash_in_metadata_name()
    assert (err.code, err.detail["reason"]) == ("InvalidMetadata",
                                                "Metadata names are C# identifiers and cannot contain '-'.")


def test_an_overlong_client_request_id_is_neither_echoed_nor_recorded_on_either_door(service, azure_server, api):
    service.create_container("box")
    response = azure_raw.lease(azure_server, "/devstoreaccount1/box", "acquire", duration=-1,
                               **{"x-ms-client-request-id": "x" * 1025})
    assert response.status_code == 201 and "x-ms-client-request-id" not in response.headers
    response = lease(api, "release", "devstoreaccount1/box", {"lease_id": response.headers["x-ms-lease-id"]},
                     HTTP_X_CLIENT_REQUEST_ID="y" * 1025)
    assert response.status_code == 200 and "X-Client-Request-Id" not in response
    assert [(e.action, e.via, e.client_request_id) for e in LeaseEvent.objects.order_by("id")] == [
        ("acquire", "azure", ""), ("release", "api", "")]
