"""The admin's and the JSON API's pages, served by the live server, are never sniffed into another
type or framed, and their cookies are HttpOnly and SameSite=Lax (docs/decisions/0038): defence in
depth behind the Azure door's sandbox (tests/admin/test_tenant_content_browser.py)."""

from __future__ import annotations

import pytest
import requests

from .helpers import _staff

PAGES = ["/admin/login/", "/admin/", "/admin/leases/blob/", "/api/v1/containers/", "/api/v1/docs/",
         "/api/v1/schema/", "/api/v1/nothing-here"]


@pytest.fixture
def operator_session(azure_server, django_user_model, settings) -> requests.Session:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    user = _staff(django_user_model, "root", superuser=True)
    user.set_password("correct horse")
    user.save()
    session = requests.Session()
    session.get(f"{azure_server}/admin/login/", timeout=30)
    signed_in = session.post(f"{azure_server}/admin/login/?next=/admin/", timeout=30, data={
        "username": "root", "password": "correct horse", "csrfmiddlewaretoken": session.cookies["csrftoken"]},
        allow_redirects=False)
    assert signed_in.status_code == 302
    for cookie in session.cookies:
        assert cookie.has_nonstandard_attr("HttpOnly") and cookie.get_nonstandard_attr("SameSite") == "Lax", cookie
    assert {cookie.name for cookie in session.cookies} == {"csrftoken", "sessionid"}
    return session


@pytest.mark.parametrize("path", PAGES)
def test_admin_and_api_pages_are_not_sniffed_or_framed(operator_session, azure_server, path):
    response = operator_session.get(azure_server + path, timeout=30)
    assert response.status_code in (200, 404), response.text[:300]
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["Referrer-Policy"] == "same-origin"
