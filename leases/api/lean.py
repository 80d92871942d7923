"""The lean path for the JSON API's lease actions (``POST /api/v1/leases/{action}/...``, leases/api/
lease_actions.py): the DRF view's steps as plain calls on the WSGI environ, in its order and through
the rules both share (lease_request.py: the capability rule, the actor, the conditions, the ids, the
resource and parameters, the body; the remembered bearer token, the rate limit, the one exception
handler), so that a lease request's write joins the server's lease batches instead of taking
Django's handler, middleware, URL resolver and DRF's dispatch alone. Only requests of the usual
shape are taken (``takes``: a bearer token, a JSON object of the expected types, no query, no wait);
a request that fails a check before its write (a token not remembered as usable, a permission
missing, the rate limit reached, a header or a value the view would refuse) is declined (its
``answer()`` is None: nothing counted, nothing written) and the server hands it to the DRF view
unchanged, which stays the reference: tests/api/test_api_lean.py holds the two answers and
histories equal. docs/decisions/0034 says why."""

from __future__ import annotations

import io
from http import HTTPStatus
from typing import cast

from django.conf import settings
from django.core.signals import setting_changed
from django.core.handlers.wsgi import get_path_info, get_script_name
from django.http import HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from rest_framework.renderers import JSONRenderer

from leases import services
from leases.api import lease_request
from leases.api.authentication import BearerUser, usable_token
from leases.api.exceptions import api_exception_handler
from leases.api.lease_actions import ACTION_VIEWS
from leases.auth import bearer
from leases.api.parsers import BoundedJSONParser
from leases.api.resources import validator_headers
from leases.api.serializers import REASON_MAX, json_shape
from leases.api.throttling import COUNTED, PrincipalRateThrottle
from leases.domain import guids, paths, waiting
from leases.domain.errors import LeaseholdError
from leases.operations import handling
from leases.operations.handling import LeanRequest
from leases.storage import queue_intake

API_LEASES = paths.API_LEASES
JSON_TYPES = ("application/json", "application/json; charset=utf-8")
ACCEPTED = ("*/*", "application/json")
_renderer = JSONRenderer()
_parser = BoundedJSONParser()

# Each action's input: the fields the lean path checks (a body naming another, the acquire's wait, is the view's).
SHAPES = {view.action_name: json_shape(view.input_serializer) for view in ACTION_VIEWS}
ALL_FIELDS = {view.action_name: frozenset(view.input_serializer().fields) for view in ACTION_VIEWS}


class Lease:
    """A JSON lease request ``takes`` accepted: its action, resource and body."""

    __slots__ = ("action", "account", "container", "blob", "data")

    def __init__(self, action: str, account: str, container: str, blob: str | None, data: dict):
        self.action, self.account, self.container, self.blob, self.data = action, account, container, blob, data


def takes(environ: dict, body) -> Lease | None:
    """The lease request if it is of the shape the lean path answers as the
    DRF view would (anything else, None: the view answers it)."""
    if environ.get("REQUEST_METHOD") != "POST" or environ.get("QUERY_STRING") or get_script_name(environ) \
            or environ.get("CONTENT_TYPE") not in JSON_TYPES or environ.get("HTTP_ACCEPT", "*/*") not in ACCEPTED \
            or not isinstance(body, bytes) or not body or environ.get("HTTP_TRANSFER_ENCODING") \
            or not environ.get("HTTP_AUTHORIZATION", "").startswith("Bearer ") or _elsewhere(environ):
        return None
    path = get_path_info(environ)
    if not path.startswith(API_LEASES):
        return None
    action, _, rest = path[len(API_LEASES):].partition("/")
    parts = rest.split("/", 2)
    shape = SHAPES.get(action)
    if shape is None or len(parts) < 2 or not all(parts) or rest.endswith("/"):
        return None
    try:
        data = _parser.parse(io.BytesIO(body))
    except Exception:  # noqa: BLE001  the view answers it
        return None
    if not isinstance(data, dict) or not _plain(data, shape, ALL_FIELDS[action]):
        return None
    return Lease(action, parts[0], parts[1], parts[2] if len(parts) == 3 else None, data)


