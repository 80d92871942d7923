"""OAuth 2.0 bearer tokens (JWT access tokens) from the OpenID Connect issuer the operator names
(LEASEHOLD_OIDC_*, leases/conf/oidc.py), for both doors: ``verify`` checks a token's signature
(RS256/ES256, by a key of the issuer's JWKS), issuer, audience, expiry and not-before, with a little
leeway, and answers its ``Principal``, or raises ``Refused`` with a reason (the metrics' label) and
Azure's AuthenticationErrorDetail. The issuer's keys come from its discovery document and JWKS,
fetched when a token names a key id not seen yet, at most LEASEHOLD_OIDC_JWKS_REFETCH times a period
(a flood of made-up key ids costs no more fetches); a token verified once is remembered a minute
(bounded), so the admission check and the door verify it once. Library choice: decision 0042."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.conf import settings

from leases.domain.errors import MESSAGES, LeaseholdError

if TYPE_CHECKING:  # PyJWT is imported where a token is verified: only with an issuer configured
    import jwt

ALGORITHMS = ("RS256", "ES256")
AZURE_SINCE = "2017-11-09"  # the Azure door takes bearer tokens from this x-ms-version on
FETCH_TIMEOUT = 5.0  # seconds, for the discovery document and the JWKS each
FETCH_MAX_BYTES = 1 << 20
KEYS_MAX = 64  # keys taken from one JWKS
REMEMBER_SECONDS = 60.0
REMEMBER_MAX = 10_000
NAME_CLAIMS = ("name", "preferred_username", "app_displayname", "upn", "email", "azp", "appid")


class Refused(Exception):
    """A bearer token that does not hold: ``reason`` (short, the metrics' label), ``detail`` (what
    Azure's AuthenticationErrorDetail says)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class NeedsFetch(Exception):
    """The token names a key not in memory, and the caller may not fetch (on the event loop)."""


@dataclass(frozen=True)
class Principal:
    """Who a verified token speaks for: issuer, subject (Entra ID's object id ``oid`` if present,
    else ``sub``), a display name, and the claims the role rules read."""

    issuer: str
    subject: str
    name: str
    claims: dict = field(repr=False, compare=False)

    @property
    def key(self) -> str:
        """The principal by which the lease lane is shared, and the history's actor without its name."""
        return f"bearer:{fingerprint(self.issuer)}:{self.subject}"[:160]

    @property
    def actor(self) -> str:
        return f"{self.key} ({self.name})"[:200] if self.name else self.key


def fingerprint(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def looks_like_jwt(value: str) -> bool:
    return value.count(".") == 2 and value.startswith("eyJ")


def token_of(environ: dict) -> str | None:
    """The JWT of an ``Authorization: Bearer`` header, or None (another scheme, or the JSON API's
    own tokens, which are no JWTs)."""
    scheme, _, value = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
    value = value.strip()
    return value if scheme.lower() == "bearer" and looks_like_jwt(value) else None


def _fetch_json(url: str) -> dict:
    request = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "leasehold"})
    with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT) as answer:  # noqa: S310 (the operator's URL)
        data = answer.read(FETCH_MAX_BYTES + 1)
    if len(data) > FETCH_MAX_BYTES:
        raise ValueError(f"{url}: over {FETCH_MAX_BYTES} bytes")
    found = json.loads(data)
    if not isinstance(found, dict):
        raise ValueError(f"{url}: not a JSON object")
    return found


class KeySet:
    """One issuer's signing keys, by key id, fetched when an unknown id is asked for, within a
    token bucket (``rate`` per second, ``burst``)."""

    def __init__(self, issuer: str, rate: float, burst: float):
        self.issuer, self.rate, self.burst = issuer, rate, burst
        self.lock = threading.Lock()
        self.keys: dict[str, jwt.PyJWK] = {}
        self.allowance, self.at = burst, time.monotonic()
        self.fetches = 0
        self.discovery: dict = {}

    def _take(self) -> bool:
        now = time.monotonic()
        self.allowance = min(self.burst, self.allowance + (now - self.at) * self.rate)
        self.at = now
        if self.allowance < 1:
            return False
        self.allowance -= 1
        return True

    def key(self, kid: str, *, may_fetch: bool) -> jwt.PyJWK:
        found = self.keys.get(kid)
        if found is not None:
            return found
        if not may_fetch:
            raise NeedsFetch
        with self.lock:
            found = self.keys.get(kid)
            if found is None and self._take():
                self._fetch()
                found = self.keys.get(kid)
        if found is None:
            raise Refused("unknown_key", "Signature validation failed. The signing key was not found.")
        return found

    def _fetch(self) -> None:
        self.fetches += 1
        try:
            if not self.discovery:
                discovery = _fetch_json(self.issuer.rstrip("/") + "/.well-known/openid-configuration")
                if discovery.get("issuer") != self.issuer or not isinstance(discovery.get("jwks_uri"), str):
                    raise ValueError("the discovery document names another issuer or no jwks_uri")
                self.discovery = discovery
            found = _fetch_json(self.discovery["jwks_uri"])
        except (OSError, ValueError) as exc:
            raise Refused("keys_unavailable", f"The issuer's signing keys could not be fetched: "
                                              f"{type(exc).__name__}.") from None
        import jwt

        keys: dict[str, jwt.PyJWK] = {}
        for entry in (found.get("keys") or [])[:KEYS_MAX]:
            if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str) or entry.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(entry)
            except jwt.PyJWTError:
                continue  # a key of a type or algorithm not accepted here
            if key.algorithm_name in ALGORITHMS:
                keys[entry["kid"]] = key
        self.keys = keys  # a key the issuer no longer publishes is gone (rotation)

    @property
    def authorization_uri(self) -> str:
        return self.discovery.get("authorization_endpoint") or self.issuer


