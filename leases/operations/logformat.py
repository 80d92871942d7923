"""Log lines an operator can grep and a collector can parse. One line per record, failures included:
the exception becomes a ``cause`` (its type and message, and those of what caused it:
"OperationalError: database or disk is full") instead of a multi-line traceback. Set
LEASEHOLD_LOG_TRACEBACKS=1 to have the traceback too (text format: on the following lines; JSON: in
a "traceback" field). LEASEHOLD_LOG_FORMAT=json writes one JSON object per line."""

from __future__ import annotations

import json
import logging
import re
import time
from datetime import datetime, timezone
from urllib.parse import quote_plus, unquote, unquote_plus

from leases import conf
from leases.domain import fingerprints


def cause_of(exc: BaseException | None) -> str:
    """``Type: message`` of the exception and of the chain that caused it."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        message = " ".join(str(exc).split())
        parts.append(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)
        exc = exc.__cause__ or exc.__context__
    return " <- ".join(parts)


def _tracebacks(given: bool | None) -> bool:
    """As given (settings.LOGGING passes LOG_TRACEBACKS), else the setting."""
    return conf.current().log_tracebacks if given is None else given


def _request_fields(record) -> dict:
    fields = {}
    request = getattr(record, "request", None)
    if request is not None and hasattr(request, "method"):
        fields["method"], fields["path"] = request.method, request.path
    if getattr(record, "status_code", None) is not None:
        fields["status"] = record.status_code
    return fields


class OneLineFormatter(logging.Formatter):
    def __init__(self, tracebacks: bool | None = None):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.tracebacks = _tracebacks(tracebacks)

    def format(self, record):
        line = " ".join(super().formatMessage(self._prepare(record)).split("\n"))
        if record.exc_info and record.exc_info[1] is not None:
            line += f" | cause: {cause_of(record.exc_info[1])}"
            if self.tracebacks:
                line += "\n" + self.formatException(record.exc_info)
        return line

    def _prepare(self, record):
        record.message = record.getMessage()
        record.asctime = self.formatTime(record)
        return record


class JsonFormatter(logging.Formatter):
    def __init__(self, tracebacks: bool | None = None):
        super().__init__()
        self.tracebacks = _tracebacks(tracebacks)

    def format(self, record):
        entry = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_request_fields(record),
        }
        if record.exc_info and record.exc_info[1] is not None:
            entry["cause"] = cause_of(record.exc_info[1])
            if self.tracebacks:
                entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


# A storage fault is logged once, with its cause, by the door's exception
# handler; Django's request logger would log the 503 again. The handler
# marks the request with this attribute and SkipLoggedFaults drops Django's
# line for it (config/settings.py LOGGING).
FAULT_LOGGED = "leasehold_fault_logged"


def mark_fault_logged(request) -> None:
    """Mark ``request`` (DRF's Request or Django's HttpRequest) as logged."""
    if request is not None:
        setattr(getattr(request, "_request", request), FAULT_LOGGED, True)


class SkipLoggedFaults(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(getattr(record, "request", None), FAULT_LOGGED, False)


# The JSON API takes a lease id in the query string (?lease_id=): an access
# log line shows its fingerprint instead, as every other reader sees it.
_LEASE_ID_QUERY = re.compile(r"(?<=[?&])(lease_id=)([^&#\s\"]*)")


# The admin takes a full lease id in its search box (?q=): in an admin URL's
# query string every GUID-shaped value is shown as its fingerprint.
_ADMIN_QUERY = re.compile(r"(/admin/[^?\s]*\?)([^\s#]*)")
_GUID = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f](?:-?[0-9A-Fa-f]){31}(?![0-9A-Fa-f])")


def without_lease_ids(text: str) -> str:
    """``text`` (a request line, a URL) with each ``lease_id=`` value that
    is a lease id, and each GUID in an admin URL's query string, replaced by
    ``fingerprint:<its fingerprint>``."""
    def replace(match: re.Match) -> str:
        found = fingerprints.of_id_text(unquote(match.group(2)))
        return match.group(1) + (f"fingerprint:{found}" if found else match.group(2))

    if "lease_id=" in text:
        text = _LEASE_ID_QUERY.sub(replace, text)
    if "/admin/" in text:
        text = _ADMIN_QUERY.sub(lambda m: m.group(1) + _without_guids(m.group(2)), text)
    return text


def _without_guids(query: str) -> str:
    parts = []
    for part in query.split("&"):
        hidden = []
        for piece in part.split("=", 1):
            plain = unquote_plus(piece)
            shown = _GUID.sub(lambda m: f"fingerprint:{fingerprints.of_id_text(m.group())}", plain)
            hidden.append(piece if shown == plain else quote_plus(shown, safe=":/"))
        parts.append("=".join(hidden))
    return "&".join(parts)


class LeaseIdsOut(logging.Filter):
    """On uvicorn's access logger (serving/front.py): its record's arguments
    are (client, method, path with query, HTTP version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(without_lease_ids(a) if isinstance(a, str) else a for a in record.args)
        return True


class OncePerAddress(logging.Filter):
    """What a cheap request makes a logger say (Django's "Invalid HTTP_HOST
    header", an ERROR per request) as one WARNING per client address per
    ``interval`` seconds: a flood of them writes a line a minute."""

    MAX_ADDRESSES = 65536

    def __init__(self, interval: float = 60.0):
        super().__init__()
        self.interval = interval
        self.last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "leasehold_once", False):  # passed already (the filter set up twice)
            return True
        request = getattr(record, "request", None)
        address = getattr(request, "META", {}).get("REMOTE_ADDR", "") if request is not None else ""
        now = time.monotonic()
        if now - self.last.get(address, -self.interval) < self.interval:
            return False
        if len(self.last) >= self.MAX_ADDRESSES:
            self.last = {a: t for a, t in self.last.items() if now - t < self.interval}
        self.last[address] = now
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg = f"{record.msg} (from {address or '?'}; more such lines from it in the next " \
                     f"{self.interval:.0f} s are not logged)"
        record.exc_info = record.exc_text = None  # the message says it all
        record.leasehold_once = True
        return True
