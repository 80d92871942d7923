"""Every admin page, laid out right at 1366x768, 1920x1080 and 390 px wide
(Debian's Chromium through Playwright): nothing that should show has no
size, no control overlaps another or a heading, no word breaks inside, the
page does not scroll sideways, and the browser logs no error. With
LEASEHOLD_SCREENS set, screenshots of every page at every width go to its
layout/ folder."""

from __future__ import annotations

import pytest
from playwright.sync_api import ConsoleMessage

from .helpers import PASSWORD, screenshot
from .test_admin_busy import short_wait  # noqa: F401 (a fixture)
from .test_admin_operator_browser import browser, go, open_page, users  # noqa: F401 (fixtures, and go)

WIDTHS = {"1366": (1366, 768), "1920": (1920, 1080), "390": (390, 844)}

# What a page must not do, measured in the page. Returns a list of problems.
CHECK = """(narrow) => {
  const problems = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1)
    problems.push(`page scrolls sideways: ${root.scrollWidth} > ${root.clientWidth}`);
  const shown = (el) => {
    const style = getComputedStyle(el);
    return style.display !== 'none' && style.visibility !== 'hidden' && el.getClientRects().length > 0;
  };
  const label = (el) => (el.id ? '#' + el.id : el.tagName.toLowerCase() + (el.className ? '.' + String(
    el.className).trim().split(/\\s+/).join('.') : '')) + ` "${(el.innerText || el.value || '').trim().slice(0, 40)}"`;
  const main = document.querySelector('#content') || document.body;
  // Things with text of their own that are rendered but have no width or height.
  for (const el of main.querySelectorAll('h1, h2, h3, p, table, th, td, li, a, label, button, input, .module')) {
    if (!shown(el) || el.closest('.lease-sr-only, [hidden], template')) continue;
    const text = (el.innerText || el.value || '').trim();
    if (!text) continue;
    const r = el.getBoundingClientRect();
    if (r.width < 2 || r.height < 2) problems.push(`no size: ${label(el)} ${r.width}x${r.height}`);
    if (/^H[1-3]$/.test(el.tagName) && r.height > 4 * parseFloat(getComputedStyle(el).lineHeight || 20) + 60)
      problems.push(`heading ${Math.round(r.height)} px tall: ${label(el)}`);
  }
  // A scroller that hides part of its content sideways (a phone may scroll tables).
  if (!narrow) {
    for (const el of main.querySelectorAll('*')) {
      const x = getComputedStyle(el).overflowX;
      if ((x === 'auto' || x === 'scroll') && shown(el) && el.scrollWidth > el.clientWidth + 1)
        problems.push(`scrolls sideways: ${label(el)} ${el.scrollWidth} > ${el.clientWidth}`);
    }
  }
  // Controls and headings must not overlap one another: a control's box, a
  // heading's or paragraph's text (a block's box spans the line beside floats).
  const extent = (el) => {
    if (!/^(H1|H2|P)$/.test(el.tagName)) return el.getBoundingClientRect();
    const r = document.createRange();
    r.selectNodeContents(el);
    return r.getBoundingClientRect();
  };
  const boxes = [...main.querySelectorAll('h1, h2, .object-tools a, a.button, .button, button, ' +
                                           'input[type=submit], .lease-asof, .submit-row a')]
    .filter(el => shown(el) && !el.closest('.lease-sr-only'));
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      if (a.contains(b) || b.contains(a)) continue;
      const p = extent(a), q = extent(b);
      const w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
      const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
      if (w > 2 && h > 2) problems.push(`overlap: ${label(a)} and ${label(b)}`);
    }
  }
  // No word (a name, a holder, an error code) is broken across lines.
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || !shown(parent) || parent.closest('script, style, textarea, select, .lease-sr-only')) continue;
    for (const m of node.data.matchAll(/\\S+/g)) {
      if (m[0].length > (narrow ? 12 : 40)) continue;  // a long path or id must wrap somewhere
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
      if (lines.size > 1) problems.push(`word broken: "${m[0].slice(0, 40)}" in ${label(parent)}`);
    }
  }
  return [...new Set(problems)];
}"""


