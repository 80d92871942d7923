"""User delegation keys in the admin: who asked for each (the bearer principal), for which account,
valid from and until, the roles held then, revoked or not; never a value (none is stored,
leases/auth/delegation.py). The action "Revoke the user delegation keys of the selected keys'
accounts" is Azure's Revoke User Delegation Keys, for superusers and whoever holds "Can change user
delegation key": every key of those accounts, selected or not, stops working at once."""

from __future__ import annotations

from django.contrib import admin, messages

from leases.admin.common import ReadOnlyColumnsMixin
from leases.admin.queries import DeclaredQueryAdmin
from leases.auth import delegation
from leases.models import UserDelegationKey


@admin.register(UserDelegationKey)
class UserDelegationKeyAdmin(ReadOnlyColumnsMixin, DeclaredQueryAdmin):
    list_display = ("account", "actor", "start", "expiry", "roles", "issued_at", "revoked_at")
    fields = ("account", "actor", "issuer", "signed_oid", "signed_tid", "start", "expiry", "version", "roles",
              "issued_at", "revoked_at")
    sortable_by = ()
    list_per_page = 100
    actions = ("revoke_accounts_keys",)

    def has_revoke_permission(self, request, obj=None):
        return request.user.has_perm("leases.change_userdelegationkey")

    @admin.action(permissions=["revoke"], description="Revoke the user delegation keys of the selected keys' accounts")
    def revoke_accounts_keys(self, request, queryset):
        accounts = sorted(set(queryset.values_list("account__name", flat=True)))
        for account in accounts:
            count = delegation.revoke(account)
            self.log_change(request, queryset.filter(account__name=account).first(),
                            f"Revoked {count} user delegation key(s) of {account}")
            self.message_user(request, f"Revoked {count} user delegation key(s) of {account}.", messages.SUCCESS)
