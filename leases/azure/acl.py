"""Get Container ACL and Set Container ACL (``restype=container&comp=acl``):
a container's stored access policies as Azure's XML, and its public access
level as a header. The rules (at most five, each identifier once) are the
service's (services/access_policies.py)."""

from __future__ import annotations

from datetime import datetime, timezone

from django.http import HttpResponse

from leases.auth import sas
from leases import services
from leases.domain.errors import LeaseholdError
from leases.azure import inputs, wire


def _xml_error(why: str) -> LeaseholdError:
    return LeaseholdError("InvalidXmlDocument", message=f"XML specified is not syntactically valid: {why}")


def _time(text: str | None) -> datetime | None:
    if not text or not text.strip():
        return None
    when = sas.parse_time(text.strip())
    if when is None:
        raise _xml_error(f"'{text.strip()[:64]}' is not a time in ISO 8601 format.")
    return when


def parse_identifiers(body: bytes) -> list[services.SignedIdentifier]:
    """The signed identifiers of a Set Container ACL body (none if empty)."""
    if not body.strip():
        return []
    root = inputs.xml_root(body, "SignedIdentifiers")
    found = []
    for item in root:
        if item.tag != "SignedIdentifier":
            raise _xml_error(f"unexpected element {item.tag[:64]}.")
        policy = item.find("AccessPolicy")
        get = (lambda name: policy.findtext(name)) if policy is not None else (lambda name: None)  # noqa: E731
        found.append(services.SignedIdentifier(
            identifier=(item.findtext("Id") or "").strip(), start=_time(get("Start")), expiry=_time(get("Expiry")),
            permission=(get("Permission") or "").strip()))
    return found


def _iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond:06d}0Z"


def identifiers_xml(policies) -> str:
    parts = ["<SignedIdentifiers>"]
    for policy in policies:
        parts.append(f"<SignedIdentifier><Id>{wire.xml_text(policy.identifier)}</Id><AccessPolicy>")
        if policy.start:
            parts.append(f"<Start>{_iso(policy.start)}</Start>")
        if policy.expiry:
            parts.append(f"<Expiry>{_iso(policy.expiry)}</Expiry>")
        if policy.permission:
            parts.append(f"<Permission>{wire.xml_text(policy.permission)}</Permission>")
        parts.append("</AccessPolicy></SignedIdentifier>")
    parts.append("</SignedIdentifiers>")
    return wire.XML_DECLARATION + "".join(parts)


def _with_access(response: HttpResponse, container) -> HttpResponse:
    response["ETag"] = container.etag
    response["Last-Modified"] = wire.http_date(container.last_modified)
    if container.public_access:
        response["x-ms-blob-public-access"] = container.public_access
    return response


def get_acl(view, ref: services.ResourceRef) -> HttpResponse:
    container, policies = services.container_get_acl(ref=ref, actor=view.actor(), lease_id=view.lease_id("container"))
    body = "" if view.request.method == "HEAD" else identifiers_xml(policies)
    return _with_access(HttpResponse(body, content_type="application/xml"), container)


def set_acl(view, ref: services.ResourceRef) -> HttpResponse:
    request = view.request._request
    identifiers = parse_identifiers(inputs.read_body(request))
    container = services.container_set_acl(
        ref=ref, actor=view.actor(), identifiers=identifiers,
        public_access=request.META.get("HTTP_X_MS_BLOB_PUBLIC_ACCESS", ""),
        lease_id=view.lease_id("container"), conditions=view.conditions())
    response = wire.Bodiless()
    response["ETag"] = container.etag
    response["Last-Modified"] = wire.http_date(container.last_modified)
    return response
