"""LEASEHOLD_ADMIN_HOSTS (leases/admin/hosts.py, leases/azure/handler.py; docs/decisions/0038) through the live server's WSGI
application: named, the admin, the JSON API and their static files answer only on the admin's
hosts and the Azure door never there, each refusal in its door's shape; unset, every host serves
everything as before. ``localhost`` and ``127.0.0.1`` are the two hosts: both reach the server,
and a browser counts them as two sites. The production server, lean paths included:
tests/processes/test_origin_split_server.py."""

from __future__ import annotations

import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobServiceClient

from leases.domain import paths
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests import azure_raw
from tests.conftest import CONNECTION
from tests.sdk_errors import sdk_error_code

ADMIN_PAGES = ["/admin/login/", "/admin/", "/admin", "/static/admin/css/base.css", "/favicon.ico"]


@pytest.fixture
def hosts(service, azure_server):
    """(blob host's base URL, admin host's base URL), and a blob to read."""
    service.create_container("docs").upload_blob("page.html", b"<p>hi</p>")
    return azure_server, azure_server.replace("127.0.0.1", "localhost")


def get(url: str, **kw) -> requests.Response:
    return requests.get(url, allow_redirects=False, timeout=30, **kw)


@pytest.mark.parametrize("admin_hosts", [frozenset(), frozenset({"localhost"})])
def test_the_blob_host_serves_blobs_and_health(hosts, settings, admin_hosts):
    settings.LEASEHOLD_ADMIN_HOSTS = admin_hosts
    blobs, _ = hosts
    assert azure_raw.signed("GET", blobs, f"/{DEV_ACCOUNT}/docs/page.html").content == b"<p>hi</p>"
    client = BlobServiceClient.from_connection_string(CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=blobs))
    assert client.get_blob_client("docs", "page.html").download_blob().readall() == b"<p>hi</p>"
    assert get(blobs + "/health/live").status_code == 200


def test_unset_every_host_serves_everything_as_before(hosts, settings):
    settings.LEASEHOLD_ADMIN_HOSTS = frozenset()
    for base in hosts:
        assert [get(base + path).status_code for path in ADMIN_PAGES] == [200, 302, 404, 200, 302], base
        assert get(base + "/api/v1/containers/").status_code == 401  # the API's own refusal: no credentials
        assert azure_raw.signed("GET", base, f"/{DEV_ACCOUNT}/docs/page.html").status_code == 200


def test_named_the_admin_and_api_answer_only_on_the_admin_host(hosts, settings):
    settings.LEASEHOLD_ADMIN_HOSTS = frozenset({"localhost"})
    blobs, admin = hosts
    assert [get(admin + path).status_code for path in ADMIN_PAGES] == [200, 302, 404, 200, 302]
    assert get(admin + "/api/v1/containers/").status_code == 401
    assert get(admin + "/health/ready").status_code == 200
    assert get(admin + "/metrics").status_code == get(blobs + "/metrics").status_code == 401  # its own refusal

    for path in ADMIN_PAGES:
        page = get(blobs + path)
        assert page.status_code == 404 and b"not served on this host" in page.content, path
        assert page.headers["X-Frame-Options"] == "DENY" and page.headers["X-Content-Type-Options"] == "nosniff"
    for path in ("/api/v1/containers/", "/api/v1/leases/break/devstoreaccount1/docs/page.html", "/api/v1/docs/"):
        refused = requests.post(blobs + path, json={}, timeout=30) if "leases" in path else get(blobs + path)
        assert refused.status_code == 404, path
        assert refused.json()["code"] == "ResourceNotFound", refused.text


def test_named_the_azure_door_answers_nothing_on_the_admin_host(hosts, settings):
    settings.LEASEHOLD_ADMIN_HOSTS = frozenset({"localhost"})
    blobs, admin = hosts
    for method in ("GET", "HEAD", "PUT"):
        refused = azure_raw.signed(method, admin, f"/{DEV_ACCOUNT}/docs/page.html")
        assert (refused.status_code, azure_raw.error_code(refused)) == (400, "InvalidUri"), method
    assert b"<Code>InvalidUri</Code>" in azure_raw.signed("GET", admin, f"/{DEV_ACCOUNT}/docs/page.html").content
    lease = azure_raw.lease(admin, f"/{DEV_ACCOUNT}/docs/page.html", "acquire", duration=15)
    assert (lease.status_code, azure_raw.error_code(lease)) == (400, "InvalidUri")
    client = BlobServiceClient.from_connection_string(CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=admin),
                                                      retry_total=0)
    with pytest.raises(HttpResponseError) as refused_sdk:
        client.get_blob_client("docs", "page.html").download_blob().readall()
    assert sdk_error_code(refused_sdk.value) == "InvalidUri"
    # Nothing was done by the refused requests: the blob is there and unleased on its own host.
    props = client.from_connection_string(CONNECTION.format(a=DEV_ACCOUNT, k=DEV_KEY, url=blobs)) \
        .get_blob_client("docs", "page.html").get_blob_properties()
    assert props.lease.state == "available"


@pytest.mark.parametrize("host, named, expected", [
    ("admin.example.com", {"admin.example.com"}, True),
    ("Admin.Example.COM:8443", {"admin.example.com"}, True),
    ("admin.example.com:8443", {"admin.example.com:9443"}, False),
    ("127.0.0.1:10001", {"127.0.0.1:10001"}, True),
    ("127.0.0.1:10000", {"127.0.0.1:10001"}, False),
    ("[::1]:10001", {"[::1]"}, True),
    ("[::1]", {"[::1]:10001"}, False),
    ("admin.example.com.evil.test", {"admin.example.com"}, False),
    ("", {"admin.example.com"}, False),
])
def test_which_host_headers_name_an_admin_host(host, named, expected):
    assert paths.admin_host(host, frozenset(named)) is expected


def test_the_variable_is_read_and_checked_at_start():
    from leases import conf
    from leases.conf.env import SettingError

    read = conf.load({"LEASEHOLD_ADMIN_HOSTS": " Admin.Example.NET , 127.0.0.1:10001,[::1]:9 ",
                      "LEASEHOLD_ALLOWED_HOSTS": "blobs.example.com,127.0.0.1"})
    assert read.admin_hosts == ("admin.example.net", "127.0.0.1:10001", "[::1]:9")
    assert read.answered_hosts == ("blobs.example.com", "127.0.0.1", "admin.example.net", "[::1]")
    assert conf.load({}).admin_hosts == ()
    for bad in ("https://admin.example.net", "admin.example.net/admin/", "*", "admin example", "host:port"):
        with pytest.raises(SettingError, match="LEASEHOLD_ADMIN_HOSTS"):
            conf.load({"LEASEHOLD_ADMIN_HOSTS": bad})
