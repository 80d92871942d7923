"""One time zone throughout the admin: the operator's browser's. The page script
(admin/base_site.html) stores the browser's IANA zone in the ``leasehold_tz`` cookie; this
middleware activates it for admin requests, so that server-rendered times, the history's day
drill-down (its days are cut in the active zone), "who held it at T" and the script's rendering of
times all use the same zone. Without the cookie, or with a zone Python does not know, the server's
TIME_ZONE applies, and the page says which."""

from __future__ import annotations

import zoneinfo

from django.utils import timezone

COOKIE = "leasehold_tz"


class OperatorTimezoneMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        zone = operator_zone(request) if request.path.startswith("/admin/") else None
        if zone is None:
            return self.get_response(request)
        with timezone.override(zone):
            response = self.get_response(request)
            if hasattr(response, "render") and not response.is_rendered:
                response.render()  # TemplateResponses render after the view: in this zone too
            return response


def operator_zone(request) -> zoneinfo.ZoneInfo | None:
    name = request.COOKIES.get(COOKIE, "")
    if not name or len(name) > 64:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
