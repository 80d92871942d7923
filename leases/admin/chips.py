"""What narrows a list, as chips above it: one per filter, search and date,
each with a link that removes it (the sidebar shows choices, not what a
link from elsewhere, such as a resource's history, has chosen)."""

from __future__ import annotations

from django.contrib.admin.views.main import ORDER_VAR, PAGE_VAR, SEARCH_VAR

IGNORED = {ORDER_VAR, PAGE_VAR, "e", "_changelist_filters"}
NAMES = {"blob": "blob", "account": "account", "container": "container", SEARCH_VAR: "search"}


def filter_chips(cl) -> list[dict]:
    titles = {}
    for spec in cl.filter_specs:
        for param in getattr(spec, "expected_parameters", lambda: [])():
            titles[param] = str(spec.title)
    chips, params = [], dict(cl.params)
    field = cl.date_hierarchy
    if field:
        parts = [params.pop(f"{field}__{p}", None) for p in ("year", "month", "day")]
        if parts[0]:
            chips.append({"name": "date", "value": "-".join(p.zfill(2) for p in parts if p),
                          "remove": cl.get_query_string(remove=[f"{field}__", PAGE_VAR])})
    for param, value in params.items():
        if param in IGNORED or value in ("", None):
            if param == "blob" and value == "" and "container" in params:
                chips.append({"name": "blob", "value": "(the container's own lease)",
                              "remove": cl.get_query_string(remove=[param, PAGE_VAR])})
            continue
        value = value[-1] if isinstance(value, list) else value
        name = titles.get(param) or NAMES.get(param) or param.split("__")[0].replace("_", " ")
        chips.append({"name": name, "value": _label(cl, param, value),
                      "remove": cl.get_query_string(remove=[param, PAGE_VAR])})
    return chips


def _label(cl, param: str, value: str) -> str:
    """The choice's label where the sidebar has one (an account's name for its id)."""
    for spec in cl.filter_specs:
        if getattr(spec, "parameter_name", None) == param:
            for choice_value, label in getattr(spec, "lookup_choices", ()) or ():
                if str(choice_value) == str(value):
                    return str(label)
    return value
