"""Shared access signatures (SAS) on the Azure door: an account SAS (``ss``/``srt``) or a service
SAS for a blob or a container (``sr=b``, ``sr=c``), signed with an account key, optionally naming a
container's stored access policy (``si``). ``verify`` checks a request's SAS (its signature, times,
address and protocol) and answers the grant, or raises Azure's error; ``authorize`` checks a grant
against one operation (its service, resource type and permissions). No request or response object is
read here beyond the WSGI environ, so the lean lease path and the general view call the same two
functions. A user delegation SAS (signed with a key from Get User Delegation Key) is delegation.py's to
check, called through ``verify``'s ``delegated``. The string-to-sign
of each signed version is the one the SDKs build (azure-storage-blob's
``_shared_access_signature.py``, @azure/storage-blob's ``BlobSASSignatureValues`` and
``AccountSASSignatureValues``)."""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from urllib.parse import parse_qsl

from leases.domain import clock
from leases.domain.errors import LeaseholdError
from leases.auth import roles
from leases.auth.sharedkey import sign

# The query parameters of a SAS (besides the request's own: comp, restype, ...).
SAS_PARAMETERS = frozenset({
    "sv", "ss", "srt", "sp", "st", "se", "sip", "spr", "sig", "sr", "si", "ses", "sdd", "sks",
    "rscc", "rscd", "rsce", "rscl", "rsct", "skoid", "sktid", "skt", "ske", "skv", "saoid", "suoid", "scid",
    "srh", "srq", "skdutid", "sduoid"})
USER_DELEGATION = ("skoid", "sktid", "skt", "ske", "sks", "skv")
ACCOUNT_SAS_SINCE = "2015-04-05"
SERVICE_SAS_SINCE = "2012-02-12"
# Since this version a service SAS signs (and so may set) a blob read's response headers.
RESPONSE_HEADERS_SINCE = "2013-08-15"
# Since this version a SAS's Delete permission also allows breaking a lease.
DELETE_BREAKS_SINCE = "2017-07-29"
VERSION = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}\Z")
# ISO 8601 as Azure takes st/se: a date, or a date and time in UTC.
TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
                  r"(?:T([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,7}))?)?(Z|[+-][0-9]{2}:[0-9]{2}))?\Z")

NOT_WELL_FORMED = "Signature fields not well formed."
# The response headers a service SAS sets on the blob reads it allows.
RESPONSE_HEADERS = {"rscc": "Cache-Control", "rscd": "Content-Disposition", "rsce": "Content-Encoding",
                    "rscl": "Content-Language", "rsct": "Content-Type"}


def authentication_failed(detail: str) -> LeaseholdError:
    return LeaseholdError("AuthenticationFailed", detail={"AuthenticationErrorDetail": detail})


@dataclass(frozen=True)
class Grant:
    """What a verified SAS allows: ``kind`` "account" (``services`` and
    ``resource_types``) or "service" (``resource`` "b" or "c"), and the
    permission letters, those of its stored access policy included."""

    account: str
    kind: str
    version: str
    permissions: frozenset
    services: str = ""
    resource_types: str = ""
    resource: str = ""
    identifier: str = ""
    signature: str = ""
    # A service SAS's response headers for Get Blob (rscc, rscd, rsce, rscl, rsct).
    headers: tuple = ()
    # A user delegation SAS: the delegating principal's role then (intersected with the permissions), and who.
    delegated: bool = False
    role: str | None = None
    delegator: str = ""

    @property
    def actor(self) -> str:
        """The history's actor: the stored access policy's identifier, or a
        fingerprint of the signature (the signature itself is a credential);
        a user delegation SAS's names its delegating principal too."""
        own = f"sas:{self.account}:{self.identifier or fingerprint(self.signature)}"
        return f"{own} for {self.delegator}"[:200] if self.delegated else own


