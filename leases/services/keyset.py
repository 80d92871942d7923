"""Long reads in short pieces: the history's exports page through the table by their sort key
(keyset paging) instead of holding one cursor open. A cursor held across a whole export of 1,000,000
events keeps one read transaction (and, on SQLite, the WAL from being reset) open for the minutes
the client takes to download it, and ties the export to one thread. Here each page is a query of its
own, a few milliseconds, continuing strictly after the last row's sort key; between pages nothing is
held, so the server (serving/asgi.py) gives the thread to other requests while the page is sent.
Events recorded after the export began are left out (the highest id at the start bounds it), so an
export is "as of its start", as the cursor's snapshot was."""

from __future__ import annotations

from collections.abc import Iterator
from functools import reduce

from django.db.models import Max, Q
from django.db.models.expressions import F, OrderBy

PAGE_ROWS = 2000


def _sort_keys(queryset) -> list[tuple[str, bool]]:
    """(field, descending) of the queryset's ordering, made unique by the
    primary key; anything after the key is irrelevant and dropped."""
    pk = queryset.model._meta.pk.name
    keys = []
    for item in list(queryset.query.order_by) or list(queryset.model._meta.ordering):
        if isinstance(item, str):
            name, descending = item.lstrip("-"), item.startswith("-")
        elif isinstance(item, OrderBy) and isinstance(item.expression, F):
            name, descending = item.expression.name, item.descending
        else:
            raise ValueError(f"cannot page through an ordering by {item!r}")
        name = pk if name == "pk" else name
        if "__" in name or name == "?":
            raise ValueError(f"cannot page through an ordering by {item!r}")
        keys.append((name, descending))
        if name == pk:
            return keys
    return [*keys, (pk, keys[-1][1] if keys else False)]


def _after(keys: list[tuple[str, bool]], last: tuple) -> Q:
    """Rows strictly after ``last`` in the order of ``keys``: (a > x) or
    (a = x and b > y) or ...; plus a >= x alone, which an index on the
    first key can range over."""
    def beyond(name, descending, value):
        return Q(**{f"{name}__{'lt' if descending else 'gt'}": value})

    alternatives = []
    for i, (name, descending) in enumerate(keys):
        equal = [Q(**{keys[j][0]: last[j]}) for j in range(i)]
        alternatives.append(reduce(lambda a, b: a & b, [*equal, beyond(name, descending, last[i])]))
    condition = reduce(lambda a, b: a | b, alternatives)
    if len(keys) > 1:
        name, descending = keys[0]
        condition &= Q(**{f"{name}__{'lte' if descending else 'gte'}": last[0]})
    return condition


def keyset_rows(queryset, columns: tuple[str, ...] | list[str], *, page_rows: int = PAGE_ROWS) -> Iterator[tuple]:
    """The ``columns`` of every row of ``queryset``, in its order, read
    ``page_rows`` at a time, each page its own short query. The bound (the
    highest id) is read now, when the call is made (the view, before its
    answer starts), not when the first row is asked for: rows recorded
    meanwhile are not in it."""
    keys = _sort_keys(queryset)
    pk = queryset.model._meta.pk.name
    newest = queryset.model._default_manager.using(queryset.db).aggregate(newest=Max(pk))["newest"]
    if newest is None:
        return iter(())
    return _pages(queryset, keys, pk, newest, list(columns), page_rows)


def _pages(queryset, keys, pk, newest, columns: list[str], page_rows: int) -> Iterator[tuple]:
    fetched = columns + [name for name, _ in keys if name not in columns]
    at = [fetched.index(name) for name, _ in keys]
    base = queryset.filter(**{f"{pk}__lte": newest}).values_list(*fetched)
    width = len(columns)
    last = None
    while True:
        page = list((base if last is None else base.filter(_after(keys, last)))[:page_rows])
        for row in page:
            yield row[:width]
        if len(page) < page_rows:
            return
        last = tuple(page[-1][i] for i in at)
