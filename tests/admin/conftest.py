"""Fixtures of the admin tests (tests/admin/): staff users with chosen
permissions and an estate of resources in every lease state, made through the
services as production makes them; one Chromium per test process for the
browser tests. Plain helpers are in helpers.py."""

from __future__ import annotations

import asyncio

import pytest

from leases.domain import machine
from leases.models import Blob
from leases.services import ResourceRef, blob_put, container_create, lease_acquire, lease_break

from .helpers import ACCOUNT, CONTAINER, CHROMIUM, CHROMIUM_ARGS, VIEW_ALL, Estate, _staff, app


@pytest.fixture
def superuser(django_user_model):
    return _staff(django_user_model, "root", superuser=True)


@pytest.fixture
def breaker(django_user_model):
    """Staff who may view everything and break leases (not release them)."""
    return _staff(django_user_model, "alice", *VIEW_ALL, "container.break_container_lease", "blob.break_blob_lease")


@pytest.fixture
def viewer(django_user_model):
    """Staff who may look but not break."""
    return _staff(django_user_model, "victor", *VIEW_ALL)


@pytest.fixture
def superuser_client(client, superuser):
    client.force_login(superuser)
    return client


@pytest.fixture
def estate(db, clock) -> Estate:
    """Built at a frozen instant: the test decides when time moves. The
    container itself is leased (fixed, 60 s)."""
    from leases.services import account_ensure

    clock.freeze()
    account_ensure(name=ACCOUNT, key1="a2V5")
    container = container_create(account=ACCOUNT, name=CONTAINER)

    def put(name: str) -> ResourceRef:
        ref = ResourceRef(ACCOUNT, CONTAINER, name)
        blob_put(ref=ref, actor=app(), content=b"x")
        return ref

    lease_acquire(ref=put("expired.txt"), actor=app(), duration=15)
    clock.advance(20)
    put("available.txt")
    lease_acquire(ref=put("leased.txt"), actor=app(), duration=60)
    lease_acquire(ref=put("infinite.txt"), actor=app(), duration=machine.INFINITE)
    breaking = put("breaking.txt")
    lease_acquire(ref=breaking, actor=app(), duration=machine.INFINITE)
    lease_break(ref=breaking, actor=app(), break_period=30)
    broken = put("broken.txt")
    lease_acquire(ref=broken, actor=app(), duration=30)
    lease_break(ref=broken, actor=app(), break_period=0)
    lease_acquire(ref=ResourceRef(ACCOUNT, CONTAINER), actor=app(), duration=60)
    names = ("available", "leased", "infinite", "expired", "breaking", "broken")
    blobs = {n: Blob.objects.select_related("container__account").get(name=f"{n}.txt") for n in names}
    container.refresh_from_db()
    return Estate(container=container, blobs=blobs)


# ------------------------------------------------------------------ the browser

@pytest.fixture(scope="session")
def _chromium_process():
    """Chromium's headless shell and Playwright's driver, launched once per
    test process by its first browser test (a launch is about 1.5 CPU-s)
    and closed at the end of the run. Playwright's sync API marks its event
    loop as this thread's running loop after every call, and Django then
    refuses synchronous ORM calls, ``asyncio.run`` refuses to start: the
    loop is unmarked here and between browser tests, and marked again only
    for a browser test's own time (``chromium``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        asyncio._set_running_loop(None)
        try:
            yield browser
        finally:
            asyncio._set_running_loop(browser._loop)  # the driver's loop runs again to close
            browser.close()


@pytest.fixture
def chromium(_chromium_process, monkeypatch):
    """The test process's Chromium for one browser test, its loop marked as
    running and Django's ORM allowed beside it (DJANGO_ALLOW_ASYNC_UNSAFE:
    the tests' and their fixtures' queries are synchronous; the server under
    test runs in threads without a loop). The contexts the test opened are
    closed after it: cookies, storage and clocks are never shared."""
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "1")
    asyncio._set_running_loop(_chromium_process._loop)
    opened = len(_chromium_process.contexts)
    try:
        yield _chromium_process
    finally:
        for context in _chromium_process.contexts[opened:]:
            context.close()
        asyncio._set_running_loop(None)
