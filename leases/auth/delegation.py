"""User delegation keys and the SAS signed with them. ``issue`` answers Get User Delegation Key for a
bearer principal: a row (who asked, the roles they held then on the account and on each container a
rule names) and the key's value, derived from the server's secret key and the row, never stored.
``verify`` checks a user delegation SAS (``skoid``, ``sktid``, ``skt``, ``ske``, ``sks``, ``skv``):
the string to sign of its signed version, as azure-storage-blob's ``_shared_access_signature.py``
builds it, signed with a key issued for those fields, not revoked, valid now; its grant carries the
principal's role, which ``sas.authorize`` intersects with the SAS's permissions. ``revoke`` is Azure's
Revoke User Delegation Keys: every key of the account stops working."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from django.conf import settings

from leases.auth import roles, sas
from leases.domain import clock
from leases.domain.errors import LeaseholdError

SINCE = "2018-11-09"  # Get User Delegation Key and its SAS: from this x-ms-version on
AGENT_SINCE = "2020-02-10"  # saoid, suoid, scid in the string to sign
DELEGATED_USER_SINCE = "2025-07-05"  # skdutid, sduoid
REQUEST_BINDING_SINCE = "2026-04-06"  # the signed request headers and query lines (srh, srq)
MAX_DAYS = 7  # a key's expiry at most this far ahead of now
CANDIDATES = 16  # keys tried for one SAS's fields (the same fields asked for again)
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # as the SDKs put skt/ske into a SAS


@dataclass(frozen=True)
class Candidate:
    """A key issued for a SAS's fields: its value, the roles held at issue, who asked, revoked or not."""

    value: str
    roles: dict
    actor: str
    revoked: bool


def tenant_of(principal) -> str:
    """SignedTid: the token's ``tid`` (Entra ID's tenant), else the issuer's fingerprint."""
    tid = principal.claims.get("tid")
    return tid if isinstance(tid, str) and tid else hashlib.sha256(principal.issuer.encode()).hexdigest()[:12]


def _value(salt: str, account: str, oid: str, tid: str, start: datetime, expiry: datetime, version: str) -> str:
    text = "\n".join(("leasehold user delegation key", salt, account, oid, tid, start.strftime(TIME_FORMAT),
                      expiry.strftime(TIME_FORMAT), version))
    return base64.b64encode(hmac.digest(settings.SECRET_KEY.encode(), text.encode(), "sha256")).decode()


def roles_held(principal, account: str) -> dict:
    """The principal's role on the account ("*") and on each container of it that a rule names."""
    rules = settings.LEASEHOLD_OIDC.rules
    held = {"*": roles.role_for(principal.claims, rules, account, None)}
    for rule in rules:
        if rule.container is not None and rule.account in ("*", account):
            held[rule.container] = roles.role_for(principal.claims, rules, account, rule.container)
    return held


def issue(principal, account_name: str, start: datetime, expiry: datetime, version: str):
    """A new key for ``principal`` on the account: (its row, the key's value); 404 if no such account."""
    from leases.models import Account, UserDelegationKey

    account = Account.objects.filter(name=account_name).first()
    if account is None:
        raise LeaseholdError("ResourceNotFound")
    row = UserDelegationKey.objects.create(
        account=account, issuer=principal.issuer, signed_oid=principal.subject[:160], signed_tid=tenant_of(principal),
        actor=principal.actor, start=start, expiry=expiry, version=version, roles=roles_held(principal, account.name),
        salt=secrets.token_hex(16), issued_at=clock.now())
    return row, _value(row.salt, account.name, row.signed_oid, row.signed_tid, start, expiry, version)


def stored(account: str, oid: str, tid: str, start: datetime, expiry: datetime, version: str) -> list[Candidate]:
    """The keys issued for these fields, newest first."""
    from leases.models import UserDelegationKey

    rows = UserDelegationKey.objects.filter(account__name=account, signed_oid=oid, signed_tid=tid, start=start,
                                            expiry=expiry, version=version).order_by("-id")[:CANDIDATES]
    return [Candidate(_value(row.salt, account, oid, tid, start, expiry, version), row.roles, row.actor,
                      row.revoked_at is not None) for row in rows]


def revoke(account: str) -> int:
    """Revoke every key of ``account`` not yet revoked; how many."""
    from leases.models import UserDelegationKey

    return UserDelegationKey.objects.filter(account__name=account, revoked_at__isnull=True).update(
        revoked_at=clock.now())