def fingerprint(signature: str) -> str:
    return hashlib.sha256(signature.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Policy:
    """A container's stored access policy, as ``verify``'s lookup answers it."""

    start: datetime | None
    expiry: datetime | None
    permission: str


def is_sas(environ: dict) -> bool:
    query = environ.get("QUERY_STRING", "")
    return "sig=" in query and "sig" in _params(query)


def _params(query_string: str) -> dict[str, str]:
    """The query's parameters (the first of each name; never changed by a
    caller). A lease holder sends the same query with every renewal: parsed
    once (a longer query than a SAS needs is parsed, not kept)."""
    if len(query_string) > CACHED_QUERY_CHARS:
        return _params_of(query_string)
    return _params_cached(query_string)


CACHED_QUERY_CHARS = 1024


@functools.lru_cache(maxsize=1024)
def _params_cached(query_string: str) -> dict[str, str]:
    return _params_of(query_string)


def _params_of(query_string: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for name, value in parse_qsl(query_string, keep_blank_values=True):
        params.setdefault(name, value)
    return params


@functools.lru_cache(maxsize=1024)
def parse_time(value: str) -> datetime | None:
    if len(value) > 40:
        return None
    match = TIME.match(value)
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    if hour is not None and zone is None:
        return None
    minutes = 0 if zone in (None, "Z") else (int(zone[1:3]) * 60 + int(zone[4:6])) * (1 if zone[0] == "+" else -1)
    try:
        when = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0),
                        int((fraction or "0").ljust(6, "0")[:6]), tzinfo=timezone(timedelta(minutes=minutes)))
        # A far offset on year 1 or 9999 falls outside what a datetime holds in UTC (OverflowError).
        return when.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return None


def http_time(when: datetime | None) -> str:
    return when.strftime("%a, %d %b %Y %H:%M:%S GMT") if when else ""


# ------------------------------------------------------------------ verify

def verify(environ: dict, account: str, container: str | None, blob: str | None, *, keys, policy,
           delegated=None) -> Grant:
    """The grant of the request's SAS for ``account`` (the URL's), whose
    ``container``/``blob`` (decoded, as the SDKs sign them) the request
    names. ``keys(account)`` answers the account's keys (or None);
    ``policy(account, container, identifier)`` a stored ``Policy`` (or None);
    ``delegated(params, account, container, blob)`` a user delegation SAS's
    grant, start and expiry (None: refused).
    Raises 403 AuthenticationFailed (with Azure's detail),
    AuthorizationSourceIPMismatch or AuthorizationProtocolMismatch."""
    params = _params(environ.get("QUERY_STRING", ""))
    version, signature = params.get("sv", ""), params.get("sig", "")
    if not VERSION.match(version) or not signature:
        raise authentication_failed(NOT_WELL_FORMED)
    if any(name in params for name in USER_DELEGATION):
        if delegated is None:
            raise authentication_failed("User delegation SAS is not accepted here; sign with an account key.")
        grant, start, expiry = delegated(params, account, container, blob)
    elif "sr" in params:
        grant, text, start, expiry = _service(params, account, container, blob)
    elif "ss" in params or "srt" in params:
        grant, text, start, expiry = _account(params, account)
    else:
        raise authentication_failed(NOT_WELL_FORMED)
    if not grant.delegated:
        found = keys(account)
        if found is None or not any(hmac.compare_digest(sign(key, text), signature) for key in found[0]):
            raise authentication_failed(f"Signature did not match. String to sign used was {text}")
    if grant.identifier:  # only once signed: no one learns a policy's name without a key
        stored = policy(account, container, grant.identifier) if container else None
        grant, start, expiry = _with_policy(grant, params, start, expiry, stored)
    now = clock.now()
    if expiry is None:
        raise authentication_failed("Signed expiry time must be given by the signature or its stored access policy.")
    if (start is not None and now < start) or now >= expiry:
        raise authentication_failed(
            f"Signature not valid in the specified time frame: Start [{http_time(start)}] - "
            f"Expiry [{http_time(expiry)}] - Current [{http_time(now)}]")
    _check_address(params.get("sip", ""), environ.get("REMOTE_ADDR", ""))
    protocol = params.get("spr", "")
    if protocol == "https" and environ.get("wsgi.url_scheme", "http") != "https":
        raise LeaseholdError("AuthorizationProtocolMismatch")
    return grant


