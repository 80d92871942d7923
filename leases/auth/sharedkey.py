"""SharedKey: signing and verifying a request with a storage account's key,
and the DRF authentication class both doors use (the Azure endpoint, and the
JSON API for ``Authorization: SharedKey``). The string-to-sign is rebuilt
from the *raw* request URI: Django's decoded path cannot reproduce the
client's percent-encoding for every name."""

from __future__ import annotations

import base64
import functools
import hmac
import re
import threading
from contextlib import contextmanager
from collections import defaultdict
from datetime import datetime
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qsl, quote, urlsplit

from django.conf import settings
from rest_framework.authentication import BaseAuthentication

from leases.domain import clock, client_headers
from leases.domain.errors import LeaseholdError
from leases.models import Account
from leases.storage.compiled_reads import values_one

AUTH_RE = re.compile(r"^SharedKey ([a-z0-9]{1,64}):([A-Za-z0-9+/=]{20,128})$")
STANDARD_HEADERS = ("CONTENT_ENCODING", "CONTENT_LANGUAGE", "CONTENT_LENGTH", "CONTENT_MD5", "CONTENT_TYPE",
                    "DATE", "IF_MODIFIED_SINCE", "IF_MATCH", "IF_NONE_MATCH", "IF_UNMODIFIED_SINCE", "RANGE")
# The WSGI environ keys of STANDARD_HEADERS (see _meta).
_STANDARD_KEYS = tuple(name if name in ("CONTENT_LENGTH", "CONTENT_TYPE") else "HTTP_" + name
                       for name in STANDARD_HEADERS)
_LENGTH_SLOT = STANDARD_HEADERS.index("CONTENT_LENGTH")
# The environ key of a SharedKey the server verified before the request
# queued (leases/auth/principals.py): the account's name and the key that
# signed it. Only the server sets it (a client's headers become HTTP_* keys).
VERIFIED = "leasehold.verified_account"


class AccountPrincipal:
    """request.user for a SharedKey request: the storage account."""

    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, name: str):
        self.name = name
        self.username = f"account:{name}"

    def __str__(self) -> str:
        return self.username


def _meta(environ: dict, name: str) -> str:
    if name in ("CONTENT_LENGTH", "CONTENT_TYPE"):
        return environ.get(name, "")
    return environ.get("HTTP_" + name, "")


def _raw_path(environ: dict) -> str | None:
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        return urlsplit(raw).path if "://" in raw else raw.split("?", 1)[0]
    return None


# How SDKs percent-encode a path they sign: the Python, .NET and Java SDKs
# keep only RFC 3986's unreserved characters (and '/'); the JavaScript SDK
# (encodeURIComponent) also keeps ! ' ( ) *.
SDK_PATH_SAFE = ("/~", "/~!'()*")


def raw_paths(environ: dict, decoded_path: str) -> list[str]:
    """The path as the client encoded it, when the server passes it on
    (RAW_URI, REQUEST_URI), then the decoded path re-quoted as the SDKs quote
    it (a WSGI server that sets neither passes only the decoded path)."""
    paths = []
    raw = _raw_path(environ)
    if raw:
        paths.append(raw)
    for safe in SDK_PATH_SAFE:
        requoted = quote(decoded_path, safe=safe)
        if requoted not in paths:
            paths.append(requoted)
    return paths


# Caches keyed by what a client sends keep only short keys: their bytes stay
# bounded (entries x key size) whatever an unauthenticated client sends.
CACHED_KEY_CHARS = 256


def _canonical_query(query_string: str) -> str:
    """The query part of the canonicalized resource (query strings repeat)."""
    if len(query_string) > CACHED_KEY_CHARS:
        return _canonical_query_of(query_string)
    return _canonical_query_cached(query_string)


@functools.lru_cache(maxsize=1024)
def _canonical_query_cached(query_string: str) -> str:
    return _canonical_query_of(query_string)


def _canonical_query_of(query_string: str) -> str:
    query = defaultdict(list)
    for k, v in parse_qsl(query_string, keep_blank_values=True):
        query[k.lower()].append(v)
    return "".join(f"\n{k}:{','.join(sorted(query[k]))}" for k in sorted(query))


