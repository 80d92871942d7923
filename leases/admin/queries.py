"""What an admin list accepts in its query string, and how long its reads may run. Django's change
list turns any parameter it does not use itself into a filter on the model's own fields (a regular
expression, a comparison with a lease id or a blob's content); here a list accepts only the
parameters it declares: its filters', its date drill-down's, the field lookups its own links use
(``drilldown_lookups``), and the change list's own (search, order, page...). Anything else, and a
search of more than ``SEARCH_WORDS`` words or ``SEARCH_CHARS`` characters, is a 400 page saying
why, logged. A list's reads, and each page of an export, are bounded in time on SQLite by a
progress handler (``bounded_reads``), as PostgreSQL's statement_timeout bounds every statement of a
server process (engines/postgres); a read past the bound is stopped and answered 503."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress

from django.contrib import admin
from django.contrib.admin.exceptions import DisallowedModelAdminLookup
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.exceptions import BadRequest
from django.db import connection, connections
from django.db.models import Q, QuerySet
from django.db.utils import OperationalError
from django.template.response import TemplateResponse
from django.urls import reverse

from engines import postgres
from leases.admin.writer_busy import write_wait

SEARCH_WORDS = 20  # more words is a 400: a list of rows matching only some of them would mislead
SEARCH_CHARS = 1200  # the longest account/container/blob path (24 + 63 + 1,024 characters) fits
PROGRESS_STEPS = 100_000  # SQLite virtual machine steps between two looks at the clock (about a millisecond)
log = logging.getLogger("leasehold.admin")


def matching(queryset: QuerySet, terms: list[Q]) -> list[Q]:
    """The ``terms`` that some row of ``queryset`` matches, asked in one statement of an EXISTS each:
    each is planned alone, on its own column's index. Asked as one OR, a term on a column of few values
    (a container, which nearly every event shares) makes the planner read the whole table for all of
    them (bench/README.md, the 10,000,000-event history)."""
    if not terms or queryset.query.is_empty():
        return []
    tests, params = [], []
    for term in terms:
        sql, term_params = queryset.filter(term).order_by().values("pk")[:1].query.sql_with_params()
        tests.append(f"EXISTS ({sql})")
        params.extend(term_params)
    with connections[queryset.db].cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(tests), params)
        found = cursor.fetchone()
    return [term for term, hit in zip(terms, found) if hit]


class QueryRefused(BadRequest):
    """A list's query string asks for what the list does not offer."""


def read_seconds() -> float:
    """How long one admin read may run: as PostgreSQL's statement_timeout
    in a server process, the write wait and a second."""
    return write_wait() + 1


def is_interrupted(exc: BaseException) -> bool:
    """A read stopped at its bound: SQLite's interrupt, PostgreSQL's statement timeout."""
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__ or exc
    return str(cause) == "interrupted" or getattr(cause, "sqlstate", None) == "57014"


@contextmanager
def bounded_reads(seconds: float | None = None, *, request=None):
    """This thread's SQLite statements in the block are stopped (an
    OperationalError, ``is_interrupted``) once ``seconds`` have passed
    since the block began, or once no one will read the answer: the
    request's client has gone or the server is stopping (what the server
    puts in ``leasehold.abandoned``). Nothing to do on PostgreSQL: the
    server's statement_timeout bounds each statement there."""
    if postgres.in_use():
        yield
        return
    deadline = time.monotonic() + (read_seconds() if seconds is None else seconds)
    abandoned = None if request is None else request.META.get("leasehold.abandoned")
    connection.ensure_connection()
    raw = connection.connection
    if abandoned is None:
        raw.set_progress_handler(lambda: time.monotonic() > deadline, PROGRESS_STEPS)
    else:
        raw.set_progress_handler(lambda: time.monotonic() > deadline or abandoned.is_set(), PROGRESS_STEPS)
    try:
        yield
    finally:
        with suppress(sqlite3.ProgrammingError):  # the connection was closed meanwhile: nothing to undo
            raw.set_progress_handler(None, 0)


def bounded_pieces(pieces: Iterable, seconds: float | None = None, *, request=None) -> Iterator:
    """``pieces``, each one read within ``bounded_reads`` of its own (an
    export's keyset pages: each is a short query)."""
    iterator = iter(pieces)
    while True:
        with bounded_reads(seconds, request=request):
            try:
                piece = next(iterator)
            except StopIteration:
                return
        yield piece


