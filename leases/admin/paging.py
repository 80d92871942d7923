"""Pagination without counting a big table. The changelist asks its paginator for ``count`` on every
page. On SQLite that is a scan of every matching row, and PostgreSQL's statistics estimate does not
apply to filtered lists. Counting stops at ``CAP`` instead: beyond that an operator narrows the list
with filters or search, and the templates show "10,000+"."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.utils.functional import cached_property


class CappedCountPaginator(Paginator):
    CAP = 10_000

    capped = False  # True when more rows match than were counted

    @cached_property
    def count(self) -> int:
        # Unordered and sliced: COUNT(*) over "SELECT ... LIMIT CAP + 1".
        seen = self.object_list.order_by()[: self.CAP + 1].count()
        self.capped = seen > self.CAP
        return min(seen, self.CAP)
