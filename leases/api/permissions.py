"""Who may do what, mirroring the admin: users and their tokens need the
model permission for the operation (``leases.view_blob``, ...; breaking a
blob's lease needs ``leases.break_blob_lease``, a container's
``leases.break_container_lease``, never one for the other); a SharedKey account may do anything to
its own account's resources and nothing to another's; an OpenID Connect bearer token what its data role
allows on the named account and container (leases/api/authentication.py's BearerUser)."""

from __future__ import annotations

from rest_framework.permissions import BasePermission

from leases.api.authentication import BearerUser
from leases.auth.sharedkey import AccountPrincipal


class LeaseholdPermission(BasePermission):
    def has_permission(self, request, view):
        user = request.user
        if not (user and user.is_authenticated):
            return False  # DRF answers 401 NoAuthenticationInformation
        if isinstance(user, AccountPrincipal):
            # Collections have no account of their own; their querysets are
            # scoped to the account instead (api.selectors).
            account = view.target_account()
            return account is None or account == user.name
        if isinstance(user, BearerUser):
            return user.may(view.permissions_for(request), view.kwargs.get("account"), view.kwargs.get("container"))
        return user.has_perms(view.permissions_for(request))
