"""Which setting makes the admin's cookies Secure and sends HSTS, each alone
through a real server process (test_tls.py's server has both, so it cannot
tell): TLS on the server's own port with no proxy trusted; a trusted proxy
with no TLS, for requests it forwards as https, and no HSTS for those it
forwards as http or for anyone else claiming https."""

from __future__ import annotations

import http.client

import pytest
import requests

from tests.processes.test_tls import PASSWORD, _certificates
from tests.server_process import Instance, prepare

pytestmark = pytest.mark.processes

HSTS = "max-age=31536000"


def _server(tmp_path, **env) -> Instance:
    database = tmp_path / "leasehold.sqlite3"
    prepare(str(database), tmp_path)
    server = Instance(str(database), tmp_path, "server", workers=1)
    server.env.update(env)
    return server


def _cookies(response: requests.Response) -> dict[str, bool]:
    """Each cookie the answer set: whether it is Secure."""
    return {cookie.name: bool(cookie.secure) for cookie in response.cookies}


def _log_in(session: requests.Session, url: str, headers: dict) -> tuple[requests.Response, requests.Response]:
    """The login page, then the login; behind the proxy the client's https
    ends at the proxy, so the Secure cookie is sent back by hand."""
    page = session.get(f"{url}/admin/login/", headers=headers, timeout=30)
    assert page.status_code == 200, page.text[:300]
    token = page.cookies["csrftoken"]
    done = session.post(f"{url}/admin/login/", allow_redirects=False, timeout=30, headers={
        **headers, "Referer": f"{url.replace('http://', 'https://')}/admin/login/", "Cookie": f"csrftoken={token}"},
        data={"username": "admin", "password": PASSWORD, "next": "/admin/", "csrfmiddlewaretoken": token})
    assert done.status_code == 302, done.text[:500]
    return page, done


def test_tls_alone_makes_the_cookies_secure_and_sends_hsts(tmp_path):
    ca, cert, key = _certificates(tmp_path)
    server = _server(tmp_path, LEASEHOLD_TLS_CERT=cert, LEASEHOLD_TLS_KEY=key)
    server.env.pop("LEASEHOLD_TRUSTED_PROXIES", None)
    server.url = server.url.replace("http://", "https://")
    server.start()
    try:
        session = requests.Session()
        session.trust_env = False  # REQUESTS_CA_BUNDLE would win over session.verify
        session.verify = ca
        page, done = _log_in(session, server.url, {})
        assert page.headers.get("Strict-Transport-Security") == HSTS
        assert _cookies(page) == {"csrftoken": True}
        assert _cookies(done)["sessionid"] is True, _cookies(done)
    finally:
        server.stop()


def test_a_trusted_proxy_alone_secures_what_it_forwards_as_https(tmp_path):
    server = _server(tmp_path, LEASEHOLD_TRUSTED_PROXIES="127.0.0.1")
    for name in ("LEASEHOLD_TLS_CERT", "LEASEHOLD_TLS_KEY"):
        server.env.pop(name, None)
    server.start()
    try:
        session = requests.Session()
        session.trust_env = False
        page, done = _log_in(session, server.url, {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"})
        assert page.headers.get("Strict-Transport-Security") == HSTS
        assert _cookies(page) == {"csrftoken": True}
        assert _cookies(done)["sessionid"] is True, _cookies(done)
        # forwarded as http: no HSTS (a browser on http would be told nothing it can check)
        plain = requests.get(f"{server.url}/admin/login/", timeout=30,
                             headers={"X-Forwarded-Proto": "http", "X-Forwarded-For": "203.0.113.9"})
        assert plain.status_code == 200 and "Strict-Transport-Security" not in plain.headers
        # from an address that is not the proxy, a claim of https is not believed
        conn = http.client.HTTPConnection("127.0.0.1", server.port, source_address=("127.0.0.2", 0), timeout=30)
        conn.request("GET", "/admin/login/", headers={"X-Forwarded-Proto": "https"})
        claimed = conn.getresponse()
        assert claimed.status == 200 and claimed.getheader("Strict-Transport-Security") is None
        conn.close()
    finally:
        server.stop()
