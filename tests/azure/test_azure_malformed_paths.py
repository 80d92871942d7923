"""A path that is the Azure door's by position but names no account it could
hold answers Azure's XML 400 InvalidUri for every method (PUT, DELETE and
``OPTIONS *`` included), never one of Django's HTML pages (a CSRF 403, a
404)."""

from __future__ import annotations

import socket
from xml.etree import ElementTree

import pytest
import requests

from tests import azure_raw

PATHS = ["/DEVSTOREACCOUNT1/c/b", "/ab/c/d", "//devstoreaccount1/c/b", "/a.b/c", "/"]


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "POST", "OPTIONS", "PATCH"])
@pytest.mark.parametrize("path", PATHS)
def test_every_method_on_a_malformed_account_is_azure_xml(azure_server, method, path):
    answer = requests.request(method, azure_server + path, data=b"x" if method in ("PUT", "POST") else None,
                              timeout=10)
    code = answer.headers.get("x-ms-error-code")
    # A server may fold '//' into one slash before routing: then it is an Azure
    # request of that account, refused as one (unsigned: 401), in XML all the same.
    expected = {"InvalidUri", "NoAuthenticationInformation"} if path.startswith("//") else {"InvalidUri"}
    assert code in expected and 400 <= answer.status_code < 500, answer.text[:200]
    assert answer.headers["Content-Type"].startswith("application/xml")
    assert ElementTree.fromstring(answer.content.decode("utf-8-sig")).findtext("Code") == code


def test_head_on_a_malformed_account_has_the_code_and_no_body(azure_server):
    answer = requests.head(azure_server + "/AB/c", timeout=10)
    assert (answer.status_code, answer.headers["x-ms-error-code"], answer.content) == (400, "InvalidUri", b"")


def test_options_star_is_azure_xml(azure_server):
    host, port = azure_server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0], head
    assert b"InvalidUri" in body


def test_the_sites_own_paths_keep_their_answers(azure_server, client):
    assert requests.get(azure_server + "/health/live", timeout=10).status_code == 200
    assert requests.get(azure_server + "/admin/login/", timeout=10).status_code == 200
    assert requests.post(azure_server + "/admin/login/", timeout=10).status_code == 403  # CSRF: the admin's own answer


@pytest.mark.parametrize("method,query", [("PUT", "?restype=container&comp=lease"), ("PUT", "?comp=lease"),
                                          ("GET", ""), ("DELETE", "?restype=container")])
def test_a_blob_in_no_container_is_invalid_uri(azure_server, method, query):
    # '/account//b' once reached the blob lease route with no resource to name: a 500
    answer = azure_raw.signed(method, azure_server, "/devstoreaccount1//b" + query,
                              headers={"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15"})
    assert (answer.status_code, answer.headers.get("x-ms-error-code")) == (400, "InvalidUri"), answer.text[:300]