def _elsewhere(environ: dict) -> bool:
    """LEASEHOLD_ADMIN_HOSTS named, and the request is for another host, where the view's
    middleware refuses it (leases/admin/hosts.py; docs/decisions/0038)."""
    return handling.on_admin_host(environ) is False


def _plain(data: dict, shape: dict, known: frozenset) -> bool:
    """Whether the view's input serializer takes ``data`` as it is: each of
    its fields absent, null or of its JSON type (a reason: text of at most
    REASON_MAX characters, trimmed), no field the lean path does not check."""
    for name, value in data.items():
        if name not in shape:
            if name in known:  # a field of another kind (wait): the view's
                return False
            continue  # a name the serializer ignores
        types = shape[name]
        if types is None:
            if not isinstance(value, str) or len(value.strip()) > REASON_MAX:
                return False
        elif value is not None and (isinstance(value, bool) or not isinstance(value, types)):
            return False
    return True


class _Secure:
    """The one thing SecurityMiddleware reads of a request."""

    __slots__ = ("secure",)

    def __init__(self, secure: bool):
        self.secure = secure

    def is_secure(self) -> bool:
        return self.secure


class ApiLeaseCall(services.QueuedLeaseCall):
    """One lean JSON lease request in the three steps of the Azure door's
    (leases/azure/lean.py LeaseCall): the checks (here), the write in
    a batch of the write queue (``writes``, ``written``), ``answer()``. A check that fails
    declines the request: nothing counted, nothing written, no answer here
    (the DRF view answers it)."""

    __slots__ = ("environ", "request", "lease", "declined")

    def __init__(self, environ: dict, lease: Lease):
        self.environ, self.lease = environ, lease
        self.request = LeanRequest("POST", get_path_info(environ), environ, guids.request_id())
        self.arguments: dict | None = None
        self.pending: services.LeaseWrite | None = None
        self.result: services.LeaseResult | None = None
        self.error: Exception | None = None
        self.declined = False
        try:
            asked = self._checked()
        except Exception:  # noqa: BLE001  every failure is answered by the DRF view
            asked = None
        if asked is None:
            self.declined = True
        else:
            self.arguments = asked.arguments()

    def _checked(self) -> lease_request.LeaseRequest | None:
        """The view's steps before its service call, in its order (the pure
        ones before the rate limit, which counts); None: the view's to answer."""
        environ, lease, request = self.environ, self.lease, self.request
        scheme, _, raw = environ["HTTP_AUTHORIZATION"].partition(" ")
        raw = raw.strip()
        perms = lease_request.action_permissions(lease.action, blob=lease.blob is not None)
        if scheme.lower() == "bearer" and bearer.looks_like_jwt(raw):  # an OpenID Connect token: its role
            try:
                user = BearerUser(bearer.verify(raw))
            except bearer.Refused:
                return None  # the view refuses it, and counts the refusal
            if not user.may(perms, lease.account, lease.container, count=False):
                return None
            request.auth, request.user, actor_name = user.principal, user, user.username
        else:
            token = usable_token(raw) if scheme.lower() == "bearer" else None
            if token is None:
                return None
            request.auth, request.user, actor_name = token, token.user, token.actor_name
            if not _has_perms(token.user, perms):
                return None
        checked = lease_request.conditions(environ)
        who = lease_request.actor(environ, actor_name, request.request_id)
        asked = lease_request.lease_request(environ, lease.action, lease_request.resource(
            lease.account, lease.container, lease.blob), who, checked, lease.data)
        # Never waits for the counter file (the event loop may run this): busy, it is the view's to count.
        if not PrincipalRateThrottle(waits=False).allow_request(request, None):
            return None
        environ[COUNTED] = True  # checked again (the loop could not write it at once): not counted again
        return asked

    def answer(self) -> HttpResponse | LeanAnswer | None:
        """The answer as the DRF view, Django's middleware and handler would
        send it; None if declined (the view answers it)."""
        if self.declined:
            return None
        request, action, environ = self.request, self.lease.action, self.environ
        secure = environ.get("wsgi.url_scheme") == "https"
        if self.error is None:
            result = cast(services.LeaseResult, self.result)  # settled: no error, so a result
            content = _renderer.render(lease_request.result_body(action, result))
            headers = [("Content-Type", "application/json"), *validator_headers(result.resource).items(),
                       *_view_headers(request, environ), *_middleware_headers(secure, content)]
            return LeanAnswer(services.SUCCESS_STATUS[action], headers, content)
        if isinstance(self.error, LeaseholdError):
            waiting.note(environ, self.error)
        response = api_exception_handler(self.error, {"view": request, "request": request})
        for name, value in _view_headers(request, environ):
            response[name] = value
        for name, value in _middleware_headers(secure, response.content):
            response[name] = value
        handling.logged(response, request)
        return response