def _canonical_ms_name(key: str, meta_dash: bool) -> str:
    """The signed name of an HTTP_X_MS_* header. WSGI folded '-' into '_';
    a metadata name's spelling is client_headers' rule."""
    if key.startswith(client_headers.METADATA_PREFIX):
        return client_headers.signed_metadata_header(key, dash=meta_dash)
    return key[5:].lower().replace("_", "-")


def string_to_sign(environ: dict, path: str, account: str, *, meta_dash: bool = False) -> str:
    method = environ["REQUEST_METHOD"]
    version = environ.get("HTTP_X_MS_VERSION", "")
    get = environ.get
    values = [get(key, "") for key in _STANDARD_KEYS]
    if values[_LENGTH_SLOT] == "0" and (not version or version >= "2015-02-21"):
        values[_LENGTH_SLOT] = ""
    ms_headers = sorted(
        (_canonical_ms_name(key, meta_dash), value.strip())
        for key, value in environ.items() if key.startswith("HTTP_X_MS_"))
    canon_headers = "".join(f"{k}:{v}\n" for k, v in ms_headers)
    resource = f"/{account}{path}" + _canonical_query(environ.get("QUERY_STRING", ""))
    return f"{method}\n" + "\n".join(values) + "\n" + canon_headers + resource


@functools.lru_cache(maxsize=256)
def _key_bytes(key: str) -> bytes:
    return base64.b64decode(key)


def sign(key: str, text: str) -> str:
    digest = hmac.digest(_key_bytes(key), text.encode("utf-8"), "sha256")
    return base64.b64encode(digest).decode()


def _parse_date(value: str) -> datetime | None:
    """Clients send the same date string for a second; parse it once (a
    date is some 30 characters: a longer string is parsed, not kept)."""
    if len(value) > 64:
        return _parse_date_of(value)
    return _parse_date_cached(value)


@functools.lru_cache(maxsize=256)
def _parse_date_cached(value: str) -> datetime | None:
    return _parse_date_of(value)


def _parse_date_of(value: str) -> datetime | None:
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return when if when.tzinfo is not None else None


def _request_date(environ: dict) -> datetime:
    value = environ.get("HTTP_X_MS_DATE") or environ.get("HTTP_DATE")
    if not value:
        raise LeaseholdError("AuthenticationFailed", detail={
            "AuthenticationErrorDetail": "Request date header not specified."})
    when = _parse_date(value)
    if when is None:
        raise LeaseholdError("AuthenticationFailed", detail={
            "AuthenticationErrorDetail": f"The date header '{value[:100]}' is not in the correct format."})
    return when


def verify_shared_key(environ: dict, decoded_path: str, lookup):
    """Check a SharedKey request. ``lookup(name)`` returns ``(keys, found)``
    for the named account or None; answers ``found`` when a key signs the
    request, None when it is not signed at all, and raises the Azure error
    otherwise. The path as sent is tried first, then the re-quoted ones.
    A request the server verified before it queued (leases/auth/principals.py)
    carries its account and the key that signed it in ``VERIFIED``: the
    signature is not computed twice, but the key must still be one of the
    account's keys as ``lookup`` reads them now."""
    verified = environ.get(VERIFIED)
    if verified is not None:
        account = lookup(verified[0])
        if account is not None and verified[1] in account[0]:
            return account[1]
    found = signing_key(environ, decoded_path, lookup)
    return None if found is None else found[0]


def signing_key(environ: dict, decoded_path: str, lookup) -> tuple[str, str] | None:
    """``verify_shared_key``'s check in full: ``(found, the key that signed)``,
    None if not signed at all, else the Azure error."""
    header = environ.get("HTTP_AUTHORIZATION")
    if not header:
        return None
    match = AUTH_RE.match(header.strip())
    if not match:
        raise LeaseholdError("InvalidAuthenticationInfo")
    name, signature = match.groups()
    skew = abs((clock.now() - _request_date(environ)).total_seconds())
    if skew > settings.LEASEHOLD_CLOCK_SKEW_SECONDS:
        raise LeaseholdError("AuthenticationFailed", detail={
            "AuthenticationErrorDetail": "Request date header too old or too far in the future."})
    account = lookup(name)
    raw = _raw_path(environ)
    first = string_to_sign(environ, raw if raw else quote(decoded_path, safe="/~"), name)
    if account is not None:
        keys, found = account
        for key in keys:
            if hmac.compare_digest(sign(key, first), signature):
                return found, key
        for path in raw_paths(environ, decoded_path)[1:]:  # other encodings, if they differ
            text = string_to_sign(environ, path, name)
            for key in keys:
                if hmac.compare_digest(sign(key, text), signature):
                    return found, key
        if client_headers.metadata_names_could_hold_dashes(environ):
            # Signed with '-' in a metadata name: a name Azure refuses (400),
            # which only the signature can tell apart from '_' under WSGI.
            for path in raw_paths(environ, decoded_path):
                text = string_to_sign(environ, path, name, meta_dash=True)
                if any(hmac.compare_digest(sign(key, text), signature) for key in keys):
                    raise client_headers.dash_in_metadata_name()
    raise LeaseholdError("AuthenticationFailed", detail={
        "AuthenticationErrorDetail": (
            f"The MAC signature found in the HTTP request '{signature}' is not the same as any "
            f"computed signature. Server used following string to sign: '{first}'.")})