def search_refusal(term: str) -> str | None:
    """Why a search term is refused, or None."""
    if len(term) > SEARCH_CHARS:
        return f"A search is at most {SEARCH_CHARS:,} characters long; this one has {len(term):,}."
    words = len(term.split())
    if words > SEARCH_WORDS:
        return f"A search is at most {SEARCH_WORDS} words; this one has {words:,}. Search with fewer words."
    return None


def refused_page(request, model_admin, message: str, status: int) -> TemplateResponse:
    """The answer to a refused or stopped list: the reason, and the list with nothing chosen."""
    opts = model_admin.opts
    log.warning("admin list %s answered %s to %s: %s", request.path, status, request.user.get_username(), message)
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist", current_app=model_admin.admin_site.name)
    return TemplateResponse(request, "admin/leasehold_refused.html", {
        **model_admin.admin_site.each_context(request), "title": message, "opts": opts, "list_url": url,
        "help": model_admin.query_help(request), "status": status}, status=status)


class DeclaredQueryAdmin(admin.ModelAdmin):
    """For every ModelAdmin here: the query string it accepts, its search
    bounded, its list's reads bounded in time. ``changelist_context`` adds
    to a rendered list's context, inside the bound."""

    drilldown_lookups: tuple[str, ...] = ()  # field lookups that the admin's own links put in a list's URL

    def declared_lookups(self, request) -> set[str]:
        names = set(self.drilldown_lookups)
        for list_filter in self.get_list_filter(request):
            if isinstance(list_filter, type) and issubclass(list_filter, admin.SimpleListFilter):
                names.add(str(getattr(list_filter, "parameter_name")))
            else:  # a field's filter (Django's, as the user admin's): the parameters it reads
                names.update(self._field_filter_parameters(request, list_filter))
        if self.date_hierarchy:
            names |= {f"{self.date_hierarchy}__{part}" for part in ("year", "month", "day")}
        return names

    def _field_filter_parameters(self, request, list_filter) -> list[str]:
        """The parameters Django's filter of a field reads (a yes/no, a choice, a relation's
        key), known without building it (a relation's filter reads its choices from the database)."""
        if not isinstance(list_filter, str):
            raise TypeError(f"{type(self).__name__}: declare the parameters of {list_filter!r}")
        field = get_fields_from_path(self.model, list_filter)[-1]
        if field.is_relation:
            return [f"{list_filter}__{field.target_field.name}__exact", f"{list_filter}__isnull"]
        if field.get_internal_type() == "BooleanField" or field.choices:
            return [f"{list_filter}__exact", f"{list_filter}__isnull"]
        raise TypeError(f"{type(self).__name__}: declare the parameters of the {list_filter!r} filter")

    def lookup_allowed(self, lookup, value, request=None):
        """Only what this list declares; never another lookup on a field."""
        return request is not None and lookup in self.declared_lookups(request)

    def query_help(self, request) -> str:
        names = ", ".join(sorted(self.declared_lookups(request)))
        return (f"This list takes: {names}; and q (search, at most {SEARCH_WORDS} words), o (order), p (page), "
                "all.")

    def check_query(self, request) -> None:
        refusal = search_refusal(request.GET.get(SEARCH_VAR, ""))
        if refusal:
            raise QueryRefused(refusal)

    def changelist_view(self, request, extra_context=None):
        bound = bounded_reads(request=request) if request.method in ("GET", "HEAD") else _nothing()
        try:
            self.check_query(request)
            with bound:
                response = super().changelist_view(request, extra_context)
                context = getattr(response, "context_data", None)
                if context and "cl" in context:
                    cl = context["cl"]
                    cl.result_list = list(cl.result_list)  # read here, in the bound
                    _clear_all_keeps_the_date(cl)
                    self.changelist_context(request, cl, context)
        except (DisallowedModelAdminLookup, QueryRefused) as refused:
            return refused_page(request, self, str(refused), 400)
        except OperationalError as exc:
            if not is_interrupted(exc):
                raise
            return refused_page(request, self, f"The list took longer than {read_seconds():g} s to read and was "
                                "stopped. Narrow it (a filter, a day, a search) and try again.", 503)
        return response

    def changelist_context(self, request, cl, context: dict) -> None:
        """What the list's page shows besides Django's change list."""


def _clear_all_keeps_the_date(cl) -> None:
    """"Clear all filters" keeps the chosen year, month or day as the drill-down's own parameters
    (Django's link spells them as the date range it filters by, which no list accepts)."""
    if cl.date_hierarchy:
        dates = f"{cl.date_hierarchy}__"
        cl.clear_all_filters_qs = cl.get_query_string(
            remove=[name for name in cl.get_filters_params() if not name.startswith(dates)])


@contextmanager
def _nothing():
    yield
