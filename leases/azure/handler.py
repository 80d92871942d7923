"""The WSGI application: Django's handler, with the Azure door's requests
taken through a handler of their own that runs no middleware.

Every middleware in settings.MIDDLEWARE serves the admin and the JSON API
(sessions, CSRF, the logged-in user, messages, static files, browser security
headers); an Azure request, signed with SharedKey and answered in XML, uses
none of them, yet running them cost about a tenth of its CPU. Both handlers
resolve the same URLconf, fire the same request signals (so database
connections are managed alike) and end in the same views.
"""

from __future__ import annotations

import re

from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler

# The first path segment of an Azure request is an account name (see
# config/urls.py); these prefixes belong to the other doors.
AZURE_PATH = re.compile(r"^/(?!(?:admin|api|static|health|metrics)(?:/|$))[a-z0-9]{3,24}(?:/|$)")


class AzureDoorHandler(WSGIHandler):
    """Django's WSGI handler, as BaseHandler.load_middleware builds it for an
    empty MIDDLEWARE list."""

    def load_middleware(self, is_async=False):
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        self._middleware_chain = convert_exception_to_response(self._get_response)


class LeaseholdWSGI:
    """Sends Azure paths to the AzureDoorHandler, everything else to
    Django's usual handler."""

    def __init__(self):
        self.site = WSGIHandler()
        self.azure = AzureDoorHandler()

    def __call__(self, environ, start_response):
        if AZURE_PATH.match(environ.get("PATH_INFO", "")):
            return self.azure(environ, start_response)
        return self.site(environ, start_response)