# The keys last read of each account: only the admission's pre-filter
# (leases/auth/principals.py), which reads again before it refuses; the doors
# read the keys at every request (``account_keys``), so a changed or removed
# key counts at once in every process. Unknown names are never remembered.
_known_keys: dict[str, tuple] = {}


_batch = threading.local()  # .keys: name -> what account_keys read for the requests checked together


@contextmanager
def read_once():
    """Lease requests received together (a lean path's batch) checked in the
    block: each account's keys read once for all of them, after every one
    was received, so still the keys of now for each."""
    _batch.keys = {}
    try:
        yield
    finally:
        _batch.keys = None


def account_keys(name: str):
    """``(keys, name)`` of a storage account, or None: read from the
    database now (a compiled statement: statements cost more to build than
    to run)."""
    memo = getattr(_batch, "keys", None)
    if memo is not None and name in memo:
        return memo[name]
    row = values_one("account-keys", _account_keys_query, name)
    if row is None:
        _known_keys.pop(name, None)
        found = None
    else:
        found = _known_keys[name] = (tuple(k for k in row if k), name)
    if memo is not None:
        memo[name] = found
    return found


def lean_signing_key(environ: dict, decoded_path: str, account: str) -> str | None:
    """The key that signed a SharedKey request for ``account``, found among
    the keys last read in this process (the server's own check before the
    request queued, ``VERIFIED``, or ``known_account_keys``), for a caller
    that checks it is still one of the account's where it writes (the lean
    lease path: in the write's own snapshot, services.KeyGone). None: not
    found so (not SharedKey, another account, a key not last read, a bad
    date...): the caller checks in full, with the keys read now."""
    verified = environ.get(VERIFIED)
    if verified is not None:
        return verified[1] if verified[0] == account else None
    known = _known_keys.get(account)
    if known is None or not environ.get("HTTP_AUTHORIZATION", "").startswith("SharedKey "):
        return None
    try:
        found = signing_key(environ, decoded_path, lambda name: known if name == account else None)
    except LeaseholdError:
        return None
    return None if found is None else found[1]


def refusal_with(environ: dict, decoded_path: str, account: str, keys: tuple[str, ...] | None) -> Exception:
    """The refusal ``verify_shared_key`` raises for a request whose key is
    not among ``keys`` (an account's keys read in a write's snapshot; None:
    no such account), which are remembered as the keys last read."""
    found = None if keys is None else (keys, account)
    if found is None:
        _known_keys.pop(account, None)
    else:
        _known_keys[account] = found
    try:
        signing_key({k: v for k, v in environ.items() if k != VERIFIED}, decoded_path,
                    lambda name: found if name == account else None)
    except LeaseholdError as err:
        return err
    return LeaseholdError("AuthenticationFailed")  # signed by one of them after all: the write's snapshot decides


def known_account_keys(name: str):
    """The keys of an account as last read in this process, or None: a
    pre-filter only (they may have changed since)."""
    return _known_keys.get(name)


def _account_keys_query(name: str):
    return Account.objects.filter(name=name).values_list("key1", "key2")


class SharedKeyAuthentication(BaseAuthentication):
    def authenticate(self, request):
        name = verify_shared_key(request.META, request._request.path, account_keys)
        if name is None:
            return None
        return AccountPrincipal(name), name

    def authenticate_header(self, request):
        return "SharedKey"