def validity(params: dict) -> tuple[datetime | None, datetime | None]:
    start = expiry = None
    if params.get("st"):
        start = parse_time(params["st"])
        if start is None:
            raise authentication_failed(NOT_WELL_FORMED)
    if params.get("se"):
        expiry = parse_time(params["se"])
        if expiry is None:
            raise authentication_failed(NOT_WELL_FORMED)
    return start, expiry


def check_fields(params: dict) -> None:
    if params.get("spr", "") not in ("", "https", "https,http"):
        raise authentication_failed(NOT_WELL_FORMED)
    if params.get("sip") and _address_range(params["sip"]) is None:
        raise authentication_failed(NOT_WELL_FORMED)


def _account(params: dict, account: str):
    version = params["sv"]
    if version < ACCOUNT_SAS_SINCE or not params.get("ss") or not params.get("srt") or not params.get("sp"):
        raise authentication_failed(NOT_WELL_FORMED)
    check_fields(params)
    start, expiry = validity(params)
    get = params.get
    fields = [account, get("sp", ""), get("ss", ""), get("srt", ""), get("st", ""), get("se", ""),
              get("sip", ""), get("spr", ""), version]
    if version >= "2020-12-06":
        fields.append(get("ses", ""))
    text = "\n".join(fields) + "\n"
    grant = Grant(account=account, kind="account", version=version, permissions=frozenset(get("sp", "")),
                  services=get("ss", ""), resource_types=get("srt", ""), signature=params["sig"])
    return grant, text, start, expiry


def _service(params: dict, account: str, container: str | None, blob: str | None):
    get = params.get
    version, resource = params["sv"], params["sr"]
    if version < SERVICE_SAS_SINCE or resource not in ("b", "c"):
        raise authentication_failed(NOT_WELL_FORMED)
    check_fields(params)
    start, expiry = validity(params)
    path = f"/{account}/{container}" + (f"/{blob}" if resource == "b" and blob is not None else "")
    if container is None or (resource == "b" and blob is None):
        path = f"/{account}"  # a SAS for one resource, used on another: its signature cannot match
    canonical = ("/blob" if version >= "2015-02-21" else "") + path
    identifier = get("si", "")
    fields = [get("sp", ""), get("st", ""), get("se", ""), canonical, identifier]
    if version >= "2015-04-05":
        fields += [get("sip", ""), get("spr", "")]
    fields.append(version)
    if version >= "2018-11-09":
        fields += [resource, ""]  # the signed snapshot time: no snapshot SAS (sr=bs) here
    if version >= "2020-12-06":
        fields.append(get("ses", ""))
    if version >= RESPONSE_HEADERS_SINCE:
        fields += [get("rscc", ""), get("rscd", ""), get("rsce", ""), get("rscl", ""), get("rsct", "")]
    text = "\n".join(fields)
    grant = Grant(account=account, kind="service", version=version, permissions=frozenset(get("sp", "")),
                  resource=resource, identifier=identifier, signature=params["sig"],
                  headers=signed_headers(params, version))
    return grant, text, start, expiry


def signed_headers(params: dict, version: str) -> tuple:
    """A service SAS's response headers, honoured only where signed: an older version's
    string-to-sign leaves them out, so anyone could add them."""
    return tuple((header, params[name]) for name, header in RESPONSE_HEADERS.items()
                 if params.get(name) and version >= RESPONSE_HEADERS_SINCE)


def _with_policy(grant: Grant, params: dict, start, expiry, stored: Policy | None):
    """The grant, start and expiry with the stored access policy's fields."""
    if stored is None:
        raise authentication_failed(f"The signed identifier '{grant.identifier[:64]}' names no stored access "
                                    f"policy of this container (removed, or never set).")
    # A field comes from the SAS or from the policy, never from both.
    if (stored.start and params.get("st")) or (stored.expiry and params.get("se")) or \
            (stored.permission and params.get("sp")):
        raise authentication_failed(NOT_WELL_FORMED)
    permissions = grant.permissions or frozenset(stored.permission)
    return replace(grant, permissions=permissions), start or stored.start, expiry or stored.expiry


