"""An admin list accepts only the query parameters it declares (issue 48): a
lookup on a model's own fields that no filter offers (a regular expression,
a comparison with a lease id, a blob's content or metadata, a made-up field)
is a 400 page saying why, logged, for a view-only user and a superuser alike,
and reads nothing; every link the admin renders itself still works (a crawl
of the rendered pages); a search is bounded in words and length; a list's
reads are stopped at their time bound; nobody sets a lease's fields through
a change form."""

from __future__ import annotations

import html
import logging
import re
import uuid
from urllib.parse import urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leases.admin import queries
from leases.domain import machine
from leases.models import Blob, LeaseEvent

from .helpers import VIEW_ALL, _staff

# Run again on PostgreSQL (also_postgres): the tests whose lists run their queries (the crawl's
# filters and drill-downs, the searches accepted); the refusals are decided before any list query,
# and the read bounds tested here are SQLite's (docs/development/tests.md).
queried = pytest.mark.also_postgres

BLOBS, CONTAINERS, HISTORY = "/admin/leases/blob/", "/admin/leases/container/", "/admin/leases/leaseevent/"
TENURES = "/admin/leases/tenure/"
LISTS = (BLOBS, CONTAINERS, HISTORY, f"{HISTORY}export.csv", TENURES)
REGEX = "^(.|.){26}!"  # catastrophic backtracking: seconds per row, in SQLite's row loop
UNDECLARED = [
    ("request_id__regex", REGEX), ("lease_id__lt", str(uuid.UUID(int=2**127))), ("lease_id", "6f1c2a9e-3b7d-4c55-9a1e-0d2b8f7c4e31"),
    ("proposed_lease_fingerprint__gt", "0"), ("lease_fingerprint__lt", "8"), ("content__regex", "^s"),
    ("content__gt", "a"), ("metadata__contains", "x"), ("name__regex", "^a"), ("blob__regex", "^a"),
    ("account__name__gt", "a"), ("container__name__startswith", "o"), ("lease_holder__iregex", "x"),
    ("occurred_at__gte", "2020-01-01"), ("made_up_field", "1"), ("state__regex", "x"), ("id__in", "1,2"),
]


@pytest.fixture(params=["viewer", "superuser"])
def anyone(request, client, viewer, superuser):
    client.force_login(viewer if request.param == "viewer" else superuser)
    return client


def _body(response) -> str:
    return (b"".join(response.streaming_content) if response.streaming else response.content).decode()


@pytest.mark.parametrize("lookup, value", UNDECLARED)
def test_an_undeclared_lookup_is_400_and_reads_nothing(anyone, estate, caplog, lookup, value):
    for url in LISTS:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="leasehold.admin"), \
                CaptureQueriesContext(connection) as seen:
            response = anyone.get(url, {lookup: value})
        assert response.status_code == 400, (url, lookup, response.status_code)
        page = _body(response)
        assert f"Filtering by {lookup} not allowed" in page and "This list takes:" in page, page[-800:]
        assert f"Filtering by {lookup} not allowed" in caplog.text, (url, lookup)
        assert value not in caplog.text or len(value) < 3
        opened = [q["sql"] for q in seen if "leases_blob" in q["sql"] or "leases_leaseevent" in q["sql"]
                  or "leases_container" in q["sql"] or "leases_tenure" in q["sql"]]
        assert opened == [], (url, lookup, opened)  # refused before any list query


def test_the_regex_url_is_refused_before_sqlite_runs_it(anyone, estate):
    with CaptureQueriesContext(connection) as seen:
        response = anyone.get(HISTORY, {"request_id__regex": REGEX})
    assert response.status_code == 400
    assert not any("REGEXP" in q["sql"].upper() for q in seen)


def test_a_lookup_next_to_declared_filters_is_still_400(anyone, estate):
    response = anyone.get(BLOBS, {"state": machine.LEASED, "lease_id__lt": str(uuid.uuid4())})
    assert response.status_code == 400
    response = anyone.get(HISTORY, {"action": "acquire", "occurred_at__year": "2026", "content__regex": "x"})
    assert response.status_code == 400


