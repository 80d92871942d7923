"""User delegation keys (Get User Delegation Key), a model of its own module (leases/models/__init__.py
re-exports it). The key itself is never stored: its value is derived from the server's secret key and
the row's ``salt`` and fields (leases/auth/delegation.py), so neither the admin nor a copy of the
database hands out a key; the row keeps who asked, the roles they held then, and whether the key was
revoked (Azure's Revoke User Delegation Keys)."""

from __future__ import annotations

from django.db import models


class UserDelegationKey(models.Model):
    account = models.ForeignKey("leases.Account", on_delete=models.CASCADE, related_name="delegation_keys")
    issuer = models.CharField(max_length=512)
    signed_oid = models.CharField(max_length=160)  # the principal's object id (oid) or subject
    signed_tid = models.CharField(max_length=64)  # the token's tid, else the issuer's fingerprint
    actor = models.CharField(max_length=200)  # the principal as the history names it
    start = models.DateTimeField()
    expiry = models.DateTimeField()
    version = models.CharField(max_length=10)  # SignedVersion: the x-ms-version it was asked with
    # The role the principal held when the key was issued: "*" on the account, and per container a rule names.
    roles = models.JSONField(default=dict)
    salt = models.CharField(max_length=32)  # with the server's secret key, derives the value
    issued_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["account", "signed_oid", "start", "expiry"], name="udk_lookup_idx")]
        ordering = ["-issued_at"]

    def __str__(self) -> str:
        return f"{self.signed_oid} on {self.account_id}, {self.start:%Y-%m-%d %H:%M} to {self.expiry:%Y-%m-%d %H:%M}"
