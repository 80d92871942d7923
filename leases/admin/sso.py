"""Single sign-on for the admin with OpenID Connect, by Authlib's Django client (decision 0049): the
authorization-code flow with PKCE (S256), state and nonce, the ID token checked against the provider's
keys. The ID token's claims map to the admin's Django groups (or to superuser) by
LEASEHOLD_ADMIN_SSO_GROUPS; a signed-in user's groups are set from them at every sign-in, so a group
taken away at the provider is gone at the next one. Nobody a rule names is refused with a page saying
so, and recorded (the log's ``leasehold.admin.sso``), as are a bad state and a failed exchange.
Local passwords are for everyone, superusers alone (the first administrator) or nobody, by
LEASEHOLD_ADMIN_PASSWORDS (the admin's login form, ``PasswordForm``)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import get_user_model, login
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from leases.storage.transactions import write_transaction

log = logging.getLogger("leasehold.admin.sso")
USERNAME_PREFIX = "sso:"  # never a local user's name: a provider's subject cannot take a local account
_clients: dict = {}


def sso_config():
    """LEASEHOLD_ADMIN_SSO (tests override it as a Django setting), else the settings' own."""
    return getattr(settings, "LEASEHOLD_ADMIN_SSO", settings.LEASEHOLD.admin_sso)


def passwords_allowed() -> str:
    return getattr(settings, "LEASEHOLD_ADMIN_PASSWORDS", settings.LEASEHOLD.admin_passwords)


def _client(config):
    """Authlib's client for ``config`` (made again if the settings change: tests override them)."""
    found = _clients.get(config)
    if found is None:
        from authlib.integrations.django_client import OAuth

        oauth = OAuth()
        found = oauth.register(
            "leasehold", client_id=config.client_id, client_secret=config.client_secret,
            server_metadata_url=config.issuer.rstrip("/") + "/.well-known/openid-configuration",
            client_kwargs={"scope": config.scopes, "code_challenge_method": "S256"})
        _clients.clear()
        _clients[config] = found
    return found


def _values(claim) -> list[str]:
    if isinstance(claim, str):
        return claim.split()
    return [value for value in claim if isinstance(value, str)] if isinstance(claim, list) else []


def targets(claims: dict, rules) -> set[str]:
    """The groups (and "superuser") the claims map to."""
    return {rule.target for rule in rules if rule.value in _values(claims.get(rule.claim))}


def refused(request, reason: str, status: int, **facts):
    log.warning("admin sign-in refused: %s %s", reason, " ".join(f"{k}={v!r}" for k, v in facts.items()))
    config = sso_config()
    return render(request, "admin/leasehold_sso_refused.html", {
        "title": "Sign-in refused", "reason": reason, "provider": config.name if config else "",
        "site_header": admin.site.site_header, "site_title": admin.site.site_title}, status=status)


@require_POST
def start(request):
    """POST (with the CSRF token: no other site can start a sign-in for you) to the provider."""
    config = sso_config()
    if config is None:
        return refused(request, "Single sign-on is not configured.", 404)
    following = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(following, allowed_hosts={request.get_host()},
                                       require_https=request.is_secure()):
        request.session["sso_next"] = following
    return _client(config).authorize_redirect(request, request.build_absolute_uri(reverse("admin:sso_callback")))


@require_GET
def callback(request):
    config = sso_config()
    if config is None:
        return refused(request, "Single sign-on is not configured.", 404)
    from authlib.integrations.base_client import OAuthError
    from joserfc.errors import JoseError

    try:
        token = _client(config).authorize_access_token(request)
    except OAuthError as exc:  # a state not this session's (forged, replayed, expired), the provider's error
        return refused(request, f"The sign-in did not complete: {exc.error}.", 400, detail=exc.description)
    except (JoseError, ValueError) as exc:  # the ID token: signature, issuer, audience, nonce, times
        return refused(request, "The provider's ID token did not hold.", 400, detail=type(exc).__name__)
    claims = dict(token.get("userinfo") or {})
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        return refused(request, "The provider's ID token names no subject.", 400)
    mapped = targets(claims, config.rules)
    known = set(Group.objects.filter(name__in=mapped - {"superuser"}).values_list("name", flat=True))
    if "superuser" not in mapped and not known:
        return refused(request, f"Your account at {config.name} has no role in this admin. Ask an administrator "
                                f"to add you to one of its groups.", 403, subject=subject,
                       issuer=config.issuer, mapped=sorted(mapped))
    user = _user(subject, claims, superuser="superuser" in mapped, groups=known)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    log.info("admin sign-in: %s as %s, groups %s", subject, user.get_username(), sorted(known))
    return redirect(request.session.pop("sso_next", "") or reverse("admin:index"))


def _user(subject: str, claims: dict, *, superuser: bool, groups: set[str]):
    """The provider's user, made at the first sign-in, its rights set from the claims at every one."""
    model = get_user_model()

    def write():
        user, made = model.objects.get_or_create(username=(USERNAME_PREFIX + subject)[:150])
        if made:
            user.set_unusable_password()
        user.is_staff, user.is_superuser, user.is_active = True, superuser, True
        name = claims.get("name") or claims.get("preferred_username") or ""
        user.first_name = str(name)[:150]
        user.email = str(claims.get("email") or "")[:254]
        user.save()
        user.groups.set(Group.objects.filter(name__in=groups))
        return user

    return write_transaction(write)


class PasswordForm(AdminAuthenticationForm):
    """The admin's password form, signing in only as LEASEHOLD_ADMIN_PASSWORDS allows."""

    def confirm_login_allowed(self, user) -> None:
        allowed = passwords_allowed()
        if allowed == "off" or (allowed == "superusers" and not user.is_superuser):
            raise ValidationError("Local passwords are turned off here for this account: use single sign-on.",
                                  code="passwords_off")
        super().confirm_login_allowed(user)


def install(site) -> None:
    """The login page: "Sign in with <provider>" when configured; the password form refused (403) when
    local passwords are off."""
    original = site.login

    def sso_login(request, extra_context=None):
        config = sso_config()
        passwords = passwords_allowed()
        if config is not None and passwords == "off" and request.method == "POST":
            return refused(request, f"Local passwords are turned off here: sign in with {config.name}.", 403,
                           username=request.POST.get("username", "")[:150])
        context = {**(extra_context or {}), "sso": config, "passwords": passwords}
        return original(request, context)

    site.login = sso_login
    site.login_form = PasswordForm
    site_urls = site.get_urls

    def get_urls():
        return [path("sso/start/", start, name="sso_start"),
                path("sso/callback/", callback, name="sso_callback"), *site_urls()]

    site.get_urls = get_urls
