"""Single sign-on for the admin (LEASEHOLD_ADMIN_SSO_*): the OpenID Connect provider and client the
admin signs people in with, the rules that map their ID token's claims to the admin's Django groups
(or to superuser), and whether local passwords still sign in (docs/guide/identity.md). Read and checked
once at start with the other settings (leases/conf/__init__.py); None when no provider is set."""

from __future__ import annotations

import re
from dataclasses import dataclass

from leases.conf.env import SettingError
from leases.conf.oidc import issuer_url

PASSWORDS = ("on", "superusers", "off")  # local passwords: everyone's, superusers' alone, nobody's
SUPERUSER = "superuser"  # a rule's target that makes the user a superuser rather than a group's member
RULE = re.compile(r"(?P<claim>[A-Za-z0-9_.-]+):(?P<value>[^=\s]+)=(?P<target>[^\s,]+)\Z")


@dataclass(frozen=True, slots=True)
class GroupRule:
    """A user whose ID token's ``claim`` holds ``value`` is in the Django group ``target`` (or a superuser)."""

    claim: str
    value: str
    target: str


@dataclass(frozen=True, slots=True)
class AdminSso:
    issuer: str
    client_id: str
    client_secret: str
    name: str  # "Sign in with <name>"
    rules: tuple[GroupRule, ...]
    scopes: str


def rules(text: str) -> tuple[GroupRule, ...]:
    found = []
    for part in text.replace(",", " ").split():
        match = RULE.match(part)
        if match is None:
            raise SettingError("LEASEHOLD_ADMIN_SSO_GROUPS must be space- or comma-separated CLAIM:VALUE=GROUP rules "
                               "(GROUP a Django group's name, '+' for a space, or 'superuser'), e.g. "
                               f"groups:ops-admins=operators, not {part!r}")
        found.append(GroupRule(match["claim"], match["value"], match["target"].replace("+", " ")))
    return tuple(found)


def admin_sso(issuer: str, client_id: str, client_secret: str, name: str, group_rules: str, scopes: str,
              passwords: str) -> AdminSso | None:
    found = rules(group_rules)
    if not issuer:
        if passwords != "on":
            raise SettingError("LEASEHOLD_ADMIN_PASSWORDS may only limit local passwords when single sign-on is "
                               "configured (LEASEHOLD_ADMIN_SSO_ISSUER): nobody could sign in")
        return None
    if not client_id or not client_secret:
        raise SettingError("LEASEHOLD_ADMIN_SSO_ISSUER needs LEASEHOLD_ADMIN_SSO_CLIENT_ID and "
                           "LEASEHOLD_ADMIN_SSO_CLIENT_SECRET (the admin's client at the provider)")
    if not found:
        raise SettingError("LEASEHOLD_ADMIN_SSO_GROUPS must name at least one rule: with none, nobody who signs "
                           "in may do anything")
    try:
        issuer = issuer_url(issuer)
    except SettingError as exc:
        raise SettingError(str(exc).replace("LEASEHOLD_OIDC_ISSUER", "LEASEHOLD_ADMIN_SSO_ISSUER")) from None
    return AdminSso(issuer=issuer, client_id=client_id, client_secret=client_secret, name=name,
                    rules=found, scopes=scopes)