# ------------------------------------------------------------------ the admin's own links

HREF = re.compile(r'href="([^"]*)"')


def _list_links(path: str, page: str) -> set[str]:
    """The page's links to a lease list or the history's export, with their query."""
    found = set()
    for href in HREF.findall(page):
        href = html.unescape(href)
        if href.startswith("?"):
            href = path + href
        parts = urlsplit(href)
        if parts.path in LISTS and parts.query:
            found.add(f"{parts.path}?{parts.query}")
    return found


@queried
def test_every_link_the_admin_renders_is_accepted(client, superuser, estate):
    """Crawled as a superuser, who is shown every link a view-only user is, and more (what a list
    accepts does not depend on who asks)."""
    anyone = client
    anyone.force_login(superuser)
    blob, event = estate.blobs["leased"], LeaseEvent.objects.order_by("pk").first()
    start = [BLOBS, CONTAINERS, HISTORY, f"{BLOBS}holders/", f"{CONTAINERS}holders/", f"{HISTORY}dashboard/",
             f"{BLOBS}{blob.pk}/change/", f"{CONTAINERS}{estate.container.pk}/change/", f"{HISTORY}{event.pk}/change/",
             f"{HISTORY}holder/?account={event.account}&container={event.container}&blob={event.blob}",
             f"{BLOBS}?state={machine.LEASED}", f"{HISTORY}?action=acquire", f"{HISTORY}?q=leased.txt"]
    seen, queue = set(start), list(start)
    checked = 0
    while queue and checked < 400:
        url = queue.pop(0)
        response = anyone.get(url)
        assert response.status_code == 200, (url, response.status_code)
        checked += 1
        if response.streaming:
            _body(response)
            continue
        for link in _list_links(urlsplit(url).path, response.content.decode()) - seen:
            seen.add(link)
            queue.append(link)
    kinds = {urlsplit(u).query.split("=")[0] for u in seen}
    # The crawl reached the filters, the drill-downs and the links that narrow a list to one resource.
    assert {"state", "duration", "holder", "account", "container", "action", "outcome", "actor", "o",
            "occurred_at__year"} <= kinds, sorted(kinds)
    assert any("blob=" in u and u.startswith(HISTORY) for u in seen)
    assert any(u.startswith(f"{BLOBS}?container=") for u in seen)
    assert any(u.startswith(TENURES) and "blob=" in u for u in seen)  # a resource's tenures
    assert checked > 40


# ------------------------------------------------------------------ search

@queried
@pytest.mark.parametrize("url", LISTS)
def test_search_is_bounded_in_words_and_length(anyone, estate, url):
    assert anyone.get(url, {"q": " ".join(["leased"] * queries.SEARCH_WORDS)}).status_code == 200
    for term in (" ".join(["leased"] * (queries.SEARCH_WORDS + 1)), " ".join(["w"] * 1000),
                 "x" * (queries.SEARCH_CHARS + 1)):
        response = anyone.get(url, {"q": term})
        assert response.status_code == 400, (url, len(term))
        assert "A search is at most" in _body(response)


# ------------------------------------------------------------------ reads bounded in time

def test_bounded_reads_stop_a_long_statement(db):
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL bounds every statement of a server process with statement_timeout")
    with pytest.raises(Exception) as stopped, queries.bounded_reads(0.2), connection.cursor() as cursor:
        cursor.execute(endless)
    assert queries.is_interrupted(stopped.value)
    with connection.cursor() as cursor:  # the handler is gone once the block ends
        cursor.execute("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000) "
                       "SELECT max(i) FROM n")
        assert cursor.fetchone() == (300000,)


