"""Who is calling, known before a lease request queues: the server asks ``identify(environ)`` (on the
event loop from memory, ``may_read`` false; in a thread when a read is needed) as soon as a lease request is received whole (serving/admission.py), so that a request
whose credentials fail, or that has none, is answered there and never reaches the lease lane or the
writer, and one that passes carries its principal (``account:<name>``, ``token:<name>``,
``user:<name>``), by which the lease lane is shared (serving/lanes.py). Each kind of credential is
one check in ``CHECKS`` (another plugs in with ``register``); the doors still authenticate the
request themselves. docs/development/architecture.md ("Credentials before the lease lane") tells how
checks answer and what is remembered."""

from __future__ import annotations

import time
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie

from django.conf import settings
from django.core.handlers.wsgi import get_path_info

from leases.auth import bearer, delegation, sas, sharedkey
from leases.domain.errors import LeaseholdError
from leases.models.tokens import ApiToken, digest

VERIFIED = sharedkey.VERIFIED  # environ: the account whose SharedKey the server verified
AUTH_CODES = frozenset({"AuthenticationFailed", "NoAuthenticationInformation", "InvalidAuthenticationInfo"})
REMEMBER_SECONDS = 1.0  # a valid token or session is looked up again after this long
KNOWN_SECONDS = 600.0  # a credential once valid is looked up whatever the address's allowance
KNOWN_MAX = 10_000  # bound on the credentials remembered as once valid


class Refused(Exception):
    """Credentials that fail (or none): the door's status and error code.
    ``throttled``: not checked at all (the address's allowance is used up)."""

    def __init__(self, status: int, code: str, reason: str = "", *, throttled: bool = False,
                 error: LeaseholdError | None = None, bearer: str = ""):
        super().__init__(code)
        self.status, self.code, self.reason, self.throttled, self.error = status, code, reason, throttled, error
        self.bearer = bearer  # a refused bearer token's reason (the metrics' label)


class Throttled(Exception):
    """A lookup the server forbade (``may_look_up`` false)."""


class Unreadable(Exception):
    """A lookup needed where the caller reads nothing (``may_read`` false:
    on the event loop, or the database failed a moment ago)."""


class _Memory:
    """Valid credentials remembered: ``fresh`` ones need no lookup for
    REMEMBER_SECONDS; ``known`` ones (once valid) may always be looked up."""

    def __init__(self):
        self.fresh: dict[str, tuple[float, str]] = {}
        self.known: dict[str, float] = {}

    def get(self, key: str, now: float) -> str | None:
        entry = self.fresh.get(key)
        return entry[1] if entry is not None and now - entry[0] < REMEMBER_SECONDS else None

    def put(self, key: str, principal: str, now: float) -> None:
        if len(self.fresh) >= KNOWN_MAX:
            self.fresh.clear()
        self.fresh[key] = (now, principal)
        if len(self.known) >= KNOWN_MAX:
            self.known.clear()
        self.known[key] = now

    def may_look_up(self, key: str, now: float, allowed: Callable[[], bool]) -> bool:
        seen = self.known.get(key)
        return (seen is not None and now - seen < KNOWN_SECONDS) or allowed()


_tokens = _Memory()
_sessions = _Memory()
_accounts = _Memory()


class Request:
    """What a check reads: the environ, the door, and whether it may look up
    a credential never seen valid."""

    __slots__ = ("environ", "door", "may_look_up", "may_read", "now")

    def __init__(self, environ: dict, door: str, may_look_up: Callable[[], bool], may_read: bool = True):
        self.environ, self.door, self.may_look_up, self.now = environ, door, may_look_up, time.monotonic()
        self.may_read = may_read

    def reading(self, memory: _Memory, key: str) -> None:
        """Before a database read for credential ``key``: allowed (Throttled
        first: a flood is refused where it is checked, with no read), and
        may this check read (else Unreadable)?"""
        if not memory.may_look_up(key, self.now, self.may_look_up):
            raise Throttled
        if not self.may_read:
            raise Unreadable


