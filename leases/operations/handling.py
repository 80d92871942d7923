"""What Django's handler does for every request, for the code that answers a request without it (the
doors' lean paths, the Azure door's own handler): one stand-in for a Django request where Django's
request logger and the doors' exception handlers read one (method, path, META, the request id; the
fault-logged mark is set on it), ``request_started`` sent as Django's handler sends it (its receivers
close a database connection that is broken or too old), and a 4xx or 5xx answer logged as Django's
handler logs it; and whether a request is for one of LEASEHOLD_ADMIN_HOSTS. One place each, so that
the lean paths and the general ones cannot drift apart."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import signals
from django.core.signals import setting_changed
from django.utils.log import log_response

from leases.domain import paths


class LeanRequest:
    """What the exception handlers and Django's request logger read of a request."""

    __slots__ = ("method", "path", "META", "leasehold_fault_logged", "request_id", "auth", "user")
    auth: Any  # the JSON API's: the ApiToken, as DRF's request.auth (the rate limit's key)
    user: Any

    def __init__(self, method: str, path: str, meta: dict, request_id: str = ""):
        self.method, self.path, self.META, self.request_id = method, path, meta, request_id
        self.auth = self.user = None


def started(environ: dict, sender: type = LeanRequest) -> None:
    """A request's start (of a batch of requests received together: once for all), as Django's handler
    signals it."""
    signals.request_started.send(sender=sender, environ=environ)


def logged(response, request) -> None:
    """A 4xx or 5xx answer logged (WARNING, ERROR) as Django's handler logs it; any other, not."""
    log_response("%s: %s", response.reason_phrase, request.path, response=response, request=request)


def on_admin_host(environ: dict) -> bool | None:
    """None where LEASEHOLD_ADMIN_HOSTS names no host (the admin's side on every host); else whether
    the request is for one of them (docs/decisions/0038). The setting is read once (a Django setting
    costs about a microsecond to read), again after it changes."""
    global _admin_hosts
    if _admin_hosts is None:
        _admin_hosts = settings.LEASEHOLD_ADMIN_HOSTS
    return paths.admin_host(environ.get("HTTP_HOST", ""), _admin_hosts) if _admin_hosts else None


_admin_hosts: frozenset[str] | None = None


def _forget_admin_hosts(setting: str, **kwargs) -> None:
    global _admin_hosts
    if setting == "LEASEHOLD_ADMIN_HOSTS":
        _admin_hosts = None


setting_changed.connect(_forget_admin_hosts, dispatch_uid="lean-admin-hosts")
