"""A tenant's blob never runs as a page of this site (docs/decisions/0038): every Azure answer a
browser can be sent to -- Get Blob whole, ranged and streamed in chunks, its properties (HEAD),
its metadata, a 304, listings, errors, a SAS link whose rsct/rscd choose the Content-Type --
carries ``Content-Security-Policy: sandbox`` and ``X-Content-Type-Options: nosniff``, whatever
the blob or the SAS says. Lease answers (PUT) carry neither: the lean path answers them as the
general path does (tests/azure/test_azure_lean.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import requests
from azure.storage.blob import BlobSasPermissions, ContentSettings, generate_blob_sas

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests import azure_raw

# Not run again on PostgreSQL: the headers are the door's, whatever the database
# (docs/development/tests.md, "Which modules run on PostgreSQL").

PAGE = b"<!doctype html><script>document.title = 'ran'</script>"


def sandboxed(response: requests.Response) -> bool:
    return (response.headers.get("Content-Security-Policy") == "sandbox"
            and response.headers.get("X-Content-Type-Options") == "nosniff")


@pytest.fixture
def page_blob(service):
    """A blob a tenant uploaded as text/html, inline, with a script in it."""
    container = service.create_container("site")
    container.upload_blob("page.html", PAGE, content_settings=ContentSettings(
        content_type="text/html", content_disposition="inline"))
    return container.get_blob_client("page.html")


def test_get_blob_whole_ranged_head_metadata_and_304_are_sandboxed(page_blob, azure_server):
    path = f"/{DEV_ACCOUNT}/site/page.html"
    whole = azure_raw.signed("GET", azure_server, path)
    assert whole.status_code == 200 and whole.content == PAGE
    assert whole.headers["Content-Type"] == "text/html"  # the tenant's type is kept, and cannot run
    ranged = azure_raw.signed("GET", azure_server, path, headers={"x-ms-range": "bytes=0-9"})
    plain_range = azure_raw.signed("GET", azure_server, path, headers={"Range": "bytes=5-"})
    head = azure_raw.signed("HEAD", azure_server, path)
    metadata = azure_raw.signed("GET", azure_server, path + "?comp=metadata")
    unchanged = azure_raw.signed("GET", azure_server, path, headers={"If-None-Match": whole.headers["ETag"]})
    assert [r.status_code for r in (ranged, plain_range, head, metadata, unchanged)] == [206, 206, 200, 200, 304]
    for response in (whole, ranged, plain_range, head, metadata, unchanged):
        assert sandboxed(response), (response.request.method, response.status_code, dict(response.headers))


def test_the_sdks_download_is_sandboxed(page_blob):
    seen: list = []
    downloaded = page_blob.download_blob(raw_response_hook=lambda r: seen.append(r.http_response.headers))
    assert downloaded.readall() == PAGE
    assert downloaded.properties.content_settings.content_type == "text/html"
    assert seen and all(h["Content-Security-Policy"] == "sandbox" and h["X-Content-Type-Options"] == "nosniff"
                        for h in seen)


def test_a_chunked_blob_streamed_is_sandboxed(service, azure_server):
    container = service.create_container("big")
    content = b"<script>1</script>" + b"x" * (3 << 19)  # over 1 MiB: stored and streamed in chunks
    container.upload_blob("big.html", content, content_settings=ContentSettings(content_type="text/html"))
    whole = azure_raw.signed("GET", azure_server, f"/{DEV_ACCOUNT}/big/big.html")
    ranged = azure_raw.signed("GET", azure_server, f"/{DEV_ACCOUNT}/big/big.html", headers={"Range": "bytes=0-17"})
    assert (whole.status_code, whole.content, ranged.status_code, ranged.content) == (
        200, content, 206, b"<script>1</script>")
    assert sandboxed(whole) and sandboxed(ranged)


@pytest.mark.parametrize("rsct, rscd", [("text/html", "inline"), ("image/svg+xml", None), ("text/html", None)])
def test_a_sas_link_choosing_the_content_type_is_sandboxed(service, azure_server, rsct, rscd):
    """A service SAS signs rsct/rscd: its link serves a text/plain blob as the SAS says, sandboxed."""
    container = service.create_container("notes")
    container.upload_blob("note.txt", PAGE, content_settings=ContentSettings(content_type="text/plain"))
    token = generate_blob_sas(DEV_ACCOUNT, "notes", "note.txt", account_key=DEV_KEY,
                              permission=BlobSasPermissions(read=True),
                              expiry=datetime.now(timezone.utc) + timedelta(hours=1),
                              content_type=rsct, content_disposition=rscd)
    url = f"{azure_server}/{DEV_ACCOUNT}/notes/note.txt?{token}"
    for response in (requests.get(url, timeout=30), requests.head(url, timeout=30),
                     requests.get(url, headers={"Range": "bytes=0-4"}, timeout=30)):
        assert response.status_code in (200, 206), response.text
        assert response.headers["Content-Type"] == rsct
        assert sandboxed(response), dict(response.headers)


def test_listings_errors_and_other_reads_are_sandboxed(page_blob, azure_server):
    reads = [azure_raw.signed("GET", azure_server, f"/{DEV_ACCOUNT}/site?restype=container&comp=list"),
             azure_raw.signed("GET", azure_server, f"/{DEV_ACCOUNT}/site?restype=container"),
             azure_raw.signed("GET", azure_server, f"/{DEV_ACCOUNT}?comp=list"),
             azure_raw.signed("GET", azure_server, f"/{DEV_ACCOUNT}/site/missing.html"),
             azure_raw.signed("GET", azure_server, f"/{DEV_ACCOUNT}/site/page.html", sign=False),
             requests.get(f"{azure_server}/NotAnAccount/x", timeout=30),  # InvalidUri, before any view
             requests.post(f"{azure_server}/{DEV_ACCOUNT}/site/page.html", timeout=30)]
    assert [r.status_code for r in reads] == [200, 200, 200, 404, 401, 400, 401]
    for response in reads:
        assert sandboxed(response), (response.request.method, response.url, response.status_code)


def test_lease_answers_are_left_as_they_were(page_blob, azure_server):
    """PUT and DELETE are no navigation: the lease path, lean or general, stays as it was."""
    acquired = azure_raw.lease(azure_server, f"/{DEV_ACCOUNT}/site/page.html", "acquire", duration=15)
    assert acquired.status_code == 201
    assert "Content-Security-Policy" not in acquired.headers