def test_bounded_reads_stop_once_no_one_will_read_the_answer(db):
    """A read whose client has gone (or whose server is stopping: serving/front.Abandoned) stops
    then, not at its time bound: here the bound is a minute and the client goes once it runs."""
    import threading
    import time
    import types

    from serving.front import Abandoned

    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL bounds every statement of a server process with statement_timeout")
    abandoned = Abandoned()
    request = types.SimpleNamespace(META={"leasehold.abandoned": abandoned})
    endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"
    running = threading.Event()
    # The client goes once the statement has run a while (its progress handler is called).
    connection.ensure_connection()
    connection.connection.set_trace_callback(lambda statement: running.set())

    def leave() -> None:
        running.wait(30)
        abandoned.set()

    leaver = threading.Thread(target=leave)
    leaver.start()
    bound = time.monotonic() + 60
    try:
        with pytest.raises(Exception) as stopped, queries.bounded_reads(60, request=request), \
                connection.cursor() as cursor:
            cursor.execute(endless)
    finally:
        leaver.join(30)
        connection.connection.set_trace_callback(None)
    assert queries.is_interrupted(stopped.value) and abandoned.is_set()
    assert time.monotonic() < bound  # stopped by the client's going, not by the time bound


@pytest.mark.parametrize("url", [BLOBS, CONTAINERS, HISTORY, TENURES])
def test_a_list_read_past_its_bound_is_a_503_page(anyone, estate, monkeypatch, url):
    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL's statement_timeout is the server's (engines/postgres)")
    monkeypatch.setattr(queries, "read_seconds", lambda: -1.0)  # past the bound at once
    monkeypatch.setattr(queries, "PROGRESS_STEPS", 1)
    response = anyone.get(url)
    assert response.status_code == 503
    assert "to read and was stopped" in response.content.decode()


# ------------------------------------------------------------------ no lease field set through a form

def test_no_change_form_sets_a_lease(client, django_user_model, superuser, estate):
    changer = _staff(django_user_model, "carol", *VIEW_ALL, "blob.change_blob", "container.change_container")
    blob = estate.blobs["leased"]
    before = Blob.objects.values().get(pk=blob.pk)
    mine = str(uuid.uuid4())
    for user in (changer, superuser):
        client.force_login(user)
        page = client.get(f"{BLOBS}{blob.pk}/change/").content.decode()
        assert 'name="lease_id"' not in page and 'name="lease_state"' not in page
        response = client.post(f"{BLOBS}{blob.pk}/change/", {
            "lease_id": mine, "lease_state": machine.AVAILABLE, "lease_generation": "0", "name": blob.name,
            "_save": "Save"})
        assert response.status_code == 403
    assert Blob.objects.values().get(pk=blob.pk) == before
    assert client.get(f"{BLOBS}add/").status_code == 403


# ------------------------------------------------------------------ Django's user and group admins

AUTH_LISTS = ("/admin/auth/user/", "/admin/auth/group/")


def test_the_user_and_group_lists_accept_only_their_filters(client, superuser, estate):
    client.force_login(superuser)
    for url in AUTH_LISTS:
        for lookup, value in (("username__regex", REGEX), ("password__startswith", "pbkdf2"),
                              ("last_login__lt", "2030-01-01"), ("name__regex", "x"), ("made_up_field", "1"),
                              ("groups__name__gt", "a")):
            response = client.get(url, {lookup: value})
            assert response.status_code == 400, (url, lookup, response.status_code)
        assert client.get(url, {"q": " ".join(["root"] * (queries.SEARCH_WORDS + 1))}).status_code == 400
    links, seen = set(), set()
    for url in AUTH_LISTS:
        page = client.get(url)
        assert page.status_code == 200
        for href in HREF.findall(page.content.decode()):
            href = html.unescape(href)
            if href.startswith("?"):
                links.add(url + href)
    assert {"/admin/auth/user/?is_staff__exact=1", "/admin/auth/user/?is_active__exact=0"} <= links, links
    for link in sorted(links):
        response = client.get(link)
        assert response.status_code == 200, (link, response.status_code)
        seen.add(link)
    assert len(seen) >= 7
