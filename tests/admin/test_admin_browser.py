"""The operator's way through a real browser: log in, find a leased blob,
break it through the confirmation page, see its state and the new history
row. Debian's Chromium, driven by Playwright; with LEASEHOLD_SCREENS set,
screenshots go there (helpers.screenshot)."""

from __future__ import annotations

import asyncio
import time

import pytest
from playwright.sync_api import ConsoleMessage, Response

from .helpers import PASSWORD, log_in, screenshot

@pytest.fixture
def operator(django_user_model, settings):
    from django.contrib.auth.models import Permission

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # a real login, quickly
    user = django_user_model.objects.create_user("alice", password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="leases").exclude(
        codename__startswith=("add_", "change_", "delete_")))
    return user


@pytest.fixture
def browser_page(chromium):
    # An operator in Tokyo: the pages must show times in the browser's zone.
    context = chromium.new_context(viewport={"width": 1600, "height": 900}, timezone_id="Asia/Tokyo")
    page = context.new_page()
    # The page scripts' timers run on a paused clock that the test moves.
    started = time.time() * 1000
    page.clock.install(time=started)
    page.clock.pause_at(started + 1000)
    return page


@pytest.mark.browser
def test_operator_breaks_a_lease_in_the_browser(azure_server, estate, operator, browser_page, clock):
    page = browser_page
    log_in(page, azure_server, "alice", then="/admin/leases/blob/")
    page.click("#toggle-nav-sidebar")  # room for the wide lists (the admin remembers the choice)

    # Find the leased blobs; the one of interest counts down in the browser.
    page.locator("#changelist-filter").get_by_role("link", name="leased", exact=True).click()
    row = page.locator("#result_list tr", has_text="leased.txt")
    assert row.locator(".lease-badge").inner_text() == "leased"
    assert row.locator(".field-modified time").inner_text().endswith("GMT+9")
    countdown = row.locator(".lease-countdown")
    assert countdown.inner_text() == "60 s"
    page.clock.run_for(5_000)
    assert countdown.inner_text() == "55 s"
    screenshot(page, "admin-blob-list.png")

    # Break it: select, pick the action, confirm with a break period and a reason.
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "break_leases")
    page.get_by_role("button", name="Go").first.click()
    assert page.locator("h1").inner_text() == "Break lease"
    assert "opsstore/orders/leased.txt" in page.locator("#content table").inner_text()
    page.get_by_label("After a break period of").check()
    page.fill("input[name=seconds]", "10")
    page.fill("textarea[name=reason]", "deploy stuck on it")
    screenshot(page, "admin-break-confirmation.png")
    page.get_by_role("button", name="Yes, break the lease").click()
    assert "Broke the lease of 1 blob." in page.locator(".messagelist").inner_text()

    # It is breaking now, and broken once the break period has passed.
    page.locator("#changelist-filter").get_by_role("link", name="breaking", exact=True).click()
    row = page.locator("#result_list tr", has_text="leased.txt")
    assert row.locator(".lease-badge").inner_text() == "breaking"
    assert row.locator(".field-time_left").inner_text() == "breaks in 10 s"
    clock.advance(11)
    page.locator("#changelist-filter").get_by_role("link", name="broken", exact=True).click()
    row = page.locator("#result_list tr", has_text="leased.txt")
    assert row.locator(".lease-badge").inner_text() == "broken"

    # The blob's page shows the break on top of its history, and so does the history list.
    row.get_by_role("link", name="leased.txt").click()
    newest = page.locator("#lease-history tbody tr").first
    assert newest.locator("td").nth(1).inner_text() == "break"
    assert "user:alice" in newest.inner_text() and "deploy stuck on it" in newest.inner_text()
    page.get_by_role("link", name="Lease history", exact=True).click()
    newest = page.locator("#result_list tbody tr").first
    assert "user:alice" in newest.inner_text() and "leased → breaking" in newest.inner_text()
    screenshot(page, "admin-history.png")

    # The event's own page shows what was stored.
    newest.locator("th a").click()
    page.wait_for_url("**/leaseevent/*/change/?*")  # .all() below does not wait for the new page
    fields = {row.locator("label").inner_text().rstrip(":"): row.locator(".readonly").inner_text()
              for row in page.locator("fieldset .form-row").all()}
    assert "Actor" in fields, (page.url, fields)
    assert (fields["Actor"], fields["Via"], fields["Break period"], fields["Reason"]) == (
        "user:alice", "admin", "10", "deploy stuck on it")


@pytest.mark.browser
def test_admin_pages_load_their_icon_without_a_console_error(azure_server, operator, browser_page):
    """Browsers ask every site for /favicon.ico; it answered 400 in Azure XML,
    a console error on every admin page. The admin names its icon, and
    /favicon.ico leads to the same one."""
    page = browser_page
    errors: list[str] = []
    failed: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    def answered(response: Response) -> None:
        if response.status >= 400:
            failed.append(response.url)

    page.on("console", console)
    page.on("response", answered)
    page.goto(f"{azure_server}/admin/login/")
    page.wait_for_load_state("networkidle")
    icon = page.eval_on_selector("link[rel=icon]", "link => link.href")
    assert page.request.get(icon).headers["content-type"].startswith("image/svg+xml")
    direct = page.request.get(f"{azure_server}/favicon.ico")
    assert direct.ok and direct.headers["content-type"].startswith("image/svg+xml")
    assert errors == [] and failed == []


@pytest.mark.browser
def test_the_shared_browser_leaves_no_event_loop_to_the_tests_without_it(_chromium_process, django_user_model):
    """The test process's Chromium outlives the browser tests (tests/admin/conftest.py): a test
    that does not drive it sees no running event loop in its thread, so Django's ORM and
    ``asyncio.run`` work as in a process without a browser."""
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()
    assert asyncio.run(asyncio.sleep(0, result="ran")) == "ran"
    assert django_user_model.objects.count() == 0


@pytest.mark.browser
def test_a_browser_test_drives_the_shared_browser_with_its_loop_running(chromium):
    assert asyncio.get_running_loop() is chromium._loop
    context = chromium.new_context()
    assert context.new_page().evaluate("1 + 1") == 2