def string_to_sign(params: dict, canonical: str) -> str:
    get = params.get
    version = params["sv"]
    fields = [get("sp", ""), get("st", ""), get("se", ""), canonical, get("skoid", ""), get("sktid", ""),
              get("skt", ""), get("ske", ""), get("sks", ""), get("skv", "")]
    if version >= AGENT_SINCE:
        fields += [get("saoid", ""), get("suoid", ""), get("scid", "")]
    if version >= DELEGATED_USER_SINCE:
        fields += [get("skdutid", ""), get("sduoid", "")]
    fields += [get("sip", ""), get("spr", ""), version, params["sr"], ""]  # "": no snapshot SAS here
    if version >= "2020-12-06":
        fields.append(get("ses", ""))
    if version >= REQUEST_BINDING_SINCE:
        fields += ["", ""]  # srh and srq, refused when present
    fields += [get("rscc", ""), get("rscd", ""), get("rsce", ""), get("rscl", ""), get("rsct", "")]
    return "\n".join(fields)


def verify(params: dict, account: str, container: str | None, blob: str | None, *, lookup=stored):
    """A user delegation SAS's grant, start and expiry (sas.verify checks them and the rest), or
    Azure's 403 AuthenticationFailed. ``lookup`` answers the Candidates for its key's fields."""
    get = params.get
    version, resource = get("sv", ""), get("sr", "")
    if version < SINCE or resource not in ("b", "c") or "si" in params or "ss" in params or "srt" in params:
        raise sas.authentication_failed(sas.NOT_WELL_FORMED)
    if any(get(name) for name in ("srh", "srq", "sduoid", "skdutid")):
        raise sas.authentication_failed("Signed request headers and query parameters, and delegated users "
                                        "(srh, srq, sduoid, skdutid), are not supported by this server.")
    key_start, key_expiry = sas.parse_time(get("skt", "")), sas.parse_time(get("ske", ""))
    if key_start is None or key_expiry is None or get("sks") != "b" or not get("skoid") or not sas.VERSION.match(
            get("skv", "")):
        raise sas.authentication_failed(sas.NOT_WELL_FORMED)
    sas.check_fields(params)
    start, expiry = sas.validity(params)
    path = f"/{account}/{container}" + (f"/{blob}" if resource == "b" and blob is not None else "")
    if container is None or (resource == "b" and blob is None):
        path = f"/{account}"  # a SAS for one resource, used on another: its signature cannot match
    text = string_to_sign(params, "/blob" + path)
    found = next((c for c in lookup(account, get("skoid"), get("sktid", ""), key_start, key_expiry, get("skv"))
                  if hmac.compare_digest(sas.sign(c.value, text), get("sig", ""))), None)
    if found is None:
        raise sas.authentication_failed(f"Signature did not match. String to sign used was {text}")
    if found.revoked:
        raise sas.authentication_failed("The user delegation key was revoked (Revoke User Delegation Keys).")
    now = clock.now()
    if not key_start <= now < key_expiry:
        raise sas.authentication_failed(
            f"The user delegation key is not valid at this time: Start [{sas.http_time(key_start)}] - "
            f"Expiry [{sas.http_time(key_expiry)}] - Current [{sas.http_time(now)}]")
    role = found.roles.get(container or "*", found.roles.get("*")) if container else found.roles.get("*")
    grant = sas.Grant(account=account, kind="service", version=version, permissions=frozenset(get("sp", "")),
                      resource=resource, signature=get("sig", ""), delegated=True, role=role, delegator=found.actor,
                      headers=sas.signed_headers(params, version))
    return grant, start, expiry


def key_window(start_text: str | None, expiry_text: str | None) -> tuple[datetime, datetime]:
    """Get User Delegation Key's Start and Expiry, to the second, or Azure's 400 InvalidXmlNodeValue."""
    now = clock.now().replace(microsecond=0)

    def parsed(name: str, text: str | None) -> datetime:
        when = sas.parse_time((text or "").strip())
        if when is None:
            raise node_error(name, text or "")
        return when.replace(microsecond=0).astimezone(timezone.utc)

    start = parsed("Start", start_text) if (start_text or "").strip() else now
    expiry = parsed("Expiry", expiry_text)
    # A time out of bounds: Azure names the node by its value (XmlNodeName = XmlNodeValue).
    if expiry <= now or expiry <= start or expiry > now + timedelta(days=MAX_DAYS):
        raise node_error((expiry_text or "").strip(), expiry_text or "")
    if start > now + timedelta(days=MAX_DAYS):
        raise node_error((start_text or "").strip(), start_text or "")
    return start, expiry


def node_error(name: str, value: str) -> LeaseholdError:
    err = LeaseholdError("InvalidXmlNodeValue", message="The value for one of the XML nodes is not in the correct "
                                                        "format.", detail={"XmlNodeName": name[:64],
                                                                            "XmlNodeValue": value.strip()[:64]})
    err.status = 400
    return err
