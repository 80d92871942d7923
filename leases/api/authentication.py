"""Who is calling the JSON API: a bearer API token (acting as its user), an account's SharedKey (as
on the Azure endpoint), or an admin session. Presented credentials that are not valid are a 401
``AuthenticationFailed``, whichever the scheme: in this API 401 means "who are you?" and 403 means
"not allowed" (the Azure endpoint keeps Azure's 403 for a bad signature)."""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication

from leases.auth.sharedkey import AccountPrincipal, SharedKeyAuthentication
from leases.domain.errors import LeaseholdError
from leases.models.tokens import ApiToken


class BearerTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer lh_...``; request.auth is the ApiToken."""

    def authenticate(self, request):
        scheme, _, raw = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        token = ApiToken.find_usable(raw.strip())
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
