"""The OpenID Connect issuer whose bearer tokens both doors accept (LEASEHOLD_OIDC_*), and the rules
that map a token's claims to a data role per account or container (docs/guide/identity.md). Read
and checked once at start with the other settings (leases/conf/__init__.py); None when no issuer is set."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from leases.conf.env import SettingError

ROLES = ("reader", "contributor", "owner")  # Storage Blob Data Reader / Contributor / Owner
DEFAULT_AUDIENCE = "https://storage.azure.com,https://storage.azure.com/"
RULE = re.compile(r"(?P<claim>[A-Za-z0-9_.-]+):(?P<value>[^=\s]+)=(?P<role>[a-z]+)"
                  r"(?:@(?P<account>\*|[a-z0-9]+)(?:/(?P<container>[a-z0-9$-]+))?)?\Z")
PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True, slots=True)
class RoleRule:
    """A principal whose ``claim`` holds ``value`` has ``role`` on ``account`` ("*": every account),
    or on one ``container`` of it."""

    claim: str
    value: str
    role: str
    account: str = "*"
    container: str | None = None


@dataclass(frozen=True, slots=True)
class Oidc:
    issuer: str
    audiences: tuple[str, ...]
    rules: tuple[RoleRule, ...]
    leeway: int  # seconds of clock difference allowed on exp and nbf
    refetch: tuple[float, float]  # JWKS fetches for unknown key ids: per second, burst


def issuer_url(text: str) -> str:
    url = urlsplit(text)
    loopback = False
    try:
        loopback = ipaddress.ip_address((url.hostname or "").strip("[]")).is_loopback
    except ValueError:
        loopback = url.hostname == "localhost"
    if url.scheme != "https" and not (url.scheme == "http" and loopback) or not url.hostname or url.query:
        raise SettingError("LEASEHOLD_OIDC_ISSUER must be the issuer's https URL as its tokens name it (iss), e.g. "
                           f"https://login.microsoftonline.com/TENANT/v2.0 (http only on loopback), not {text!r}")
    return text  # exactly as the tokens' iss: Entra ID's v1 issuer ends in "/", its v2 one does not


def rules(text: str) -> tuple[RoleRule, ...]:
    found = []
    for part in text.replace(",", " ").split():
        match = RULE.match(part)
        if match is None or match["role"] not in ROLES:
            raise SettingError("LEASEHOLD_OIDC_ROLES must be space- or comma-separated CLAIM:VALUE=ROLE[@ACCOUNT"
                               "[/CONTAINER]] rules, ROLE one of reader, contributor, owner, e.g. "
                               f"roles:Leases.Write=contributor@devstoreaccount1, not {part!r}")
        found.append(RoleRule(match["claim"], match["value"], match["role"], match["account"] or "*",
                              match["container"]))
    return tuple(found)
