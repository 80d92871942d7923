"""Get User Delegation Key (``POST /?restype=service&comp=userdelegationkey``): a bearer principal
asks for a key to sign user delegation SAS with (leases/auth/delegation.py); the body is Azure's
``<KeyInfo><Start/><Expiry/></KeyInfo>``, the answer Azure's ``<UserDelegationKey>``. Only a bearer
token may ask: a key delegates a principal's rights, and an account key or a SAS has no principal."""

from __future__ import annotations

from django.http import HttpResponse

from leases.auth import delegation
from leases.auth.bearer import Principal
from leases.domain.errors import LeaseholdError
from leases.azure import inputs, wire
from leases.azure.auth import BearerGrant


def get_key(view) -> HttpResponse:
    request = view.request._request
    grant = getattr(view.request.user, "grant", None)
    if not isinstance(grant, BearerGrant):
        raise LeaseholdError("AuthenticationFailed", detail={
            "AuthenticationErrorDetail": "Only a bearer token (OAuth) may get a user delegation key."})
    version = request.META.get("HTTP_X_MS_VERSION", "")
    if version < delegation.SINCE:
        raise LeaseholdError("InvalidQueryParameterValue", field="comp", value="userdelegationkey")
    root = inputs.xml_root(inputs.read_body(request), "KeyInfo")
    start, expiry = delegation.key_window(root.findtext("Start"), root.findtext("Expiry"))
    if (root.findtext("DelegatedUserTid") or "").strip():
        raise delegation.node_error("DelegatedUserTid", root.findtext("DelegatedUserTid") or "")
    principal: Principal = grant.principal
    row, value = delegation.issue(principal, view.kwargs["account"], start, expiry, version)
    body = (f"<UserDelegationKey><SignedOid>{wire.xml_text(row.signed_oid)}</SignedOid>"
            f"<SignedTid>{wire.xml_text(row.signed_tid)}</SignedTid>"
            f"<SignedStart>{start.strftime(delegation.TIME_FORMAT)}</SignedStart>"
            f"<SignedExpiry>{expiry.strftime(delegation.TIME_FORMAT)}</SignedExpiry>"
            f"<SignedService>b</SignedService><SignedVersion>{wire.xml_text(version)}</SignedVersion>"
            f"<Value>{value}</Value></UserDelegationKey>")
    return HttpResponse(wire.XML_DECLARATION + body, content_type="application/xml")
