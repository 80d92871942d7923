"""Named API tokens for the JSON API. A token acts with its user's permissions and appears in the
lease history as ``token:<name>``, so names are unique. Only a SHA-256 digest of the token is
stored: the token is a 256-bit random secret, so a fast hash is enough (no password-style
stretching), and the digest can be looked up by an index. The plaintext is shown once, when the
token is issued. Tokens are revoked, not deleted, so the name keeps pointing at one token for as
long as the history mentions it."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from leases.domain import clock

TOKEN_PREFIX = "lh_"


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


class ApiToken(models.Model):
    name = models.CharField(max_length=64, unique=True, validators=[
        RegexValidator(r"^[A-Za-z0-9_.-]+$", "Token names use letters, digits, '_', '.' and '-'.")])
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    key_hash = models.CharField(max_length=64, unique=True)
    # The first characters of the token: enough for a person to tell tokens
    # apart in a listing, far too few to use.
    key_prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def issue(cls, *, user, name: str, expires_at: datetime | None = None) -> tuple[ApiToken, str]:
        """Create a token; returns it and its plaintext, which is not kept."""
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls(name=name, user=user, key_hash=digest(raw), key_prefix=raw[:12],
                    created_at=clock.now(), expires_at=expires_at)
        token.full_clean()
        token.save(force_insert=True)
        return token, raw

    @classmethod
    def find_usable(cls, raw: str) -> ApiToken | None:
        """The live token for ``raw``: not revoked, not expired, user active."""
        token = cls.objects.select_related("user").filter(key_hash=digest(raw)).first()
        if token is None or not token.is_usable(clock.now()):
            return None
        return token

    def is_usable(self, now: datetime) -> bool:
        return (self.revoked_at is None and (self.expires_at is None or now < self.expires_at)
                and self.user.is_active)

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = clock.now()
            self.save(update_fields=["revoked_at"])

    @property
    def actor_name(self) -> str:
        return f"token:{self.name}"
