"""What both doors take from a client's headers alike: its request id, its user agent (cut), and the names of
``x-ms-meta-*`` headers as WSGI hands them over. The rules on metadata names and values themselves
are leases/domain/metadata.py's. WSGI upper-cases header names and folds ``-`` into ``_``
(``x-ms-meta-Build_Id`` arrives as ``HTTP_X_MS_META_BUILD_ID``), so under plain WSGI a metadata name
arrives lower-cased, and a ``_`` in it is a ``_``: a C# identifier cannot hold ``-``. The production
front (serving/front.py) also hands over the header pairs as sent, in
``environ["leasehold.raw_headers"]``: there names keep their case, as on Azure. Only the signature
tells a client that did send ``-`` apart (leases/auth/sharedkey.py asks ``signed_metadata_header``
both ways); such a name is refused with ``dash_in_metadata_name``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from leases.domain import metadata

# A client request id is echoed and recorded in the history only if it is
# 1 to 1024 printable ASCII characters (Azure's limit); otherwise neither.
CLIENT_REQUEST_ID = re.compile(r"[\x20-\x7e]{1,1024}\Z")
AZURE_CLIENT_REQUEST_ID = "HTTP_X_MS_CLIENT_REQUEST_ID"  # x-ms-client-request-id, on both doors
API_CLIENT_REQUEST_ID = "HTTP_X_CLIENT_REQUEST_ID"  # X-Client-Request-Id, the JSON API's own (first)

# The history keeps this many characters of a client's User-Agent (LeaseEvent.user_agent's max_length;
# the history cuts it, leases/services/history.py).
USER_AGENT_MAX = 512
METADATA_PREFIX = "HTTP_X_MS_META_"
RAW_HEADERS = "leasehold.raw_headers"  # set by serving/asgi.py from serving/front.py's scope


def client_request_id(meta: Mapping[str, str], keys: tuple[str, ...] = (AZURE_CLIENT_REQUEST_ID,)) -> str:
    """The first non-empty of the headers ``keys`` (WSGI names), if it is a
    valid client request id, else ""."""
    value = next((meta[key] for key in keys if meta.get(key)), "")
    return value if CLIENT_REQUEST_ID.match(value) else ""


def user_agent(meta: Mapping[str, str]) -> str:
    """The client's User-Agent ("" if it sent none)."""
    return meta.get("HTTP_USER_AGENT", "")


def metadata_from_environ(environ: Mapping[str, Any]) -> dict:
    """The x-ms-meta-* pairs. Names keep their case where the server handed
    the raw header pairs over; a name sent twice, in any case, is kept twice
    over (distinct spellings) so that leases/domain/metadata.py refuses it, or
    refused here (the very same spelling twice). Under plain WSGI names come
    lower-cased."""
    raw = environ.get(RAW_HEADERS)
    if raw is None:
        return {key[len(METADATA_PREFIX):].lower(): value
                for key, value in environ.items() if key.startswith(METADATA_PREFIX)}
    pairs: dict = {}
    for name, value in raw:
        if name[:10].lower() == b"x-ms-meta-":
            key = name[10:].decode("latin-1")
            if key in pairs:  # the very same name twice
                raise metadata.invalid(f"Metadata name {key!r} is given twice (names ignore case).")
            pairs[key] = value.decode("latin-1")
    return pairs


def signed_metadata_header(key: str, *, dash: bool = False) -> str:
    """The header name a client signed for the WSGI key of a metadata
    header: with its ``_`` as sent, or (``dash``) as ``-``."""
    name = key[len(METADATA_PREFIX):].lower()
    return "x-ms-meta-" + (name.replace("_", "-") if dash else name)


def metadata_names_could_hold_dashes(environ: Mapping[str, Any]) -> bool:
    """Whether some metadata header's name has a ``_`` that might have been
    a ``-`` on the wire."""
    return any("_" in key[len(METADATA_PREFIX):] for key in environ if key.startswith(METADATA_PREFIX))


def dash_in_metadata_name():
    """400 InvalidMetadata: the client signed a metadata name with ``-``."""
    return metadata.invalid("Metadata names are C# identifiers and cannot contain '-'.")
