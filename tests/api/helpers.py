"""Helpers for calling the JSON API in tests (the fixtures are in
tests/conftest.py and tests/api/conftest.py): users and their token clients,
resources made through the services, lease calls, SharedKey signing. API
clients authenticate with real tokens."""

from __future__ import annotations

import base64
import hashlib
import hmac
from email.utils import formatdate
from urllib.parse import parse_qsl, urlsplit

from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from leases import services
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY  # noqa: F401 (for the tests)
from leases.services import Actor, ResourceRef
from leases.models.tokens import ApiToken

API = "/api/v1"
OTHER_ACCOUNT, OTHER_KEY = "otheraccount", base64.b64encode(b"another account's key").decode()
TEST_ACTOR = Actor(name="cli", via="cli")


def make_user(username: str, *perms: str, superuser: bool = False) -> User:
    # No password: tokens authenticate, and hashing one costs most of a second.
    user = User.objects.create_user(username=username, password=None, is_superuser=superuser, is_staff=superuser)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(*Permission.objects.filter(content_type__app_label=app_label, codename=codename))
    return user


def token_client(user: User, token_name: str | None = None, **issued) -> APIClient:
    """A client with a new bearer token of ``user``'s (``issued``: more of ApiToken.issue's
    keywords, such as ``expires_at``)."""
    _, raw = ApiToken.issue(user=user, name=token_name or f"{user.username}-token", **issued)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def make_container(name: str, account: str = DEV_ACCOUNT):
    return services.container_create(account=account, name=name, actor=TEST_ACTOR)


def make_blob(container: str, name: str, content: bytes = b"", account: str = DEV_ACCOUNT):
    return services.blob_put(ref=ResourceRef(account, container, name), actor=TEST_ACTOR, content=content)


def resource_path(kind: str) -> str:
    """The account/container[/blob] path of the resource a kind-parametrised
    test works on (see the ``resource`` fixture)."""
    return f"{DEV_ACCOUNT}/box" if kind == "container" else f"{DEV_ACCOUNT}/box/dir/a b.txt"


def lease(client: APIClient, action: str, path: str, body: dict | None = None, **headers):
    return client.post(f"{API}/leases/{action}/{path}", body or {}, format="json", **headers)


# ------------------------------------------------------------------ SharedKey, signed the way Azure clients sign

def shared_key_headers(method: str, url: str, *, account: str, key: str, headers: dict[str, str]) -> dict[str, str]:
    """Headers that sign a request with SharedKey, computed from the Azure
    specification (not from the server's code): ``headers`` are the ones
    the client will send (Content-Type, Content-Length, x-ms-*)."""
    lower = {k.lower(): v for k, v in headers.items()}
    lower.setdefault("x-ms-date", formatdate(usegmt=True))
    lower.setdefault("x-ms-version", "2025-11-05")
    length = lower.get("content-length", "")
    standard = [lower.get("content-encoding", ""), lower.get("content-language", ""),
                "" if length == "0" else length, lower.get("content-md5", ""), lower.get("content-type", ""),
                "", "", "", "", "", ""]
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in sorted(lower.items()) if k.startswith("x-ms-"))
    parts = urlsplit(url)
    query: dict[str, list[str]] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        query.setdefault(name.lower(), []).append(value)
    resource = f"/{account}{parts.path}" + "".join(f"\n{k}:{','.join(sorted(v))}" for k, v in sorted(query.items()))
    text = f"{method}\n" + "\n".join(standard) + "\n" + canonical_headers + resource
    signature = base64.b64encode(hmac.new(base64.b64decode(key), text.encode(), hashlib.sha256).digest()).decode()
    return {**{k: v for k, v in lower.items() if k.startswith("x-ms-")},
            "Authorization": f"SharedKey {account}:{signature}"}
