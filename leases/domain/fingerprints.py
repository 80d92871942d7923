"""Lease id fingerprints: what every reader sees in place of a lease id. A lease id is a capability:
whoever knows it can renew, change or release the lease. Only the answer to the acquire or change
that made it carries it (and a renew's, which echoes the id its caller sent); history, exports, the
JSON API's reads, admin pages, logs and metrics show its fingerprint instead: the first 12 hex
digits of the SHA-256 of the id in its canonical spelling (lowercase, hyphenated), so that anyone
holding an id can compute its fingerprint (``printf %s <id> | sha256sum | cut -c1-12``) and find its
events. Unkeyed, so it never changes with the server's secret key
(docs/decisions/0029-lease-id-fingerprints.md says why that is safe)."""

from __future__ import annotations

import functools
import hashlib
import re
import uuid

LENGTH = 12
FINGERPRINT = re.compile(rf"[0-9a-f]{{{LENGTH}}}\Z")


def of(lease_id: uuid.UUID | str | None) -> str:
    """The fingerprint of ``lease_id`` ("" for None)."""
    if lease_id is None:
        return ""
    return _of(lease_id if isinstance(lease_id, uuid.UUID) else uuid.UUID(lease_id))


@functools.lru_cache(maxsize=4096)  # every history event: a renewal names the id its lease had before
def _of(lease_id: uuid.UUID) -> str:
    return hashlib.sha256(str(lease_id).encode("ascii")).hexdigest()[:LENGTH]


def from_term(term: str) -> str | None:
    """The fingerprint a search term names: a fingerprint itself, or a full
    lease id in any GUID spelling (hyphens, braces, either case); None if
    it is neither."""
    text = term.strip().lower()
    return text if FINGERPRINT.match(text) else of_id_text(text)


def of_id_text(text: str) -> str | None:
    """The fingerprint of the lease id spelled ``text`` (any GUID spelling),
    None if it is no lease id."""
    digits = text.strip().lower().strip("{}()").replace("-", "")
    if len(digits) == 32 and all(c in "0123456789abcdef" for c in digits):
        return of(uuid.UUID(digits))
    return None
