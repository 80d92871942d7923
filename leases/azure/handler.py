"""The WSGI application: Django's handler, with the Azure door's requests taken through a handler of
their own that runs no middleware. Every middleware in settings.MIDDLEWARE serves the admin and the
JSON API (sessions, CSRF, the logged-in user, messages, static files, browser security headers); an
Azure request, signed with SharedKey and answered in XML, uses none of them, yet running them costs
it CPU for nothing (bench/README.md has the figure). Both handlers resolve the same URLconf, fire
the same request signals (so database connections are managed alike) and end in the same views. The
Azure door is built from Django's public pieces only (WSGIRequest, the request signals, ``resolve``,
``response_for_exception``), not by emptying the private middleware lists of Django's own
handler."""

from __future__ import annotations


from django.conf import settings
from django.core.handlers.exception import response_for_exception
from django.core.handlers.wsgi import WSGIHandler, WSGIRequest, get_script_name
from django.urls import resolve, set_script_prefix, set_urlconf

from leases.azure import lean
from leases.domain import paths
from leases.operations import handling
from leases.azure.fallback import invalid_uri

# The first path segment of an Azure request is an account name; the site's
# own paths belong to the other doors; every other path is the Azure door's.
AZURE_PATH, SITE_PATH = paths.AZURE_PATH, paths.SITE_PATH

# A tenant's content, and its Content-Type, must never run as a page of this site (the admin's
# origin): every answer a browser can be sent to opens in an opaque origin with no scripts, and
# is never sniffed into another type. Set last, over anything the view or a SAS's rsc* put
# there. PUT and DELETE, which no link, form or navigation sends, are left as they are: the lean
# lease path answers only PUTs, byte for byte as the general path (docs/decisions/0038).
SANDBOX = (("Content-Security-Policy", "sandbox"), ("X-Content-Type-Options", "nosniff"))
NOT_NAVIGABLE = frozenset({"PUT", "DELETE"})


def sandboxed(response, method: str):
    """``response`` with the SANDBOX headers unless ``method`` is one no browser navigates with."""
    if method not in NOT_NAVIGABLE:
        for name, value in SANDBOX:
            response[name] = value
    return response


class AzureDoorHandler:
    """A WSGI application that does what Django's WSGIHandler does for an
    empty MIDDLEWARE list (and ATOMIC_REQUESTS off, as configured): the
    request signals, the URLconf, the view, a rendered response; any
    exception becomes the response Django would give for it (404, 400,
    403, or a logged 500)."""

    def __call__(self, environ, start_response):
        set_script_prefix(get_script_name(environ))
        # request_started / request_finished (the latter sent by the response's
        # close()) close connections that are too old or broken, as for any request.
        handling.started(environ, sender=self.__class__)
        request = WSGIRequest(environ)
        try:
            response = self.get_response(request)
        finally:
            request.close()  # uploaded files: the Azure door reads bodies whole, none are left open
        start_response(f"{response.status_code} {response.reason_phrase}", [
            *response.items(), *(("Set-Cookie", c.output(header="")) for c in response.cookies.values())])
        return response

    def get_response(self, request):
        set_urlconf(settings.ROOT_URLCONF)
        try:
            match = request.resolver_match = resolve(request.path_info)
            response = match.func(request, *match.args, **match.kwargs)
            if response is None:
                raise ValueError(f"The view {match.func.__module__}.{match.func.__qualname__} returned None.")
            if callable(getattr(response, "render", None)):  # DRF's Response renders late
                response = response.render()
        except Exception as exc:
            response = response_for_exception(request, exc)
        if response.status_code >= 400:
            handling.logged(response, request)
        return sandboxed(response, request.method)


class LeaseholdWSGI:
    """Sends Azure paths to the AzureDoorHandler (the usual lease requests
    to its lean path, lean.py), everything else to Django's usual
    handler."""

    def __init__(self):
        self.site = WSGIHandler()
        self.azure = AzureDoorHandler()

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if AZURE_PATH.match(path):
            if not lean.on_admin_host(environ):  # never the Azure door there
                lease = lean.takes(environ)  # a lease request of the usual shape: the lean path
                if lease is not None:
                    return lean.serve(environ, lease, start_response)
                return self.azure(environ, start_response)
        elif SITE_PATH.match(path):
            return self.site(environ, start_response)
        # The Azure door's by position, naming no account it could hold (upper case,
        # too short, '//', 'OPTIONS *'), or on the admin's host: Azure's XML 400 InvalidUri
        # for every method, before any middleware (the CSRF check answered PUT and DELETE in HTML).
        method = environ.get("REQUEST_METHOD", "GET")
        response = sandboxed(invalid_uri(_Method(method)), method)
        start_response(f"{response.status_code} {response.reason_phrase}", list(response.items()))
        return response


class _Method:
    __slots__ = ("method",)

    def __init__(self, method: str):
        self.method = method