def _address_range(value: str):
    low, _, high = value.partition("-")
    try:
        first = ipaddress.IPv4Address(low)
        last = ipaddress.IPv4Address(high) if high else first
    except ValueError:
        return None
    return (first, last) if first <= last else None


def _check_address(sip: str, remote: str) -> None:
    if not sip:
        return
    first, last = _address_range(sip)  # checked well formed before the signature
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        address = None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if not isinstance(address, ipaddress.IPv4Address) or not first <= address <= last:
        raise LeaseholdError("AuthorizationSourceIPMismatch",
                             message=f"This request is not authorized to perform this operation using this "
                                     f"source IP {remote[:64]}.")


# ------------------------------------------------------------------ authorize

@dataclass(frozen=True)
class Need:
    """What an operation needs of a SAS: an account SAS's resource type
    (s, c, o) and one of ``account`` permissions; a service SAS, one of
    ``blob`` permissions (sr=b or sr=c) or, for container-level operations,
    one of ``container`` (sr=c only; "" where a service SAS cannot)."""

    resource_type: str
    account: str
    blob: str = ""
    container: str = ""


# Per operation, as Azure's "Create an account SAS" and "Create a service SAS"
# tables give them. Stored access policies (Get/Set Container ACL) are the
# account owner's alone: no SAS can read or change them.
NEEDS = {
    "list_containers": Need("s", "l"),
    "account_info": Need("sco", "racwdlxytfiup"),
    "service_properties": Need("s", "r"),
    "create_container": Need("c", "cw"),
    "delete_container": Need("c", "d"),
    "container_properties": Need("c", "r"),
    "set_container_metadata": Need("c", "w"),
    "container_acl": Need("c", ""),
    "lease_container": Need("c", "w"),
    "break_container": Need("c", "w"),
    "list_blobs": Need("c", "l", container="l"),
    "put_blob": Need("o", "cw", blob="cw"),
    "get_blob": Need("o", "r", blob="r"),
    "set_blob_metadata": Need("o", "w", blob="w"),
    "delete_blob": Need("o", "d", blob="d"),
    "snapshot_blob": Need("o", "cw", blob="cw"),
    "lease_blob": Need("o", "w", blob="w"),
    "break_blob": Need("o", "w", blob="w"),
    "put_block": Need("o", "w", blob="w"),
    "put_block_list": Need("o", "w", blob="w"),
    "get_block_list": Need("o", "r", blob="r"),
    "append_block": Need("o", "aw", blob="aw"),
    "abort_copy": Need("o", "w", blob="w"),
    "user_delegation_key": Need("s", ""),  # a bearer token's alone
}


def need(operation: str, *, version: str) -> Need:
    found = NEEDS[operation]
    if operation.startswith("break_") and version >= DELETE_BREAKS_SINCE:
        return Need(found.resource_type, found.account + "d", found.blob + "d" if found.blob else "",
                    found.container)
    return found


def authorize(grant: Grant, operation: str) -> frozenset:
    """Refuse (403) an operation ``grant`` does not allow: one its kind of
    SAS can never perform (Get/Set Container ACL; a container's own
    operations under a service SAS) AuthorizationFailure, else one its
    permissions do not cover AuthorizationPermissionMismatch. Answer the
    letters that allowed it (a Put Blob allowed by Create alone may only
    create)."""
    wanted = need(operation, version=grant.version)
    if grant.kind == "account":
        if "b" not in grant.services:
            raise LeaseholdError("AuthorizationServiceMismatch")
        if not set(wanted.resource_type) & set(grant.resource_types):
            raise LeaseholdError("AuthorizationResourceTypeMismatch")
        letters = wanted.account
    else:
        letters = wanted.blob if wanted.resource_type == "o" else wanted.container if grant.resource == "c" else ""
    if not letters:  # an operation this kind of SAS can never perform (Azure's "SAS Error Codes")
        raise LeaseholdError("AuthorizationFailure")
    allowed = grant.permissions & frozenset(letters)
    if not allowed or (grant.delegated and not roles.allows(grant.role, operation)):
        raise LeaseholdError("AuthorizationPermissionMismatch")  # a user delegation SAS: its principal's role too
    return allowed
