"""A service SAS's response-header overrides (rscc, rscd, rsce, rscl, rsct)
are honoured only where the SAS signs them: from sv=2013-08-15 they are in
the string to sign; before (2012-02-12) they are not, so anyone holding the
SAS could add them, and they are ignored (issue 48)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from urllib.parse import urlencode

import pytest
import requests

from leases.auth.sharedkey import sign
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY

OVERRIDES = {"rscc": "no-store", "rscd": "attachment; evil.html", "rsce": "identity", "rscl": "xx", "rsct": "text/html"}
HEADERS = {"rscc": "Cache-Control", "rscd": "Content-Disposition", "rsce": "Content-Encoding",
           "rscl": "Content-Language", "rsct": "Content-Type"}


def _service_sas(version: str, *, signed_overrides: bool) -> str:
    """A read SAS for devstoreaccount1/box/item.bin as Azure's string-to-sign
    of ``version`` has it, with every override in its query."""
    expiry = (datetime.now(timezone.utc) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fields = ["r", "", expiry, f"/{DEV_ACCOUNT}/box/item.bin", "", version]  # sp st se resource si sv
    if signed_overrides:
        fields += [OVERRIDES[name] for name in ("rscc", "rscd", "rsce", "rscl", "rsct")]
    signature = sign(DEV_KEY, "\n".join(fields))
    return urlencode({"sv": version, "sr": "b", "sp": "r", "se": expiry, **OVERRIDES, "sig": signature})


@pytest.fixture
def box(service):
    container = service.create_container("box")
    container.upload_blob("item.bin", b"content")
    return container


def _read(azure_server: str, token: str) -> list[requests.Response]:
    url = f"{azure_server}/{DEV_ACCOUNT}/box/item.bin?{token}"
    headers = {"x-ms-version": "2025-11-05"}
    return [requests.get(url, headers=headers, timeout=10), requests.head(url, headers=headers, timeout=10)]


def test_overrides_of_an_old_version_sas_are_not_signed_and_ignored(box, azure_server):
    for response in _read(azure_server, _service_sas("2012-02-12", signed_overrides=False)):
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"] == "application/octet-stream"
        assert not {"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language"} & \
            set(response.headers)


def test_overrides_a_newer_sas_signs_are_honoured(box, azure_server):
    for response in _read(azure_server, _service_sas("2013-08-15", signed_overrides=True)):
        assert response.status_code == 200, response.text
        assert {header: response.headers.get(header) for header in HEADERS.values()} == \
            {HEADERS[name]: value for name, value in OVERRIDES.items()}


def test_a_newer_sas_with_unsigned_overrides_is_refused(box, azure_server):
    for response in _read(azure_server, _service_sas("2013-08-15", signed_overrides=False)):
        assert response.status_code == 403