def pages(estate) -> dict[str, str]:
    from leases.models import LeaseEvent

    blob = estate.blobs["leased"]
    event = LeaseEvent.objects.filter(status_code__gte=400).order_by("-pk").first() or LeaseEvent.objects.last()
    holder = blob.lease_holder
    return {
        "index": "/admin/",
        "blobs": "/admin/leases/blob/",
        "containers": "/admin/leases/container/",
        "accounts": "/admin/leases/account/",
        "history": "/admin/leases/leaseevent/",
        "holders": "/admin/leases/blob/holders/",
        "blob": f"/admin/leases/blob/{blob.pk}/change/",
        "container": f"/admin/leases/container/{estate.container.pk}/change/",
        "event": f"/admin/leases/leaseevent/{event.pk}/change/",
        "blob-break": f"/admin/leases/blob/{blob.pk}/break/",
        "blob-release": f"/admin/leases/blob/{blob.pk}/release/",
        "container-break": f"/admin/leases/container/{estate.container.pk}/break/",
        "holder-break": f"/admin/leases/blob/holders/break/?holder={holder}",
        "not-found": "/admin/leases/nothing-here/",
    }


@pytest.fixture
def busy_estate(estate):
    """The estate, with names long enough to wrap and refusals to list."""
    from leases.domain.errors import LeaseholdError
    from leases.services import ResourceRef, blob_put, lease_acquire

    from .helpers import ACCOUNT, CONTAINER, app

    long = ResourceRef(ACCOUNT, CONTAINER,
                       "reports/2026/11/nightly-reconciliation-of-every-ledger-Überweisung-文件.csv")
    blob_put(ref=long, actor=app(), content=b"x")
    lease_acquire(ref=long, actor=app(), duration=60)
    for _ in range(3):
        with pytest.raises(LeaseholdError):
            lease_acquire(ref=long, actor=app(), duration=30)
    return estate


@pytest.mark.browser
@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_admin_page_is_laid_out_right(open_page, users, superuser, busy_estate, width):  # noqa: F811
    superuser.set_password(PASSWORD)
    superuser.save()
    w, h = WIDTHS[width]
    page = open_page("root", width=w, height=h)
    errors: list[str] = []

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", console)
    found = {}
    for name, path in pages(busy_estate).items():
        go(page, path)
        screenshot(page, f"layout/{name}-{width}.png")
        problems = page.evaluate(CHECK, w < 600)
        if problems:
            found[name] = problems
    report = "\n".join(f"{name}: {problem}" for name, problems in found.items() for problem in problems)
    assert not found, report
    assert [e for e in errors if "404" not in e] == []


@pytest.mark.browser
@pytest.mark.parametrize("width", list(WIDTHS))
def test_the_busy_page_is_laid_out_right(open_page, users, superuser, estate, short_wait, width):  # noqa: F811
    """The page an operator sees when another process holds the writer past
    LEASEHOLD_WRITE_WAIT (admin/leasehold_busy.html)."""
    from .test_admin_busy import Holder

    superuser.set_password(PASSWORD)
    superuser.save()
    w, h = WIDTHS[width]
    page = open_page("root", width=w, height=h)  # logged in before the writer is taken: a login writes
    go(page, f"/admin/leases/blob/{estate.blobs['leased'].pk}/break/")
    holder = Holder("flock")
    try:
        with page.expect_navigation():
            page.get_by_role("button", name="Yes, break the lease").click()
        assert "The database is busy; try again." in page.content()
        screenshot(page, f"layout/busy-{width}.png")
        problems = page.evaluate(CHECK, w < 600)
    finally:
        holder.let_go()
    assert problems == []
