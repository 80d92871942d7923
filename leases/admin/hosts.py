"""LEASEHOLD_ADMIN_HOSTS, the admin's side of the origin split (docs/decisions/0038): set, the admin,
the JSON API and their static files (``paths.ADMIN_SEGMENTS``) answer only on the admin's hosts,
elsewhere a 404 in the shape of the door asked (the JSON API's error object, a plain page for the
rest). The Azure door refuses its side on those hosts itself (leases/azure/handler.py), and both
doors' lean lease paths leave a request on the wrong host to their general path."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse, JsonResponse

from leases.domain import guids, paths
from leases.domain.errors import MESSAGES

PAGE = "<!doctype html><title>Not Found</title><h1>Not Found</h1><p>The admin is not served on this host.</p>"
REASON = "The JSON API is not served on this host."


class AdminHostsMiddleware:
    """First after SecurityMiddleware: a request refused here reaches no static file, session or view."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        admin_hosts = settings.LEASEHOLD_ADMIN_HOSTS
        path = request.path_info
        if admin_hosts and paths.admin_side(path) and not paths.admin_host(request.META.get("HTTP_HOST", ""),
                                                                            admin_hosts):
            return refusal(path)
        return self.get_response(request)


def refusal(path: str) -> HttpResponse:
    if paths.door_of(path) == "api" or path == "/api":
        # The JSON API's error object (leases/api/exceptions.py), compact as its renderer writes it.
        response: HttpResponse = JsonResponse(
            {"code": "ResourceNotFound", "message": MESSAGES["ResourceNotFound"], "request_id": guids.request_id(),
             "reason": REASON}, status=404, json_dumps_params={"separators": (",", ":")})
    else:
        response = HttpResponse(PAGE, status=404)
    response["X-Frame-Options"] = "DENY"
    return response
