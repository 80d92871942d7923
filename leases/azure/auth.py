"""SharedKey authentication for the Azure endpoint, as a DRF authentication
class. The string-to-sign is rebuilt from the *raw* request URI: Django's
decoded path cannot reproduce the client's percent-encoding for every name."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections import defaultdict
from datetime import datetime
from email.utils import parsedate_to_datetime
from urllib.parse import parse_qsl, quote, urlsplit

from django.conf import settings
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission

from .. import clock
from ..errors import LeaseholdError
from ..models import Account

AUTH_RE = re.compile(r"^SharedKey ([a-z0-9]{1,64}):([A-Za-z0-9+/=]{20,128})$")
STANDARD_HEADERS = ("CONTENT_ENCODING", "CONTENT_LANGUAGE", "CONTENT_LENGTH", "CONTENT_MD5", "CONTENT_TYPE",
                    "DATE", "IF_MODIFIED_SINCE", "IF_MATCH", "IF_NONE_MATCH", "IF_UNMODIFIED_SINCE", "RANGE")


class AccountPrincipal:
    """request.user for a SharedKey request: the storage account."""

    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, account: Account):
        self.account = account
        self.username = f"account:{account.name}"

    def __str__(self) -> str:
        return self.username


def _meta(environ: dict, name: str) -> str:
    if name in ("CONTENT_LENGTH", "CONTENT_TYPE"):
        return environ.get(name, "")
    return environ.get("HTTP_" + name, "")


def raw_paths(environ: dict, decoded_path: str) -> list[str]:
    """The path as the client encoded it (gunicorn RAW_URI, uWSGI REQUEST_URI),
    then the decoded path re-quoted the way the Python SDK quotes it."""
    paths = []
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        paths.append(urlsplit(raw).path if "://" in raw else raw.split("?", 1)[0])
    requoted = quote(decoded_path, safe="/~")
    if requoted not in paths:
        paths.append(requoted)
    return paths


def string_to_sign(environ: dict, path: str, account: str) -> str:
    method = environ["REQUEST_METHOD"]
    version = environ.get("HTTP_X_MS_VERSION", "")
    values = []
    for name in STANDARD_HEADERS:
        value = _meta(environ, name)
        if name == "CONTENT_LENGTH" and value == "0" and (not version or version >= "2015-02-21"):
            value = ""
        values.append(value)
    ms_headers = sorted(
        (key[5:].lower().replace("_", "-"), value.strip())
        for key, value in environ.items() if key.startswith("HTTP_X_MS_"))
    canon_headers = "".join(f"{k}:{v}\n" for k, v in ms_headers)
    query = defaultdict(list)
    for k, v in parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True):
        query[k.lower()].append(v)
    resource = f"/{account}{path}" + "".join(
        f"\n{k}:{','.join(sorted(query[k]))}" for k in sorted(query))
    return f"{method}\n" + "\n".join(values) + "\n" + canon_headers + resource


def sign(key: str, text: str) -> str:
    digest = hmac.new(base64.b64decode(key), text.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def _request_date(environ: dict) -> datetime:
    value = environ.get("HTTP_X_MS_DATE") or environ.get("HTTP_DATE")
    if not value:
        raise LeaseholdError("AuthenticationFailed", detail={
            "AuthenticationErrorDetail": "Request date header not specified."})
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        when = None
    if when is None or when.tzinfo is None:
        raise LeaseholdError("AuthenticationFailed", detail={
            "AuthenticationErrorDetail": f"The date header '{value[:100]}' is not in the correct format."})
    return when


class SharedKeyAuthentication(BaseAuthentication):
    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION")
        if not header:
            return None
        match = AUTH_RE.match(header.strip())
        if not match:
            raise LeaseholdError("InvalidAuthenticationInfo")
        name, signature = match.groups()
        environ = request.META
        skew = abs((clock.now() - _request_date(environ)).total_seconds())
        if skew > settings.LEASEHOLD_CLOCK_SKEW_SECONDS:
            raise LeaseholdError("AuthenticationFailed", detail={
                "AuthenticationErrorDetail": "Request date header too old or too far in the future."})
        account = Account.objects.filter(name=name).first()
        texts = [string_to_sign(environ, p, name) for p in raw_paths(environ, request._request.path)]
        if account is not None:
            for key in account.keys():
                for text in texts:
                    if hmac.compare_digest(sign(key, text), signature):
                        return AccountPrincipal(account), account
        raise LeaseholdError("AuthenticationFailed", detail={
            "AuthenticationErrorDetail": (
                f"The MAC signature found in the HTTP request '{signature}' is not the same as any "
                f"computed signature. Server used following string to sign: '{texts[0]}'.")})

    def authenticate_header(self, request):
        return "SharedKey"


class AccountKeyRequired(BasePermission):
    """Every Azure request is signed, and only for its own account."""

    def has_permission(self, request, view):
        if request.auth is None:
            raise LeaseholdError("NoAuthenticationInformation")
        if request.auth.name != view.kwargs.get("account"):
            raise LeaseholdError("AuthenticationFailed", detail={
                "AuthenticationErrorDetail": "The account in the URL does not match the signing account."})
        return True
