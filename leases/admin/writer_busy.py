"""The admin's answer when the database's writer is busy: another process
(or a long write) held the writer lock longer than LEASEHOLD_WRITE_WAIT, so
the action's transaction never began and nothing changed. The operator
gets a page saying so (503, Retry-After), not a server error."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.template.response import TemplateResponse

from engines.writer_wait import RETRY_AFTER_SECONDS, is_writer_busy

MESSAGE = "The database is busy; try again."


def write_wait() -> float:
    return float(settings.DATABASES["default"].get("OPTIONS", {}).get("write_wait") or 5)


def busy_page(request) -> TemplateResponse:
    response = TemplateResponse(request, "admin/leasehold_busy.html", {
        **admin.site.each_context(request), "title": MESSAGE, "write_wait": write_wait(),
        "retry_after": RETRY_AFTER_SECONDS, "back": request.get_full_path()}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class WriterBusyMiddleware:
    """Turns a WriterBusy (or SQLite's own "database is locked") escaping an
    admin view into the busy page. Django's admin runs every change in a
    transaction that is refused at its start, so there is nothing to undo."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not is_writer_busy(exception) or not request.path.startswith("/admin/"):
            return None
        return busy_page(request).render()
