"""The Azure endpoint's own rule on top of SharedKey (leases/sharedkey.py):
every request is signed, and only for the account in its URL."""

from __future__ import annotations

from rest_framework.permissions import BasePermission

from ..errors import LeaseholdError


def require_account(signed_for: str | None, url_account: str | None) -> None:
    """Every Azure request is signed, and only for its own account."""
    if signed_for is None:
        raise LeaseholdError("NoAuthenticationInformation")
    if signed_for != url_account:
        raise LeaseholdError("AuthenticationFailed", detail={
            "AuthenticationErrorDetail": "The account in the URL does not match the signing account."})


class AccountKeyRequired(BasePermission):
    """Every Azure request is signed, and only for its own account."""

    def has_permission(self, request, view):
        require_account(request.auth, view.kwargs.get("account"))
        return True
