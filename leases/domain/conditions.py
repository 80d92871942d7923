"""HTTP conditional headers (If-Match, If-None-Match, If-Modified-Since,
If-Unmodified-Since), evaluated the way the Blob service does
(docs/reference/azure-compatibility.md §7). Pure: no Django."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime

from leases.domain.errors import LeaseholdError


def parse_http_date(value: str | None, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise LeaseholdError("InvalidHeaderValue", field=field, value=value)
    return parsed


def _etags(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip().strip('"') for v in value.split(",") if v.strip()]


@dataclass(frozen=True)
class Conditions:
    if_match: list[str] | None = None
    if_none_match: list[str] | None = None
    if_modified_since: datetime | None = None
    if_unmodified_since: datetime | None = None

    @classmethod
    def parse(cls, get) -> "Conditions":
        """``get(name)`` returns a request header or None."""
        return cls(
            if_match=_etags(get("If-Match")),
            if_none_match=_etags(get("If-None-Match")),
            if_modified_since=parse_http_date(get("If-Modified-Since"), "if_modified_since"),
            if_unmodified_since=parse_http_date(get("If-Unmodified-Since"), "if_unmodified_since"),
        )

    def dates_only(self) -> "Conditions":
        """Container operations honour only the date conditions."""
        return Conditions(if_modified_since=self.if_modified_since, if_unmodified_since=self.if_unmodified_since)

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.if_match, self.if_none_match,
                                           self.if_modified_since, self.if_unmodified_since))

    # Dates compare at one-second precision, as the service does.
    @staticmethod
    def _modified_since(last_modified: datetime, since: datetime) -> bool:
        return int(last_modified.timestamp()) > int(since.timestamp())

    @staticmethod
    def _matches(etags: list[str], etag: str | None) -> bool:
        return etag is not None and ("*" in etags or etag.strip('"') in etags)

    def check_write(self, etag: str | None, last_modified: datetime | None, *, noun: str = "blob") -> None:
        """Writes: any unmet condition is 412 ConditionNotMet. ``etag`` None
        means the resource does not exist yet (Put Blob)."""
        present = {name for name in ("if_match", "if_none_match", "if_modified_since", "if_unmodified_since")
                   if getattr(self, name) is not None}
        if not present:
            return
        # Only {If-None-Match, If-Modified-Since} or {If-Match, If-Unmodified-Since}
        # may be combined, and then the ETag condition alone is evaluated.
        if not (present <= {"if_none_match", "if_modified_since"} or present <= {"if_match", "if_unmodified_since"}):
            raise LeaseholdError("MultipleConditionHeadersNotSupported", noun=noun)
        if self.if_match is not None:
            met = self._matches(self.if_match, etag)
        elif self.if_unmodified_since is not None:
            met = last_modified is None or not self._modified_since(last_modified, self.if_unmodified_since)
        elif self.if_none_match is not None:
            met = not self._matches(self.if_none_match, etag)
        else:
            since = self.if_modified_since
            assert since is not None  # the one condition left
            met = last_modified is None or self._modified_since(last_modified, since)
        if not met:
            raise LeaseholdError("ConditionNotMet", noun=noun)

    def check_read(self, etag: str, last_modified: datetime, *, noun: str = "blob") -> bool:
        """Reads: If-Match / If-Unmodified-Since unmet is 412; If-None-Match /
        If-Modified-Since unmet returns False (answer 304 Not Modified)."""
        if self.if_match is not None and not self._matches(self.if_match, etag):
            raise LeaseholdError("ConditionNotMet", noun=noun)
        if self.if_unmodified_since is not None and self._modified_since(last_modified, self.if_unmodified_since):
            raise LeaseholdError("ConditionNotMet", noun=noun)
        if self.if_none_match is not None:
            return not self._matches(self.if_none_match, etag)
        if self.if_modified_since is not None:
            return self._modified_since(last_modified, self.if_modified_since)
        return True