def _with_keys(request: Request, check: Callable[[Callable], object]):
    """``check(keys)`` (``keys``: an account's name -> its keys or None),
    first with the keys last read in this process, a pre-filter; refused
    with them (they may have changed since), checked again with the keys
    read now, so that a new key is accepted at once. Whatever this accepts
    the door checks again with the keys read now."""
    remembered: list[str] = []

    def known(name: str):
        found = sharedkey.known_account_keys(name)
        if found is None:
            return read(name)
        remembered.append(name)
        return found

    def read(name: str):
        request.reading(_accounts, name)
        return sharedkey.account_keys(name)

    def read_again(name: str):  # charged to the address's bucket: a bad signature for a known account too
        if not request.may_look_up():
            raise Throttled
        if not request.may_read:
            raise Unreadable
        return sharedkey.account_keys(name)

    try:
        return check(known)
    except LeaseholdError as err:
        if not remembered or err.code not in AUTH_CODES:
            raise
    return check(read_again)


def check_shared_key(request: Request) -> str | None:
    environ = request.environ
    header = environ.get("HTTP_AUTHORIZATION", "")
    if request.door == "api" and not header.startswith("SharedKey "):
        return None

    try:
        found = _with_keys(request, lambda keys: sharedkey.signing_key(environ, get_path_info(environ), keys))
    except LeaseholdError as err:
        if err.code not in AUTH_CODES:  # signed, but refused for something else (the door says what)
            name = sharedkey.AUTH_RE.match(header.strip())
            return f"account:{name.group(1)}" if name else None
        if request.door == "azure":
            raise Refused(err.status, err.code, error=err) from None
        # The JSON API's SharedKey refusal (leases/api/authentication.py): 401, the detail as its reason.
        raise Refused(401, "AuthenticationFailed", err.detail.get("AuthenticationErrorDetail", err.message)) from None
    if found is None:  # no Authorization header: the Azure door has nothing else
        if request.door == "azure":
            raise Refused(401, "NoAuthenticationInformation", error=LeaseholdError("NoAuthenticationInformation"))
        return None
    name = found[0]
    _accounts.put(name, f"account:{name}", request.now)
    environ[VERIFIED] = found  # the door reads the keys again and checks this one is still among them
    return f"account:{name}"


def check_sas(request: Request) -> str | None:
    """The Azure door's shared access signature (a query signed with an
    account key, no Authorization header): its principal is the signing
    account (``account:<name>``, as its SharedKey's), so that an account's
    many SASes share one account's waiters and turns (decision 0031); the
    history still names the SAS (the door's actor). What it permits is the
    door's to check; here only that it holds."""
    environ = request.environ
    if request.door != "azure" or environ.get("HTTP_AUTHORIZATION") or not sas.is_sas(environ):
        return None
    _, account, container, blob = (get_path_info(environ).split("/", 3) + [None, None, None])[:4]

    def policy(name: str, in_container: str, identifier: str):
        if not request.may_read:
            raise Unreadable
        from leases.services.access_policies import stored_policy  # services import the models: not at start

        found = stored_policy(name, in_container, identifier)
        return None if found is None else sas.Policy(found.start, found.expiry, found.permission)

    def delegated_keys(*fields):  # user delegation keys: read each time (a revocation holds at once)
        if not request.may_read:
            raise Unreadable
        return delegation.stored(*fields)

    def delegated(params, *where):
        return delegation.verify(params, *where, lookup=delegated_keys)

    try:
        grant = _with_keys(request, lambda keys: sas.verify(environ, account or "", container or None, blob,
                                                             keys=keys, policy=policy, delegated=delegated))
    except LeaseholdError as err:
        raise Refused(err.status, err.code, error=err) from None
    _accounts.put(grant.account, f"account:{grant.account}", request.now)
    return f"account:{grant.account}"


