"""The Azure endpoint's credentials: SharedKey (leases/auth/sharedkey.py), signed
for the account in the URL, a shared access signature (leases/auth/sas.py), or
an OAuth bearer token (leases/auth/bearer.py) whose role (leases/auth/roles.py)
is checked against the operation it is used for, as a SAS's permissions are.
Both the general view and the lean lease path (lean.py) call ``credentials``
and ``permit``."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission

from leases.auth import bearer, delegation, roles, sas
from leases.domain.errors import LeaseholdError
from leases.operations import metrics
from leases.services import blob_read, stored_policy
from leases.auth.sharedkey import account_keys, verify_shared_key


def require_account(signed_for: str | None, url_account: str | None) -> None:
    """Every Azure request is signed, and only for its own account."""
    if signed_for is None:
        raise LeaseholdError("NoAuthenticationInformation")
    if signed_for != url_account:
        raise LeaseholdError("AuthenticationFailed", detail={
            "AuthenticationErrorDetail": "The account in the URL does not match the signing account."})


class SasPrincipal:
    """request.user for a request authorized by a SAS."""

    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, grant: Grant):
        self.grant = grant
        self.name = grant.account
        self.username = grant.actor

    def __str__(self) -> str:
        return self.username


def _policy(account: str, container: str, identifier: str) -> sas.Policy | None:
    found = stored_policy(account, container, identifier)
    return None if found is None else sas.Policy(found.start, found.expiry, found.permission)


def verify_sas(environ: dict, decoded_path: str, url_account: str) -> sas.Grant | None:
    """The grant of the request's SAS, None if it carries none (or carries
    an Authorization header, which SharedKey checks), or Azure's refusal."""
    if environ.get("HTTP_AUTHORIZATION") or not sas.is_sas(environ):
        return None
    _, container, blob = (decoded_path.split("/", 3) + [None, None])[1:4]
    return sas.verify(environ, url_account, container or None, blob, keys=account_keys, policy=_policy,
                      delegated=delegation.verify)


@dataclass(frozen=True)
class BearerGrant:
    """A verified bearer token's principal and its role on the request's account and container."""

    principal: bearer.Principal
    role: str | None
    account: str
    headers: tuple = ()

    @property
    def actor(self) -> str:
        return self.principal.actor


Grant = sas.Grant | BearerGrant


def verify_bearer(environ: dict, decoded_path: str, url_account: str, *, may_fetch: bool = True) -> BearerGrant | None:
    """The grant of the request's bearer token, None if it carries none, or Azure's refusal
    (bearer.NeedsFetch if the issuer's keys must be fetched and ``may_fetch`` is false)."""
    try:
        principal = bearer.azure_principal(environ, may_fetch=may_fetch)
    except LeaseholdError as err:
        metrics.count_bearer_refusal("azure", err.detail.get("reason", "other"))
        raise
    if principal is None:
        return None
    container = (decoded_path.split("/", 3) + [""])[2] or None
    return BearerGrant(principal, roles.role_for(principal.claims, settings.LEASEHOLD_OIDC.rules, url_account,
                                                 container), url_account)


def credentials(environ: dict, decoded_path: str, url_account: str) -> Grant | None:
    """Check the request's credentials: None for SharedKey (signed for
    ``url_account``), the grant for a SAS or a bearer token; else Azure's refusal."""
    grant: Grant | None = verify_bearer(environ, decoded_path, url_account)
    if grant is None:
        grant = verify_sas(environ, decoded_path, url_account)
    if grant is None:
        require_account(verify_shared_key(environ, decoded_path, account_keys), url_account)
    return grant


def actor_name(grant: Grant | None, url_account: str) -> str:
    return grant.actor if grant is not None else f"account:{url_account}"


def lease_operation(noun: str, lease_action: str | None) -> str:
    """The SAS operation of a lease request (a break may need less)."""
    kind = "break" if (lease_action or "").lower() == "break" else "lease"
    return f"{kind}_{noun}"


def permit(grant: Grant | None, operation: str) -> frozenset | None:
    """None for SharedKey (the account may do anything) and for a bearer
    token whose role allows ``operation``; for a SAS, the letters that allow
    it; else 403 AuthorizationPermissionMismatch."""
    if isinstance(grant, BearerGrant):
        if not roles.allows(grant.role, operation):
            metrics.count_bearer_refusal("azure", "role")
            raise LeaseholdError("AuthorizationPermissionMismatch")
        return None
    return None if grant is None else sas.authorize(grant, operation)


def create_only(ref, actor) -> None:
    """A SAS with Create but not Write permission creates blobs, never replaces one."""
    try:
        blob_read(ref=ref, actor=actor, content=False)
    except LeaseholdError as err:
        if err.code in ("BlobNotFound", "ContainerNotFound"):
            return
        raise
    raise LeaseholdError("AuthorizationPermissionMismatch")


def response_headers(response, grant: Grant | None) -> None:
    """A service SAS's rscc/rscd/rsce/rscl/rsct on a blob read's answer."""
    for header, value in grant.headers if grant is not None else ():
        response[header] = value


class BearerAuthentication(BaseAuthentication):
    """The Azure view's bearer tokens (before SharedKey, which refuses any other scheme)."""

    def authenticate(self, request):
        account = request.parser_context["kwargs"].get("account")
        grant = verify_bearer(request.META, request._request.path, account)
        if grant is None:
            return None
        return SasPrincipal(grant), grant.account


class SasAuthentication(BaseAuthentication):
    """The Azure view's SAS (the JSON API does not take SAS)."""

    def authenticate(self, request):
        grant = verify_sas(request.META, request._request.path, request.parser_context["kwargs"].get("account"))
        if grant is None:
            return None
        return SasPrincipal(grant), grant.account


class AccountKeyRequired(BasePermission):
    """Every Azure request is signed, and only for its own account."""

    def has_permission(self, request, view):
        require_account(request.auth, view.kwargs.get("account"))
        return True
