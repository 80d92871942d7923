"""Where a request goes by its path, the one source of it: the URLs
(config/urls.py), the Azure door's router and lean path, the server's
recognition of a lease request and the JSON API's schema all build their
patterns from these. The site's own first segments are never account names."""

from __future__ import annotations

import functools
import re
from urllib.parse import parse_qsl

ACCOUNT = r"[a-z0-9]{3,24}"  # an account name, the first segment of every Azure path
CONTAINER = r"\$root|\$logs|\$web|[a-z0-9](?:-?[a-z0-9])*"  # what a container name may look like
SITE_SEGMENTS = ("admin", "api", "static", "health", "metrics")  # first segments of the site's own pages
SITE_FILES = ("favicon.ico",)
API_PREFIX = "api/v1/"  # the JSON API, under the site's "api"
API_SITE = "/" + API_PREFIX.partition("/")[0] + "/"  # every path of the JSON API's door
ADMIN_SITE = "/admin/"
# The admin's side: with LEASEHOLD_ADMIN_HOSTS, served on those hosts alone, and the Azure door never there.
ADMIN_SEGMENTS = frozenset(("admin", "api", "static", "favicon.ico"))

_SITE = "|".join(SITE_SEGMENTS)
_NOT_SITE = rf"(?!(?:{_SITE})(?:/|$))"

# Django's URL patterns (no leading slash): an account's path, and any other
# path that is not the site's (an upper-case or malformed account).
ACCOUNT_URL = rf"^{_NOT_SITE}(?P<account>{ACCOUNT})(?:/(?P<rest>[\s\S]*))?$"
OTHER_URL = rf"^{_NOT_SITE}[\s\S]*$"
# A request path (leading slash): the Azure door's, or the site's own.
AZURE_PATH = re.compile(rf"^/{_NOT_SITE}{ACCOUNT}(?:/|$)")
SITE_PATH = re.compile(rf"^/(?:{_SITE}|{'|'.join(re.escape(f) for f in SITE_FILES)})(?:/|$)")
# /account/container[/blob] as the lean lease path reads it: groups account,
# container, blob; a container name is never empty there (that is the account's URL).
RESOURCE_PATH = re.compile(rf"/({ACCOUNT})/([^/]+)(?:/([\s\S]+))?\Z")
# Path parameters as the JSON API's schema states them.
ACCOUNT_PARAMETER = rf"^{ACCOUNT}$"
CONTAINER_PARAMETER = rf"^({CONTAINER})$"
# The JSON API's paths the server schedules by: lease actions (the lease
# lane), uploads (the blob size cap) and the history export (a long read).
API_LEASES = f"/{API_PREFIX}leases/"
API_BLOBS = f"/{API_PREFIX}blobs/"
API_EVENTS_EXPORT = f"/{API_PREFIX}events/export/"
API_TENURES_EXPORT = f"/{API_PREFIX}tenures/export/"


def query_value(query: str, name: str) -> str | None:
    """A query parameter's value as the doors read it (Django's ``request.GET``:
    names and values percent-decoded, ``+`` a space, the last of a repeated
    name; the Azure door refuses repeats), or None. ``query``: the query
    string as the WSGI environ holds it (latin-1 decoded bytes)."""
    if len(query) > CACHED_QUERY_CHARS:
        return _decoded(query).get(name)
    return _decoded_cached(query).get(name)


CACHED_QUERY_CHARS = 2048  # a lease holder sends the same query with each renewal: decoded once


def _decoded(query: str) -> dict[str, str]:
    text = query.encode("latin-1", "replace").decode("utf-8", "replace")
    return dict(parse_qsl(text, keep_blank_values=True))


@functools.lru_cache(maxsize=1024)
def _decoded_cached(query: str) -> dict[str, str]:
    return _decoded(query)


def is_lease_request(path: str, query: str) -> bool:
    """Whether a request is a lease action, the one decision of it (the
    server's lease lane and its credential gate, the Azure door's router):
    the JSON API's lease paths, or an Azure path whose decoded query has
    ``comp`` exactly ``lease`` (``?comp=%6Cease`` is one; ``?x=comp=lease``
    is not)."""
    if path.startswith(API_LEASES):
        return True
    return AZURE_PATH.match(path) is not None and query_value(query, "comp") == "lease"


def door_of(path: str) -> str:
    """The door a request is for, by its path (or its URL, query and all): ``"api"`` under the JSON
    API's site, else ``"azure"``. The one rule, for a lease request's lean path and credentials, for
    a request refused before routing (the front's limits, a body too large): the door whose shape
    its answer takes."""
    return "api" if path.startswith(API_SITE) else "azure"


def site_of(path: str) -> str:
    """``door_of``, with the admin's pages named apart: where /metrics counts an answer."""
    return "admin" if path.startswith(ADMIN_SITE) else door_of(path)


def admin_side(path: str) -> bool:
    """Whether a request path is the admin's side (``ADMIN_SEGMENTS``); /health and /metrics are no side's."""
    return path.split("/", 2)[1] in ADMIN_SEGMENTS if path.startswith("/") else False


def admin_host(host: str, admin_hosts) -> bool:
    """Whether a Host header names one of ``admin_hosts`` (``host`` or ``host:port``, lower case;
    an entry without a port names the host on any port)."""
    host = host.strip().lower()
    if host in admin_hosts:
        return True
    name, colon, port = host.rpartition(":")
    return bool(colon) and port.isdigit() and not name.endswith(":") and name in admin_hosts