def check_oidc(request: Request) -> str | None:
    """An OpenID Connect bearer token (a JWT; the JSON API's own tokens are
    none): its principal ``bearer:<issuer fingerprint>:<subject>``. The
    issuer's keys are in memory, or fetched (within their own bound, and the
    address's allowance) where the check may read. What its role permits is
    the door's to check."""
    environ = request.environ

    def principal_of(may_fetch: bool):
        if request.door == "azure":
            return bearer.azure_principal(environ, may_fetch=may_fetch)
        token = bearer.token_of(environ)
        return None if token is None else bearer.verify(token, may_fetch=may_fetch)

    try:
        try:
            principal = principal_of(False)
        except bearer.NeedsFetch:  # the issuer's keys to fetch: allowed, and may this check read?
            if not request.may_look_up():
                raise Throttled from None
            if not request.may_read:
                raise Unreadable from None
            principal = principal_of(True)
    except LeaseholdError as err:
        raise Refused(err.status, err.code, error=err, bearer=err.detail.get("reason", "other")) from None
    except bearer.Refused as refused:
        raise Refused(401, "AuthenticationFailed", refused.detail, bearer=refused.reason) from None
    return None if principal is None else principal.key


def check_bearer(request: Request) -> str | None:
    if request.door != "api":
        return None
    scheme, _, raw = request.environ.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    key = digest(raw.strip())
    principal = _tokens.get(key, request.now)
    if principal is None:
        request.reading(_tokens, key)
        token = ApiToken.find_usable(raw.strip())
        if token is None:
            raise Refused(401, "AuthenticationFailed", "The token is unknown, expired or revoked.")
        principal = token.actor_name
        _tokens.put(key, principal, request.now)
    return principal


def check_session(request: Request) -> str | None:
    if request.door != "api":
        return None
    try:
        cookie = SimpleCookie(request.environ.get("HTTP_COOKIE", ""))
    except CookieError:
        return None
    morsel = cookie.get(settings.SESSION_COOKIE_NAME)
    if morsel is None or not morsel.value:
        return None
    key = morsel.value
    principal = _sessions.get(key, request.now)
    if principal is None:
        request.reading(_sessions, key)
        principal = _session_user(key)
        if principal is None:
            return None  # no session: no credentials at all, as DRF sees it
        _sessions.put(key, principal, request.now)
    return principal


def _session_user(key: str) -> str | None:
    """The user a live session is logged in as, read only (Django's get_user
    may flush a session, a write; the door runs it, and checks the session's
    hash, as it always did)."""
    from importlib import import_module

    from django.contrib.auth import SESSION_KEY

    data = import_module(settings.SESSION_ENGINE).SessionStore(key).load()  # {} if missing or expired
    user_id = data.get(SESSION_KEY)
    return None if user_id is None else f"user-id:{user_id}"


# The checks in the JSON API's order (leases/api/base.py): the first that
# recognises the request's kind of credential decides.
CHECKS: list[Callable[[Request], str | None]] = [check_oidc, check_bearer, check_sas, check_shared_key, check_session]


def register(check: Callable[[Request], str | None], *, first: bool = True) -> None:
    """Another kind of credential (a SAS): a check answering None (not its
    kind), a principal, or raising Refused / Throttled."""
    if check not in CHECKS:
        CHECKS.insert(0 if first else len(CHECKS), check)


def identify(environ: dict, *, door: str, may_look_up: Callable[[], bool], may_read: bool = True) -> str:
    """The principal of a lease request (``door``: "azure" or "api"), or
    Refused: failed credentials, none, or (``throttled``) a lookup the
    server forbade. Unreadable if it needs a read and ``may_read`` is false."""
    request = Request(environ, door, may_look_up, may_read)
    try:
        for check in CHECKS:
            principal = check(request)
            if principal is not None:
                return principal
    except Throttled:
        raise Refused(503 if door == "azure" else 429, "ServerBusy" if door == "azure" else "TooManyRequests",
                      throttled=True) from None
    raise Refused(401, "NoAuthenticationInformation", error=LeaseholdError("NoAuthenticationInformation"))
