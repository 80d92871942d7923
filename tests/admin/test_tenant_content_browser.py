"""Issue 48, point 1, as its tester ran it, in Debian's Chromium (Playwright): a tenant uploads an
HTML page with a script, signs a read SAS and sends the link to an operator, who opens it in the
browser where they are signed in to the admin. The script reads the cookies, takes the CSRF token
(from document.cookie, or from an admin page it fetches) and tries to break another tenant's
leases through the JSON API and through the admin's break page. The blob is served sandboxed
(docs/decisions/0038): the script never runs, both leases are still held and the history has no
break. Also: the admin's own pages never show their session or CSRF cookie to scripts."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from azure.storage.blob import BlobSasPermissions, ContentSettings, generate_blob_sas

from leases.domain import machine
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from leases.models import Blob, LeaseEvent
from leases.services import ResourceRef, account_ensure, blob_put, container_create, lease_acquire

from .helpers import PASSWORD, _staff, app, log_in
VICTIM = "victimco"  # another tenant, whose leases the page goes after
TITLE = "quarterly report"

# The tenant's page: a marker as soon as it runs, then the attack; its outcome in the title.
ATTACK = """<!doctype html><title>%(title)s</title><script>
document.title = "ran";
(async () => {
  const seen = document.cookie;
  let token = (seen.match(/csrftoken=([^;]+)/) || [])[1];
  const page = new DOMParser().parseFromString(
    await (await fetch("%(break_page)s", {credentials: "same-origin"})).text(), "text/html");
  const form = page.querySelector("form input[name=when]")?.form;
  token = token || form?.elements.csrfmiddlewaretoken.value;
  const api = await fetch("/api/v1/leases/break/%(victim)s/jobs/api-lock.txt", {
    method: "POST", credentials: "same-origin", body: JSON.stringify({break_period: 0}),
    headers: {"Content-Type": "application/json", "X-CSRFToken": token || ""}});
  let admin = "no form";
  if (form) {
    const data = new FormData(form);
    data.set("when", "now");
    admin = (await fetch("%(break_page)s", {method: "POST", body: data, credentials: "same-origin"})).status;
  }
  document.title = "done " + JSON.stringify({cookie: seen, token: !!token, api: api.status, admin});
})().catch(error => { document.title = "done " + error; });
</script><p>Nothing to see.</p>"""


@pytest.fixture
def victim(azure_server):
    """Another tenant's two blobs, each leased for ever."""
    account_ensure(name=VICTIM, key1="a2V5")
    container_create(account=VICTIM, name="jobs")
    refs = {}
    for name in ("api-lock.txt", "admin-lock.txt"):
        refs[name] = ref = ResourceRef(VICTIM, "jobs", name)
        blob_put(ref=ref, actor=app(), content=b"x")
        lease_acquire(ref=ref, actor=app(), duration=machine.INFINITE)
    return refs


@pytest.fixture
def operator_context(chromium, azure_server, django_user_model, settings):
    """A browser context signed in to the admin as a superuser (who may break any lease)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # a real login, quickly
    user = _staff(django_user_model, "root", superuser=True)
    user.set_password(PASSWORD)
    user.save()
    context = chromium.new_context()
    log_in(context.new_page(), azure_server, "root")
    return context  # closed after the test by ``chromium``


def tenant_link(service, azure_server: str, how: str, html: bytes) -> str:
    """The tenant's blob and the read SAS link it sends: stored as text/html, or stored as
    text/plain with the SAS's rsct/rscd saying text/html, inline."""
    container = service.create_container("reports")
    stored = "text/html" if how == "stored" else "text/plain"
    container.upload_blob("q3.html", html, content_settings=ContentSettings(content_type=stored))
    rsct, rscd = (None, None) if how == "stored" else ("text/html", "inline")
    token = generate_blob_sas(DEV_ACCOUNT, "reports", "q3.html", account_key=DEV_KEY,
                              permission=BlobSasPermissions(read=True),
                              expiry=datetime.now(timezone.utc) + timedelta(hours=1),
                              content_type=rsct, content_disposition=rscd)
    return f"{azure_server}/{DEV_ACCOUNT}/reports/q3.html?{token}"


@pytest.mark.browser
@pytest.mark.parametrize("how", ["stored", "sas-rsct"])
def test_a_tenants_page_cannot_act_with_the_operators_session(service, azure_server, victim, operator_context,
                                                              how):
    admin_blob = Blob.objects.get(container__account__name=VICTIM, name="admin-lock.txt")
    html = (ATTACK % {"title": TITLE, "victim": VICTIM,
                      "break_page": f"/admin/leases/blob/{admin_blob.pk}/break/"}).encode()
    link = tenant_link(service, azure_server, how, html)

    page = operator_context.new_page()
    opened = page.goto(link)
    assert opened is not None and opened.status == 200
    assert opened.headers["content-type"] == "text/html"  # served as the tenant asked, yet inert
    if page.title() != TITLE:  # the script ran: let it finish before reading what it did
        page.wait_for_function("document.title.startsWith('done')")

    now = datetime.now(timezone.utc)
    states = {blob.name: blob.effective_lease_state(now) for blob in Blob.objects.filter(container__account__name=VICTIM)}
    breaks = list(LeaseEvent.objects.filter(account=VICTIM, action="break").values_list("blob", "actor"))
    assert (states, breaks) == ({"api-lock.txt": "leased", "admin-lock.txt": "leased"}, []), page.title()
    assert page.title() == TITLE  # the script never ran: not even its first line
    assert page.evaluate("typeof window.fetch") == "function"  # the page was read, as a document


@pytest.mark.browser
def test_the_admins_cookies_are_not_readable_by_scripts(azure_server, operator_context):
    page = operator_context.pages[0]
    page.goto(f"{azure_server}/admin/leases/blob/")
    cookies = {c["name"]: c for c in operator_context.cookies()}
    assert {"sessionid", "csrftoken"} <= set(cookies)
    assert cookies["sessionid"]["httpOnly"] and cookies["csrftoken"]["httpOnly"]
    assert cookies["sessionid"]["sameSite"] == cookies["csrftoken"]["sameSite"] == "Lax"
    readable = page.evaluate("document.cookie")
    assert "sessionid" not in readable and "csrftoken" not in readable
    # The API's interactive docs still send their CSRF token (rendered in the page, not read from a cookie).
    page.goto(f"{azure_server}/api/v1/docs/")
    sent = re.search(r'request\.headers\["X-CSRFTOKEN"\] = "([A-Za-z0-9]+)"', page.content())
    assert sent is not None and len(sent.group(1)) >= 32
