"""Who is calling the JSON API: a bearer API token (acting as its user), an account's SharedKey (as
on the Azure endpoint), or an admin session. Presented credentials that are not valid are a 401
``AuthenticationFailed``, whichever the scheme: in this API 401 means "who are you?" and 403 means
"not allowed" (the Azure endpoint keeps Azure's 403 for a bad signature). A valid token is remembered with its
user and permissions for ``REMEMBER_SECONDS``: a change made in this process forgets it at once, one
made elsewhere counts within that bound; whether the token is usable (revoked, expired, its user
active) is read at every use, so a revoked token is refused at once everywhere."""

from __future__ import annotations

import threading
import time

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models.signals import m2m_changed, post_delete, post_save
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication

from leases.auth.sharedkey import AccountPrincipal, SharedKeyAuthentication
from leases.domain.errors import LeaseholdError
from leases.domain import clock
from leases.models.tokens import ApiToken, digest
from leases.storage.compiled_reads import values_one

REMEMBER_SECONDS = 1.0  # bound on how long a change made by another process goes unseen
REMEMBER_MAX = 10_000  # bound on the tokens remembered (past it, all are forgotten)
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


class BearerTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer lh_...``; request.auth is the ApiToken."""

    def authenticate(self, request):
        scheme, _, raw = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        token = usable_token(raw.strip())
        if token is None:
            raise exceptions.AuthenticationFailed("The token is unknown, expired or revoked.")
        return token.user, token

    def authenticate_header(self, request):
        # Its presence makes DRF answer 401 rather than 403 (first authenticator wins).
        return 'Bearer realm="leasehold"'


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
    if isinstance(request.user, AccountPrincipal):
        return request.user.username  # "account:<name>"
    return f"user:{request.user.get_username()}"
