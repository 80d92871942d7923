"""The admin as an operator uses it, in Debian's Chromium (Playwright):
permissions per model, the break page's seconds, live state that never
guesses past a deadline, layout at 1366 and 390 px, badge contrast, the
quiet dashboard, search and filters, and the per-holder view.

With LEASEHOLD_SCREENS set, screenshots of the main pages go there, at both
widths (helpers.screenshot)."""

from __future__ import annotations

import json
import time

import pytest

from .helpers import PASSWORD, VIEW_ALL, _staff, log_in, screenshot


@pytest.fixture
def users(django_user_model, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # a real login, quickly
    made = {"alice": _staff(django_user_model, "alice", *VIEW_ALL, "container.break_container_lease",
                            "blob.break_blob_lease"),
            "bob": _staff(django_user_model, "bob", *VIEW_ALL, "blob.break_blob_lease")}
    for user in made.values():
        user.set_password(PASSWORD)
        user.save()
    return made


@pytest.fixture
def browser(users, estate, chromium):
    """Chromium, once the test's data is made (the contexts the test opened
    are closed after it: ``chromium``, tests/admin/conftest.py)."""
    return chromium


@pytest.fixture
def open_page(browser, azure_server):
    """open_page(user, width=1366): a logged-in page whose timers run on a
    paused clock that the test moves."""

    def make(username: str, width: int = 1366, height: int = 900):
        context = browser.new_context(viewport={"width": width, "height": height}, timezone_id="Asia/Tokyo")
        page = context.new_page()
        started = time.time() * 1000
        page.clock.install(time=started)
        page.clock.pause_at(started + 1000)
        log_in(page, azure_server, username)
        page.base = azure_server
        return page

    return make


def go(page, path: str):
    page.goto(page.base + path)
    return page


def messages(page) -> list[str]:
    page.locator(".messagelist").wait_for()  # after a click, the next page may still be on its way
    return [m.strip() for m in page.locator(".messagelist li").all_inner_texts()]


def chip_text(page) -> str:
    return " ".join(page.locator(".lease-chips").inner_text().split())


def no_horizontal_scroll(page) -> dict:
    """Widths of the document and of the results table's scroller."""
    return page.evaluate("""() => {
        const results = document.querySelector('#changelist .results');
        return {doc: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
                results: results ? [results.scrollWidth, results.clientWidth] : null};
    }""")


# ------------------------------------------------------------------ permissions

@pytest.mark.browser
def test_blob_breaker_cannot_break_a_container_in_admin_or_api(open_page, users, estate):
    page = open_page("bob")
    container = estate.container
    go(page, f"/admin/leases/container/{container.pk}/change/")
    assert page.locator(".object-tools a.lease-break").count() == 0
    go(page, f"/admin/leases/container/{container.pk}/break/")  # typed by hand
    assert page.url.endswith(f"/admin/leases/container/{container.pk}/change/")
    assert messages(page) == ["You may not break container leases: that needs the “Can break container lease” "
                              "permission."]
    assert "403" not in page.title()

    # The JSON API, with the same session: refused for the container, allowed for a blob.
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    headers = {"X-CSRFToken": csrf, "Content-Type": "application/json", "Referer": page.base + "/admin/"}
    refused = page.request.post(f"{page.base}/api/v1/leases/break/opsstore/orders", headers=headers, data="{}")
    assert refused.status == 403, refused.text()
    allowed = page.request.post(f"{page.base}/api/v1/leases/break/opsstore/orders/leased.txt", headers=headers,
                                data=json.dumps({"break_period": 0}))
    assert allowed.status == 202, allowed.text()
    go(page, f"/admin/leases/container/{container.pk}/change/")
    assert page.locator(".field-lease_state_badge .lease-badge").inner_text() == "leased"


# ------------------------------------------------------------------ the break page

@pytest.mark.browser
def test_typing_seconds_selects_a_break_period(open_page, users, estate):
    page = open_page("alice")
    blob = estate.blobs["leased"]
    go(page, f"/admin/leases/blob/{blob.pk}/break/")
    assert page.get_by_label("Immediately", exact=True).is_checked()
    page.get_by_label("Break period in seconds").fill("30")
    assert page.get_by_label("After a break period of").is_checked()
    assert not page.get_by_label("Immediately", exact=True).is_checked()
    screenshot(page, "break-confirmation-1366.png")
    with page.expect_navigation():  # the next page, not this one, is read below
        page.get_by_role("button", name="Yes, break the lease").click()
    assert messages(page) == ["Broke the lease of 1 blob."]
    assert page.locator(".field-lease_state_badge .lease-badge").inner_text() == "breaking"
    assert page.locator(".field-time_left_alone").inner_text().endswith("breaks in 30 s")

    # "Recent actions" on the index lists the break.
    go(page, "/admin/")
    assert "leased.txt" in page.locator("#recent-actions-module").inner_text()
    assert page.get_by_role("link", name="View site").count() == 0


# ------------------------------------------------------------------ live state

@pytest.mark.browser
def test_a_renewed_lease_never_shows_expired(open_page, users, estate, clock):
    from leases.services import lease_renew

    from .helpers import app

    page = open_page("alice")
    go(page, "/admin/leases/blob/?state=leased")
    row = page.locator("#result_list tr", has_text="leased.txt")
    assert row.locator(".lease-countdown").inner_text() == "60 s"
    assert "Lease state as of" in page.locator(".lease-asof").inner_text()

    clock.advance(50)  # its holder renews it 10 s before the page's deadline
    lease_renew(ref=estate.ref("leased"), actor=app(), lease_id=estate.blobs["leased"].lease_id)
    page.clock.run_for(25_000)
    assert row.locator(".lease-badge").inner_text() == "leased"
    with page.expect_navigation():  # the page's deadline passes: it reloads instead of guessing
        page.clock.run_for(40_000)
    row = page.locator("#result_list tr", has_text="leased.txt")
    assert row.locator(".lease-badge").inner_text() == "leased"
    assert row.locator(".lease-countdown").inner_text() == "60 s"


@pytest.mark.browser
def test_selected_rows_pause_the_refresh(open_page, users, estate):
    page = open_page("alice")
    go(page, "/admin/leases/blob/")
    page.locator("#result_list tr", has_text="leased.txt").locator("input.action-select").check()
    page.clock.run_for(31_000)
    assert page.locator("#result_list tr", has_text="leased.txt").locator("input.action-select").is_checked()
    assert page.locator(".lease-paused").is_visible()


# ------------------------------------------------------------------ layout and contrast

@pytest.mark.browser
@pytest.mark.parametrize("path, name", [("/admin/leases/blob/", "blobs"), ("/admin/leases/leaseevent/", "history"),
                                        ("/admin/leases/container/", "containers"), ("/admin/", "index")])
def test_no_horizontal_scroll_at_1366_and_usable_at_390(open_page, users, estate, path, name):
    page = open_page("alice", width=1366)
    go(page, path)
    widths = no_horizontal_scroll(page)
    screenshot(page, f"{name}-1366.png")
    assert widths["doc"][0] <= widths["doc"][1], widths
    if widths["results"]:
        assert widths["results"][0] <= widths["results"][1], widths

    narrow = open_page("alice", width=390, height=844)
    go(narrow, path)
    widths = no_horizontal_scroll(narrow)
    screenshot(narrow, f"{name}-390.png")
    assert widths["doc"][0] <= widths["doc"][1], widths
    if widths["results"]:
        assert widths["results"][0] <= widths["results"][1], widths
        # Every state badge is on screen, whole.
        for box in [b.bounding_box() for b in narrow.locator("#result_list .lease-badge").all()]:
            assert 0 <= box["x"] and box["x"] + box["width"] <= 390, box


CONTRAST_JS = """() => {
    function rgb(text) { return text.match(/[\\d.]+/g).slice(0, 3).map(Number); }
    function luminance([r, g, b]) {
        const c = [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
    }
    return [...document.querySelectorAll('.lease-badge')].map((el) => {
        const style = getComputedStyle(el);
        const [a, b] = [luminance(rgb(style.color)), luminance(rgb(style.backgroundColor))];
        return {text: el.textContent, ratio: (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)};
    });
}"""


@pytest.mark.browser
def test_badge_text_contrast_is_at_least_4_5(open_page, users, estate):
    page = open_page("alice")
    seen = {}
    for path in ("/admin/leases/blob/", "/admin/leases/leaseevent/", "/admin/"):
        go(page, path)
        page.wait_for_selector(".lease-badge")
        seen.update({b["text"]: b["ratio"] for b in page.evaluate(CONTRAST_JS)})
    assert {"available", "leased", "expired", "breaking", "broken", "success"} <= set(seen), seen
    assert all(ratio >= 4.5 for ratio in seen.values()), seen


@pytest.mark.browser
def test_the_dashboard_refreshes_without_being_announced(open_page, users, estate):
    page = open_page("alice")
    panel = page.locator("#lease-dashboard")
    page.wait_for_selector("#lease-dashboard .lease-counts")
    assert panel.get_attribute("aria-live") is None
    assert page.locator("[aria-live]").count() == 0


# ------------------------------------------------------------------ search, filters, one zone

@pytest.mark.browser
def test_history_search_chips_links_and_one_zone(open_page, users, estate):
    from leases.services import blob_delete

    from .helpers import app

    blob_delete(ref=estate.ref("broken"), actor=app())
    page = open_page("alice")
    go(page, "/admin/leases/leaseevent/")
    # Days are cut in the browser's zone, the zone the rows are shown in.
    assert "days in Asia/Tokyo" in page.locator(".lease-drilldown").inner_text()
    assert page.locator("#result_list .field-when time").first.inner_text().endswith("GMT+9")

    page.fill("#searchbar", "BROKEN")  # part of a name, any case
    with page.expect_navigation():
        page.press("#searchbar", "Enter")
    rows = page.locator("#result_list tbody tr")
    # its acquire, its break, and the delete that ended it
    assert rows.count() == 3 and all("broken.txt" in t for t in rows.all_inner_texts())
    with page.expect_navigation():
        page.locator("#changelist-filter").get_by_role("link", name="break", exact=True).click()
    chips = page.locator(".lease-chips")
    assert "action: break" in chip_text(page) and "search: BROKEN" in chip_text(page)
    screenshot(page, "history-search-1366.png")
    with page.expect_navigation():
        chips.get_by_role("link", name="Remove search filter").click()
    assert "search:" not in chip_text(page)

    # The deleted blob's row leads to its history-only page, where "who held it" still works.
    with page.expect_navigation():
        page.locator("#result_list tr", has_text="broken.txt").get_by_role("link", name="broken.txt").click()
    assert "no longer exists" in messages(page)[0]
    assert page.locator("h1").inner_text() == "Lease history of opsstore/orders/broken.txt"
    screenshot(page, "deleted-blob-history-1366.png")


@pytest.mark.browser
def test_blob_search_and_container_counts(open_page, users, estate):
    page = open_page("alice")
    go(page, "/admin/leases/container/")
    with page.expect_navigation():
        page.locator("#result_list .field-blobs a").click()
    assert page.locator("#result_list tbody tr").count() == 6
    assert "container: opsstore/orders" in chip_text(page)
    page.fill("#searchbar", "INFIN")
    with page.expect_navigation():
        page.press("#searchbar", "Enter")
    assert page.locator("#result_list tbody tr").all_inner_texts()[0].split()[0] == "infinite.txt"
    assert page.locator("#result_list tbody tr").count() == 1
    go(page, "/admin/leases/blob/?state=bogus")
    assert messages(page)[0].startswith("Unknown lease state “bogus”: nothing is listed.")


# ------------------------------------------------------------------ holders

@pytest.mark.browser
def test_holders_view_and_breaking_all_of_one_holders_leases(open_page, users, estate):
    from leases.services import Actor, lease_acquire

    lease_acquire(ref=estate.ref("available"), actor=Actor(name="account:node-7", via="azure"), duration=60)
    page = open_page("alice")
    go(page, "/admin/leases/blob/")
    with page.expect_navigation():
        page.get_by_role("link", name="Holders").click()
    assert page.locator("h1").inner_text() == "Lease holders"
    rows = page.locator("tr.lease-holder-row")
    assert rows.count() == 2
    first = rows.first
    assert " ".join(first.locator(".field-holder").inner_text().split()) == "account:opsstore from 10.1.2.3"
    assert "3 blob leases" in first.locator(".field-blobs").inner_text()
    assert "1 breaking" in first.locator(".field-blobs").inner_text()
    assert "1 container lease" in first.locator(".field-containers").inner_text()
    screenshot(page, "holders-1366.png")

    with page.expect_navigation():
        first.locator(".field-blobs").get_by_role("link", name="Break all 3…").click()
    assert page.locator("h1").inner_text() == "Break every blob lease that account:opsstore holds from 10.1.2.3"
    assert page.locator("#content table tbody tr").count() == 3
    page.get_by_label("Break period in seconds").fill("5")
    page.fill("textarea[name=reason]", "node-3 crashed")
    screenshot(page, "holder-break-confirmation-1366.png")
    with page.expect_navigation():
        page.get_by_role("button", name="Yes, break 3 leases").click()
    assert messages(page) == ["Broke the lease of 3 blobs."]
    # What it held is breaking now; node-7's lease and the container's are untouched.
    rows = page.locator("tr.lease-holder-row")
    assert "3 breaking" in rows.filter(has_text="account:opsstore").locator(".field-blobs").inner_text()
    assert "1 blob lease" in rows.filter(has_text="account:node-7").locator(".field-blobs").inner_text()

    narrow = open_page("alice", width=390, height=844)
    go(narrow, "/admin/leases/blob/holders/")
    widths = no_horizontal_scroll(narrow)
    screenshot(narrow, "holders-390.png")
    assert widths["doc"][0] <= widths["doc"][1], widths


@pytest.mark.browser
def test_blob_page_puts_the_lease_first_at_both_widths(open_page, users, estate):
    blob = estate.blobs["leased"]
    for width, height in ((1366, 900), (390, 844)):
        page = open_page("alice", width=width, height=height)
        go(page, f"/admin/leases/blob/{blob.pk}/change/")
        headings = page.locator("fieldset h2").all_inner_texts()
        assert headings[:2] == ["Lease", "Holder (from the last acquire)"] and "File" in headings, headings
        widths = no_horizontal_scroll(page)
        screenshot(page, f"blob-page-{width}.png")
        assert widths["doc"][0] <= widths["doc"][1], widths