class LeanAnswer:
    """A success answer, as the front reads an HttpResponse (status_code,
    items(), the content by iteration): its headers built as a list once,
    not set one by one with Django's checks, which cost as much as the
    rest of the answer."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status: int, headers: list[tuple[str, str]], content: bytes):
        self.status_code, self.headers, self.content = status, headers, content

    @property
    def reason_phrase(self) -> str:
        return HTTPStatus(self.status_code).phrase

    def items(self) -> list[tuple[str, str]]:
        return self.headers

    def __iter__(self):
        yield self.content

    def close(self) -> None:
        pass


def _view_headers(request: LeanRequest, environ: dict) -> list[tuple[str, str]]:
    """The headers DRF's view adds (finalize_response, ApiMixin's)."""
    return [("Allow", lease_request.ALLOW), *lease_request.response_ids(environ, request.request_id)]


def _has_perms(user, perms: tuple[str, ...]) -> bool:
    """``user.has_perms(perms)``, answered once per remembered user: the
    user usable_token shares is read only, its permissions loaded before it
    is shared (leases/api/authentication.py), so the answer cannot change
    while it is remembered; a user looked up again starts afresh."""
    answers = user.__dict__.setdefault("_leasehold_lean_perms", {})
    allowed = answers.get(perms)
    if allowed is None:
        allowed = answers[perms] = user.has_perms(perms)
    return allowed


_added: dict[bool, list[tuple[str, str]]] = {}  # https? -> the headers the middleware adds to a JSON answer


def _middleware_headers(secure: bool, content: bytes) -> list[tuple[str, str]]:
    """The headers Django's middleware adds to a JSON answer, in its order
    (config/settings.py MIDDLEWARE, answered last to first): found once by
    the middleware itself (again after a setting changes), the length the
    only one that depends on the answer."""
    added = _added.get(secure)
    if added is None:
        probe = HttpResponse(b"", content_type="application/json")
        before = set(probe.headers)
        XFrameOptionsMiddleware(lambda request: None).process_response(None, probe)
        probe["Content-Length"] = "0"  # CommonMiddleware's, where it comes
        SecurityMiddleware(lambda request: None).process_response(_Secure(secure), probe)
        added = _added[secure] = [(name, value) for name, value in probe.items() if name not in before]
    return [(name, str(len(content))) if name == "Content-Length" else (name, value) for name, value in added]


def _forget_middleware_headers(**kwargs) -> None:
    _added.clear()


setting_changed.connect(_forget_middleware_headers, dispatch_uid="api-lean-middleware-headers")


def checked(requests: list[tuple[dict, Lease]]) -> list[ApiLeaseCall]:
    """The calls of JSON lease requests received together; first, as
    Django's handler does at a request's start (request_started), a broken
    or old database connection closed (as leases/azure/lean.checked)."""
    handling.started(requests[0][0])
    return [ApiLeaseCall(environ, lease) for environ, lease in requests]


async def answer_queued(environ: dict, lease: Lease, *, principal: str, idle, finish=lambda response: response):
    """From the event loop: ``finish`` of the answer to a JSON lease request
    ``takes`` accepted (None if declined), its write made with others' by the
    write queue (leases/storage/queue_intake.py); None where writes are not
    made together (the DRF view answers it). ``principal``: who sent it (the
    queue's fair share); ``idle()``: whether it is all the server serves."""
    return await queue_intake.written(checked, (environ, lease), principal=principal,
                                      received_at=environ["leasehold.received_at"], idle=idle, finish=finish)


def usable() -> bool:
    """Whether the lean path may answer here: Django's security middleware
    redirects nothing and trusts no proxy header for https."""
    return not settings.SECURE_SSL_REDIRECT and not settings.SECURE_PROXY_SSL_HEADER