_sets: dict[tuple, KeySet] = {}
_remembered: dict[str, tuple[float, str, Principal]] = {}  # token digest: (until, kid, principal)


def key_set(config) -> KeySet:
    ident = (config.issuer, config.refetch)
    found = _sets.get(ident)
    if found is None:
        _sets.clear()
        _remembered.clear()
        found = _sets[ident] = KeySet(config.issuer, *config.refetch)
    return found


def challenge() -> str:
    """The WWW-Authenticate of a refused bearer token, as Azure Storage sends it (the SDKs read
    ``resource_id`` to ask for a new token)."""
    config = settings.LEASEHOLD_OIDC
    if config is None:
        return "Bearer"
    keys = key_set(config)
    return f"Bearer authorization_uri={keys.authorization_uri} resource_id={config.audiences[0].rstrip('/')}"


def verify(token: str, *, may_fetch: bool = True) -> Principal:
    config = settings.LEASEHOLD_OIDC
    if config is None:
        raise Refused("not_configured", "Bearer tokens are not accepted: no issuer is configured.")
    import jwt

    keys = key_set(config)
    digest = hashlib.sha256(token.encode()).hexdigest()
    now = time.time()
    remembered = _remembered.get(digest)
    if remembered is not None and now < remembered[0] and remembered[1] in keys.keys:
        return remembered[2]
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise Refused("malformed", "The token is not a well-formed JWT.") from None
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALGORITHMS or not isinstance(kid, str):
        raise Refused("malformed", f"The token's algorithm must be one of {', '.join(ALGORITHMS)}, with a key id.")
    if kid not in keys.keys:  # another issuer's token fetches nothing
        try:
            issuer = jwt.decode(token, options={"verify_signature": False}).get("iss")
        except jwt.PyJWTError:
            raise Refused("malformed", "The token is not a well-formed JWT.") from None
        if issuer != config.issuer:
            raise Refused("issuer", "Issuer validation failed. Issuer did not match.")
    key = keys.key(kid, may_fetch=may_fetch)
    if key.algorithm_name != alg:
        raise Refused("signature", "Signature validation failed. Signature is invalid.")
    try:
        claims = jwt.decode(token, key.key, algorithms=[alg], audience=list(config.audiences), issuer=config.issuer,
                            leeway=config.leeway, options={"require": ["exp", "iss", "aud"]})
    except jwt.ExpiredSignatureError:
        raise Refused("expired", "Lifetime validation failed. The token is expired.") from None
    except jwt.ImmatureSignatureError:
        raise Refused("not_yet_valid", "Lifetime validation failed. The token is not yet valid.") from None
    except jwt.InvalidAudienceError:
        raise Refused("audience", "Audience validation failed. Audience did not match.") from None
    except jwt.InvalidIssuerError:
        raise Refused("issuer", "Issuer validation failed. Issuer did not match.") from None
    except jwt.InvalidSignatureError:
        raise Refused("signature", "Signature validation failed. Signature is invalid.") from None
    except jwt.PyJWTError as exc:
        raise Refused("malformed", f"The token's claims are not well formed: {type(exc).__name__}.") from None
    subject = claims.get("oid") or claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise Refused("malformed", "The token names no subject (oid or sub).")
    name = next((claims[c] for c in NAME_CLAIMS if isinstance(claims.get(c), str) and claims[c]), "")
    principal = Principal(config.issuer, subject, name.replace("\n", " ")[:80], claims)
    if len(_remembered) >= REMEMBER_MAX:
        _remembered.clear()
    _remembered[digest] = (min(now + REMEMBER_SECONDS, float(claims["exp"])), kid, principal)
    return principal


def azure_error(refused: Refused) -> LeaseholdError:
    """Azure's answer to a bearer token that does not hold: 401 InvalidAuthenticationInfo, the
    reason in AuthenticationErrorDetail and the challenge in WWW-Authenticate."""
    err = LeaseholdError("InvalidAuthenticationInfo", message=MESSAGES["NoAuthenticationInformation"], detail={
        "AuthenticationErrorDetail": refused.detail, "www_authenticate": challenge(), "reason": refused.reason})
    err.status = 401
    return err


def azure_principal(environ: dict, *, may_fetch: bool = True) -> Principal | None:
    """The Azure door's bearer token: its principal, None if the request carries none, or Azure's
    refusal (detail["reason"] for the metrics); NeedsFetch if keys must be fetched and may not."""
    scheme, _, value = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    if environ.get("HTTP_X_MS_VERSION", "") < AZURE_SINCE:
        raise LeaseholdError("AuthenticationFailed", detail={
            "AuthenticationErrorDetail": "Authentication scheme Bearer is not supported in this version.",
            "reason": "old_version"})
    try:
        if not looks_like_jwt(value.strip()):
            raise Refused("malformed", "The token is not a well-formed JWT.")
        return verify(value.strip(), may_fetch=may_fetch)
    except Refused as refused:
        raise azure_error(refused) from None
