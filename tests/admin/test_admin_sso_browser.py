"""The admin's single sign-on in Debian's Chromium (Playwright), through the real OpenID provider in
its own process (tests/oidc_provider.py; its authorization endpoint approves the user a test names):
the login page offers "Sign in with <provider>"; a user whose groups claim maps to the "break" group
lands in the admin able to break a lease, one mapped to "view-only" is offered no break and a POST of
one is refused; a user no rule names is refused with a page saying so and recorded; a tampered state
is refused; with local passwords off the password form is not shown and a POST of it is refused."""

from __future__ import annotations

import logging
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.contrib.auth.models import Group, Permission

from leases.conf.admin_sso import AdminSso, rules
from leases.domain import machine
from leases.models import Blob
from tests.oidc_provider import OidcProvider

from .helpers import VIEW_ALL

PASSWORD = "correct horse"


@pytest.fixture(scope="module")
def provider():
    with OidcProvider() as found:
        found.client("leasehold-admin", secret="admin-s3cret")
        found.control("user", sub="alice", groups=["lh-breakers"], name="Alice Ops", email="alice@example.com")
        found.control("user", sub="victor", groups=["lh-viewers"], name="Victor View")
        found.control("user", sub="mallory", groups=["marketing"], name="Mallory")
        yield found


def _group(name: str, *perms: str) -> None:
    group = Group.objects.create(name=name)
    for perm in perms:
        model, codename = perm.split(".")
        group.permissions.add(Permission.objects.get(content_type__app_label="leases", content_type__model=model,
                                                     codename=codename))


@pytest.fixture
def sso(provider, settings, estate, chromium):
    settings.LEASEHOLD_ADMIN_SSO = AdminSso(
        issuer=provider.issuer, client_id="leasehold-admin", client_secret="admin-s3cret", name="Test SSO",
        rules=rules("groups:lh-breakers=break groups:lh-viewers=view-only"), scopes="openid profile email")
    settings.LEASEHOLD_ADMIN_PASSWORDS = "on"
    _group("break", *VIEW_ALL, "blob.break_blob_lease", "container.break_container_lease")
    _group("view-only", *VIEW_ALL)
    opened = len(chromium.contexts)
    yield provider
    for context in chromium.contexts[opened:]:
        context.close()


def sign_in(chromium, base: str, provider, user: str):
    """A new browser signed in (or refused) as ``user`` at the provider: the page where it ended."""
    provider.control("approve", sub=user)
    page = chromium.new_context().new_page()
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.visited = []
    page.on("response", lambda response: page.visited.append((response.status, response.url)))
    page.get_by_role("button", name="Sign in with Test SSO").click()
    page.wait_for_url(lambda url: "/admin/sso/callback/" in url or url.rstrip("/").endswith("/admin"))
    return page


def leased_blob() -> Blob:
    return Blob.objects.get(name="leased.txt")


@pytest.mark.browser
def test_a_breaker_signs_in_and_may_break(sso, azure_server, chromium):
    exchanges = sso.control("stats")["pkce_exchanges"]
    page = sign_in(chromium, azure_server, sso, "alice")
    assert page.url == f"{azure_server}/admin/", "\n".join(f"{s} {u}" for s, u in page.visited)
    assert sso.control("stats")["pkce_exchanges"] == exchanges + 1  # the code was exchanged with its PKCE verifier
    page.goto(f"{azure_server}/admin/leases/blob/{leased_blob().pk}/change/")
    assert page.locator(".object-tools a.lease-break").count() == 1
    page.locator(".object-tools a.lease-break").click()
    page.get_by_role("button", name="Yes, break the lease").click()
    page.locator(".messagelist").wait_for()
    assert leased_blob().lease_state == machine.BREAKING or leased_blob().lease_state == machine.BROKEN
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username="sso:alice")
    assert [g.name for g in user.groups.all()] == ["break"] and not user.has_usable_password()


@pytest.mark.browser
def test_a_viewer_signs_in_and_may_not_break(sso, azure_server, chromium):
    page = sign_in(chromium, azure_server, sso, "victor")
    assert page.url == f"{azure_server}/admin/"
    blob = leased_blob()
    page.goto(f"{azure_server}/admin/leases/blob/{blob.pk}/change/")
    assert page.locator("#content-main").count() == 1 and page.locator(".object-tools a.lease-break").count() == 0
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    answer = page.request.post(f"{azure_server}/admin/leases/blob/{blob.pk}/break/", form={
        "csrfmiddlewaretoken": csrf, "period": "now", "seen": f"{blob.pk}:{blob.lease_generation}"},
        headers={"Referer": f"{azure_server}/admin/"})
    assert answer.ok and "You may not break blob leases" in answer.text()
    assert leased_blob().lease_state == machine.LEASED


@pytest.mark.browser
def test_a_user_with_no_role_is_refused_and_recorded(sso, azure_server, chromium, caplog):
    with caplog.at_level(logging.WARNING, logger="leasehold.admin.sso"):
        page = sign_in(chromium, azure_server, sso, "mallory")
    assert "/admin/sso/callback/" in page.url
    assert "has no role in this admin" in page.locator("#sso-refused").inner_text()
    assert any("mallory" in record.getMessage() for record in caplog.records)
    page.goto(f"{azure_server}/admin/")
    assert "/admin/login/" in page.url  # not signed in


@pytest.mark.browser
def test_a_tampered_state_is_refused(sso, azure_server, chromium):
    sso.control("approve", sub="alice")
    page = chromium.new_context().new_page()
    page.goto(f"{azure_server}/admin/login/?next=/admin/")
    # The browser's own requests (its cookies), one redirect at a time, to hold the provider's answer.
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    started = page.request.post(f"{azure_server}/admin/sso/start/", form={"csrfmiddlewaretoken": csrf, "next": "/admin/"},
                                headers={"Referer": f"{azure_server}/admin/login/"}, max_redirects=0)
    assert started.status == 302
    back = page.request.get(started.headers["location"], max_redirects=0).headers["location"]
    url = urlsplit(back)
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    page.goto(f"{azure_server}{url.path}?{urlencode({**query, 'state': query['state'][:-2] + 'xx'})}")
    assert "The sign-in did not complete" in page.locator("#sso-refused").inner_text()
    page.goto(f"{azure_server}/admin/")
    assert "/admin/login/" in page.url
    page.goto(back)  # the provider's answer as it was: signed in
    assert page.url == f"{azure_server}/admin/"


@pytest.mark.browser
def test_with_passwords_off_the_local_form_is_refused(sso, azure_server, chromium, settings,
                                                      django_user_model):
    settings.LEASEHOLD_ADMIN_PASSWORDS = "off"
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    django_user_model.objects.create_superuser(username="root", password=PASSWORD)
    page = chromium.new_context().new_page()
    page.goto(f"{azure_server}/admin/login/?next=/admin/")
    assert page.locator("#id_password").count() == 0 and page.locator("#passwords-off").count() == 1
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    answer = page.request.post(f"{azure_server}/admin/login/", form={
        "csrfmiddlewaretoken": csrf, "username": "root", "password": PASSWORD, "next": "/admin/"},
        headers={"Referer": f"{azure_server}/admin/login/"})
    assert answer.status == 403 and "Local passwords are turned off" in answer.text()
    page.goto(f"{azure_server}/admin/")
    assert "/admin/login/" in page.url
