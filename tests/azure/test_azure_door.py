"""The Azure door's own WSGI handler (leases/azure/handler.py): Azure paths
run no middleware, yet fire the same request signals as every other request
(so database connections are managed alike), and whatever a view raises
becomes the response Django gives for it."""

from __future__ import annotations

import io
import sys

import pytest
from django.core import signals
from django.urls import path

from config.wsgi import application


def call(path_info: str, method: str = "GET") -> tuple[str, dict, bytes, object]:
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path_info, "QUERY_STRING": "", "SERVER_NAME": "127.0.0.1",
               "SERVER_PORT": "10000", "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1",
               "SCRIPT_NAME": "", "HTTP_HOST": "127.0.0.1", "wsgi.version": (1, 0), "wsgi.url_scheme": "http",
               "wsgi.input": io.BytesIO(b""), "wsgi.errors": sys.stderr, "wsgi.multithread": True,
               "wsgi.multiprocess": True, "wsgi.run_once": False}
    started = []
    result = application(environ, lambda status, headers, exc_info=None: started.extend([status, headers]))
    try:
        body = b"".join(result)
    finally:
        result.close()
    return started[0], {k.lower(): v for k, v in started[1]}, body, result


@pytest.fixture
def signals_seen():
    seen = []

    def started(sender, **kwargs):
        seen.append("started")

    def finished(sender, **kwargs):
        seen.append("finished")

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    try:
        yield seen
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)


@pytest.mark.django_db
def test_an_azure_request_runs_no_middleware_but_the_request_signals(signals_seen):
    status, headers, body, _ = call("/devstoreaccount1")  # unsigned: refused by the view, in XML
    assert status.startswith("401 ") and b"<Code>NoAuthenticationInformation</Code>" in body
    # What SecurityMiddleware, XFrameOptionsMiddleware and SessionMiddleware would add (nosniff the
    # door sets itself, with its sandbox: docs/decisions/0038):
    assert not {"x-frame-options", "referrer-policy", "cross-origin-opener-policy", "set-cookie", "vary"} & set(headers)
    assert (headers["content-security-policy"], headers["x-content-type-options"]) == ("sandbox", "nosniff")
    assert signals_seen == ["started", "finished"]  # finished: when the server closes the response

    signals_seen.clear()
    status, headers, _, _ = call("/admin/login/")
    assert status.startswith("200 ") and headers["x-frame-options"] == "DENY"
    assert signals_seen == ["started", "finished"]


def _explodes(request, **kwargs):
    raise RuntimeError("a bug in a view")


def _forgets(request, **kwargs):
    return None


urlpatterns = [path("acct/explodes", _explodes), path("acct/forgets", _forgets)]


@pytest.mark.django_db
@pytest.mark.urls(__name__)
def test_what_an_azure_view_raises_becomes_djangos_response_for_it(signals_seen, caplog):
    status, _, _, _ = call("/acct/explodes")
    assert status.startswith("500 ")
    assert any("a bug in a view" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)
    status, _, _, _ = call("/acct/forgets")  # a view that answers nothing is a bug too
    assert status.startswith("500 ")
    status, _, _, _ = call("/acct/nowhere")  # no such URL
    assert status.startswith("404 ")
    assert signals_seen == ["started", "finished"] * 3
