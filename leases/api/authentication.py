"""Who is calling the JSON API: a bearer API token (acting as its user), an OpenID Connect bearer
token (a JWT from LEASEHOLD_OIDC_ISSUER, leases/auth/bearer.py: acting with its role, as on the Azure
endpoint), an account's SharedKey (as on the Azure endpoint), or an admin session. Presented credentials that are not valid are a 401
``AuthenticationFailed``, whichever the scheme: in this API 401 means "who are you?" and 403 means
"not allowed" (the Azure endpoint keeps Azure's 403 for a bad signature). A valid token is remembered with its
user and permissions for ``REMEMBER_SECONDS``: a change made in this process forgets it at once, one
made elsewhere counts within that bound; whether the token is usable (revoked, expired, its user
active) is read at every use, so a revoked token is refused at once everywhere."""

from __future__ import annotations

import threading
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models.signals import m2m_changed, post_delete, post_save
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication

from leases.auth import bearer, roles
from leases.auth.sharedkey import AccountPrincipal, SharedKeyAuthentication
from leases.domain.errors import LeaseholdError
from leases.domain import clock
from leases.models.tokens import ApiToken, digest
from leases.storage.compiled_reads import values_one
from leases.operations import metrics

REMEMBER_SECONDS = 1.0  # bound on how long a change made by another process goes unseen
REMEMBER_MAX = 10_000  # bound on the tokens remembered (past it, all are forgotten)
CHALLENGE = 'Bearer realm="leasehold"'  # WWW-Authenticate of a request refused for its credentials
_monotonic = time.monotonic  # the remembering clock (tests move it)
_remembered: dict[str, tuple[float, ApiToken]] = {}  # digest -> (until, token with user and permissions)
_lock = threading.Lock()


def usable_token(raw: str) -> ApiToken | None:
    """``ApiToken.find_usable``, its user and permissions remembered. Whether
    the token is usable (revoked, expired, its user active) is read at every
    use, so a revoked token is refused at once in every process; the token
    and its user are shared by the requests that present it within the
    bound: read only (their permissions are loaded before they are shared)."""
    key, now = digest(raw), _monotonic()
    state = values_one("token-state", _token_state, key)
    if state is None or not _usable(state):
        return None
    entry = _remembered.get(key)
    if entry is not None and now < entry[0] and entry[1].pk == state[0]:
        return entry[1]
    found = ApiToken.find_usable(raw)
    with _lock:
        if found is None:
            _remembered.pop(key, None)
            return None
        found.user.get_all_permissions()  # ModelBackend's caches on the user, filled now
        if len(_remembered) >= REMEMBER_MAX:
            _remembered.clear()
        _remembered[key] = (now + REMEMBER_SECONDS, found)
    return found


def _token_state(key: str):
    return ApiToken.objects.filter(key_hash=key).values_list("pk", "revoked_at", "expires_at", "user__is_active")


def _usable(state: tuple) -> bool:
    _, revoked_at, expires_at, active = state
    return revoked_at is None and (expires_at is None or clock.now() < expires_at) and bool(active)


def forget(**kwargs) -> None:
    """A token, user, group or permission changed in this process: every
    remembered token is looked up again."""
    with _lock:
        _remembered.clear()


def _forget_on_changes() -> None:
    user_model = get_user_model()
    for sender in (ApiToken, user_model, Group):
        post_save.connect(forget, sender=sender, dispatch_uid=f"api-tokens-{sender.__name__}-saved")
        post_delete.connect(forget, sender=sender, dispatch_uid=f"api-tokens-{sender.__name__}-deleted")
    for relation in (user_model.user_permissions, user_model.groups, Group.permissions):
        m2m_changed.connect(forget, sender=relation.through, dispatch_uid=f"api-tokens-{relation.through.__name__}")


_forget_on_changes()


# The model permissions of the JSON API's resource and lease views, as the data roles' operations
# (leases/auth/roles.py): reading a container or a blob, or changing one (its lease included).
READ_PERMISSIONS = frozenset({"leases.view_container", "leases.view_blob"})
WRITE_PERMISSIONS = frozenset({"leases.add_container", "leases.change_container", "leases.delete_container",
                               "leases.add_blob", "leases.change_blob", "leases.delete_blob",
                               "leases.break_blob_lease", "leases.break_container_lease"})


class BearerUser:
    """request.user for an OpenID Connect bearer token: its principal, whose role on the request's
    account and container decides (``may``). Only named resources: the collections and the history
    are not a data role's (no Django permission is granted)."""

    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, principal: bearer.Principal):
        self.principal = principal
        self.username = principal.actor

    def __str__(self) -> str:
        return self.username

    def get_username(self) -> str:
        return self.username

    def has_perm(self, perm, obj=None) -> bool:
        return False

    def has_perms(self, perms, obj=None) -> bool:
        return False

    def may(self, perms, account: str | None, container: str | None, *, count: bool = True) -> bool:
        """May the principal do what ``perms`` allow on ``account`` / ``container``? A refusal is
        counted in /metrics (``count``: the lean path leaves that to the view it hands it to)."""
        config = settings.LEASEHOLD_OIDC
        role = None if account is None or config is None else roles.role_for(
            self.principal.claims, config.rules, account, container)
        for perm in perms:
            operation = "get_blob" if perm in READ_PERMISSIONS else "lease_blob" if perm in WRITE_PERMISSIONS else None
            if operation is None or not roles.allows(role, operation):
                if count:
                    metrics.count_bearer_refusal("api", "role")
                return False
        return bool(perms)


def bearer_user(raw: str) -> BearerUser:
    """The user of a JWT bearer token, or 401 AuthenticationFailed (counted by reason)."""
    try:
        return BearerUser(bearer.verify(raw))
    except bearer.Refused as refused:
        metrics.count_bearer_refusal("api", refused.reason)
        raise exceptions.AuthenticationFailed(refused.detail) from None


class BearerTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer lh_...``; request.auth is the ApiToken. A JWT
    (``Bearer eyJ...``) is an OpenID Connect token instead: request.user a
    BearerUser, request.auth its principal."""

    def authenticate(self, request):
        scheme, _, raw = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        if bearer.looks_like_jwt(raw.strip()):
            user = bearer_user(raw.strip())
            return user, user.principal
        token = usable_token(raw.strip())
        if token is None:
            raise exceptions.AuthenticationFailed("The token is unknown, expired or revoked.")
        return token.user, token

    def authenticate_header(self, request):
        # Its presence makes DRF answer 401 rather than 403 (first authenticator wins).
        return CHALLENGE


class ApiSharedKeyAuthentication(SharedKeyAuthentication):
    """The Azure endpoint's SharedKey check, unchanged: the string to sign
    covers this API's path (``/{account}/api/v1/...``). It only claims
    ``SharedKey`` headers, so other schemes get their turn."""

    def authenticate(self, request):
        if not request.META.get("HTTP_AUTHORIZATION", "").startswith("SharedKey "):
            return None
        try:
            return super().authenticate(request)
        except LeaseholdError as err:
            reason = err.detail.get("AuthenticationErrorDetail", err.message)
            raise exceptions.AuthenticationFailed(reason) from None


def principal_name(request) -> str:
    """The actor recorded in the lease history, and the throttling key."""
    if isinstance(request.auth, ApiToken):
        return request.auth.actor_name
    if isinstance(request.user, (AccountPrincipal, BearerUser)):
        return request.user.username  # "account:<name>", "bearer:<issuer>:<subject> (<name>)"
    return f"user:{request.user.get_username()}"
