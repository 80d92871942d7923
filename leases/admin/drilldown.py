"""The history's date drill-down, cheap at a million events. Django's ``date_hierarchy`` tag reads
MIN and MAX in one query (a full scan on SQLite, which only shortcuts a lone MIN or MAX) and then a
DISTINCT year, month or day over every matching row. This offers the calendar periods between the
first and the last event instead, found by two seeks of the occurred_at index. A period offered may
hold no event the filtered list shows; it then shows an empty page, which costs nothing to find
out."""

from __future__ import annotations

import calendar
from datetime import date, datetime, timedelta

from django.utils import formats, timezone
from django.utils.text import capfirst


def date_drilldown(cl) -> dict | None:
    """Context for ``admin/date_hierarchy.html``, as Django's tag builds it,
    and the zone its days are in (the active one: the operator's, leases/admin/zone.py);
    None while searching (a search hits few rows and needs no calendar)."""
    drilldown = _levels(cl)
    return drilldown and {**drilldown, "zone": timezone.get_current_timezone_name()}


def _levels(cl) -> dict | None:
    field = cl.date_hierarchy
    if not field or cl.query:
        return None
    year, month, day = (cl.params.get(f"{field}__{part}") for part in ("year", "month", "day"))

    def link(filters):
        return cl.get_query_string(filters, [f"{field}__"])

    def day_title(d: date) -> str:
        return capfirst(formats.date_format(d, "MONTH_DAY_FORMAT"))

    if year and month and day:
        chosen = date(int(year), int(month), int(day))
        return {"show": True, "choices": [{"title": day_title(chosen)}],
                "back": {"link": link({f"{field}__year": year, f"{field}__month": month}),
                         "title": capfirst(formats.date_format(chosen, "YEAR_MONTH_FORMAT"))}}

    first, last = _span(cl, field, year, month)
    if first is None:  # nothing in this period: offer the way back only
        return {"show": True, "back": {"link": link({}), "title": "All dates"}, "choices": []} if year else None
    first, last = timezone.localtime(first), timezone.localtime(last)
    if not year and first.year == last.year:
        year = first.year  # one year only: start a level down, as Django does
        if first.month == last.month:
            month = first.month
    if year and month:
        y, m = int(year), int(month)
        days = range(first.day if (first.year, first.month) == (y, m) else 1,
                     (last.day if (last.year, last.month) == (y, m) else calendar.monthrange(y, m)[1]) + 1)
        return {"show": True, "back": {"link": link({f"{field}__year": y}), "title": str(y)},
                "choices": [{"link": link({f"{field}__year": y, f"{field}__month": m, f"{field}__day": d}),
                             "title": day_title(date(y, m, d))} for d in days]}
    if year:
        y = int(year)
        months = range(first.month if first.year == y else 1, (last.month if last.year == y else 12) + 1)
        return {"show": True, "back": {"link": link({}), "title": "All dates"},
                "choices": [{"link": link({f"{field}__year": y, f"{field}__month": m}),
                             "title": capfirst(formats.date_format(date(y, m, 1), "YEAR_MONTH_FORMAT"))}
                            for m in months]}
    return {"show": True, "back": None,
            "choices": [{"link": link({f"{field}__year": y}), "title": str(y)}
                        for y in range(first.year, last.year + 1)]}


def _span(cl, field: str, year: str | None, month: str | None) -> tuple[datetime | None, datetime | None]:
    """The first and last event of the chosen year or month, or of all
    time, from the unfiltered table: two seeks of the occurred_at index
    whatever the list's other filters are (with some, SQLite would walk a
    quarter of the table for one row instead)."""
    rows = cl.root_queryset
    if year:
        start = datetime(int(year), int(month or 1), 1)
        end = (start + timedelta(days=32)).replace(day=1) if month else start.replace(year=start.year + 1)
        rows = rows.filter(**{f"{field}__gte": timezone.make_aware(start), f"{field}__lt": timezone.make_aware(end)})
    dates = rows.values_list(field, flat=True)
    return dates.order_by(field).first(), dates.order_by(f"-{field}").first()
