"""Cursor pagination: no COUNT over the history, and a page boundary is a
position (not an offset), so appends never shift what a client pages
through."""

from __future__ import annotations

from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination

from leases.domain.errors import LeaseholdError


class Cursor(CursorPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000

    def get_page_size(self, request):
        """``page_size``, 1 to ``max_page_size``; anything else is 400 (DRF
        ignores a bad one silently and clamps a large one)."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None or raw == "":
            return self.page_size
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= self.max_page_size:
            raise LeaseholdError("InvalidQueryParameterValue", field=self.page_size_query_param, value=raw[:100],
                                 message=f"page_size must be a whole number from 1 to {self.max_page_size}.")
        return int(raw)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {**parameter["schema"], "minimum": 1, "maximum": self.max_page_size}
        return parameters

    def decode_cursor(self, request):
        try:
            return super().decode_cursor(request)
        except NotFound:  # DRF's answer to an undecodable cursor
            raise self._invalid(request) from None

    def paginate_queryset(self, queryset, request, view=None):
        try:
            return super().paginate_queryset(queryset, request, view)
        except (TypeError, ValueError):
            # A well-formed cursor whose position is no value of the ordering
            # field (a client can write any cursor): Django refuses the filter.
            raise self._invalid(request) from None

    def _invalid(self, request) -> LeaseholdError:
        return LeaseholdError("InvalidQueryParameterValue", field=self.cursor_query_param,
                              value=request.query_params.get(self.cursor_query_param))


class NameCursor(Cursor):
    # Names repeat across containers and accounts; the id settles ties.
    ordering = ("name", "id")


class EventCursor(Cursor):
    # Ids are handed out in commit order (SQLite serialises writers), so
    # a new event always sorts after every existing one; occurred_at can
    # tie, and is read before the write lock is taken.
    ordering = "-id"
