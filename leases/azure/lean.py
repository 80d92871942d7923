"""The lean path for the Azure door's hot request, Lease Container and Lease Blob (``PUT
...?comp=lease``), which lease holders send every few seconds: the general path's machinery
(WSGIRequest, URL resolver, DRF's APIView, negotiation, authentication and permission classes) cost
a lease request about as much CPU as its own work, so here the same steps run as plain calls on the
WSGI environ, in the same order, through the same functions, for requests of the usual shape only
(``takes``), whose answers must equal the general path's (tests/azure/test_azure_lean.py
compares them). docs/development/architecture.md ("The lean lease path") lists the steps and the
shape; docs/decisions/0006 says why."""

from __future__ import annotations

import re
from typing import cast
from urllib.parse import unquote_plus

from django.core.handlers.wsgi import get_path_info, get_script_name

from leases import services
from leases.domain import guids, paths, waiting
from leases.services import ResourceRef
from leases.storage import queue_intake
from leases.auth import sharedkey
from leases.auth.sas import SAS_PARAMETERS
from leases.azure import inputs, lease_request
from leases.azure.auth import actor_name, credentials, lease_operation, permit
from leases.azure.exceptions import azure_exception_handler
from leases.operations import handling
from leases.operations.handling import LeanRequest

PATH = paths.RESOURCE_PATH  # /account/container[/blob]
# Query values that need no decoding and that check_query would accept as
# they are (XML-safe, timeout in digits): anything else goes the general way.
PLAIN = re.compile(r"[A-Za-z0-9]{1,32}\Z")
QUERY_NAMES = frozenset({"comp", "restype", "timeout"})
# A SAS parameter as the SDKs send it (percent-encoded); its decoded value
# must be printable ASCII, which check_query accepts as it is.
SAS_VALUE = re.compile(r"[A-Za-z0-9%:.,+_~/=-]{1,512}\Z")


def _query(query_string: str) -> dict | None:
    """The parameters of a query of the lean shape, or None."""
    params = {}
    for pair in query_string.split("&"):
        name, eq, value = pair.partition("=")
        if not eq or name in params:
            return None
        if name in SAS_PARAMETERS:
            if not SAS_VALUE.match(value) or not _printable(unquote_plus(value)):
                return None
        elif name not in QUERY_NAMES or not PLAIN.match(value):
            return None
        params[name] = value
    if params.get("comp") != "lease" or ("timeout" in params and not inputs.DIGITS.match(params["timeout"])):
        return None
    return params


def on_admin_host(environ: dict) -> bool:
    """LEASEHOLD_ADMIN_HOSTS named, and the request is for one of them, where the Azure door answers
    only 400 InvalidUri (handler.py; docs/decisions/0038): not the lean path's."""
    return handling.on_admin_host(environ) is True


def _printable(text: str) -> bool:
    return text.isascii() and text.isprintable()


def takes(environ: dict, body=None) -> tuple[str, str, str | None] | None:
    """``(account, container, blob)`` if this request is one the lean path
    answers exactly as the general path would, else None (``body``: the
    lean path's requests have none, so it is not read)."""
    if environ.get("REQUEST_METHOD") != "PUT" or environ.get("CONTENT_LENGTH", "0") not in ("", "0") \
            or environ.get("HTTP_TRANSFER_ENCODING") or get_script_name(environ) or on_admin_host(environ):
        return None
    params = _query(environ.get("QUERY_STRING", ""))
    if params is None:
        return None
    match = PATH.match(get_path_info(environ))
    if match is None:
        return None
    account, container, blob = match.groups()
    if (params.get("restype") == "container") != (blob is None):  # restype only, and always, on a container
        return None
    return account, container, blob


def serve(environ: dict, names: tuple[str, str, str | None], start_response):
    """The WSGI answer to a lease request ``takes`` accepted (request_started
    is sent by ``checked``; request_finished by the response's close())."""
    response = answer(environ, names)
    start_response(f"{response.status_code} {response.reason_phrase}", list(response.items()))
    return response


class LeaseCall(services.QueuedLeaseCall):
    """One lean lease request in three steps, so that a batch holds the
    writer lock for the lease's own write only:

    * ``LeaseCall(environ, names)`` (``checked``): the checks before the
      write, in the general path's order (header values, x-ms-version,
      SharedKey, whose account keys are read from the database once in a
      while, the URL's account) and the lease headers parsed; a refusal here
      is kept;
    * its write, with the batch's of the write queue (``writes``, ``written``: a lone request
      is a batch of one) -- its result, or its refusal;
    * ``answer()``: the answer, by the one exception handler if refused,
      with the headers every answer carries; 4xx/5xx logged.
    """

    __slots__ = ("environ", "request", "legacy")
    arguments: dict | None  # lease_action's, once the checks passed
    pending: services.LeaseWrite | None  # its write, once made ready
    result: services.LeaseResult | None
    error: Exception | None

    def __init__(self, environ: dict, names: tuple[str, str, str | None]):
        environ["SCRIPT_NAME"] = ""
        self.environ = environ
        self.request = LeanRequest("PUT", "", environ)
        self.request.request_id = request_id = guids.request_id()
        self.arguments = self.pending = self.result = self.error = None
        self.legacy = False
        account, container, blob = names
        try:
            # Decoded as WSGIRequest decodes it; PATH_INFO itself stays as PEP 3333 has
            # it, so a call checked again (a batch the loop handed to the lease thread)
            # decodes the same bytes, whatever the name's characters.
            path = self.request.path = get_path_info(environ)
            inputs.check_header_values(environ)
            self.legacy = lease_request.check_version(environ)
            # SharedKey signed with a key last read: the write checks it is still the account's (services.KeyGone)
            signed_with = None if environ.get(waiting.HEADER_KEY) else sharedkey.lean_signing_key(environ, path, account)
            grant = None if signed_with is not None else credentials(environ, path, account)
            ref = ResourceRef(account, container, blob.replace("\\", "/") if blob is not None else None)
            permit(grant, lease_operation(ref.noun, environ.get("HTTP_X_MS_LEASE_ACTION")))
            who = lease_request.actor(environ, account, request_id, name=actor_name(grant, account))
            self.arguments = lease_request.lease_arguments(environ, ref, who, legacy=self.legacy)
            if signed_with is not None:
                self.arguments["signed_with"] = signed_with
        except Exception as exc:  # noqa: BLE001  (every failure is answered by the one handler)
            self.error = exc


    def key_gone(self, gone: services.KeyGone) -> Exception:
        """The refusal of a key the write found gone: the one the door's own check gives."""
        arguments = cast(dict, self.arguments)  # a write was made: its arguments were
        return sharedkey.refusal_with(self.environ, self.request.path, arguments["ref"].account, gone.keys)

    def answer(self):
        """The HttpResponse, every failure too answered by the one handler."""
        request, environ = self.request, self.environ
        waiting.note(environ, self.error)  # a quiet refusal: the server waits, then asks again
        if self.error is None:
            response = lease_request.lease_response(environ, self.result, legacy=self.legacy)
        else:
            response = azure_exception_handler(self.error, {"view": request, "request": request})
        lease_request.finish(response, environ, request_id=request.request_id, method="PUT")
        if response.status_code >= 400:
            handling.logged(response, request)
        return response


def answer(environ: dict, names: tuple[str, str, str | None]):
    """The answer (an HttpResponse) to a lease request ``takes`` accepted:
    every failure too is an answer, by the one exception handler. A batch of
    one, so that a lone request takes the very code a server's batches take."""
    response, = answer_together([(environ, names)])
    return response


def checked(requests: list[tuple[dict, tuple[str, str, str | None]]]) -> list[LeaseCall]:
    """The LeaseCalls of lease requests received together. First, once, as
    Django's handlers do at a request's start (request_started): close a
    database connection that is broken or too old -- before the checks,
    which may read the database (an account's keys), so that a connection a
    database outage broke is replaced, not used by every request after it."""
    handling.started(requests[0][0])
    with sharedkey.read_once():  # an account's keys read once for the batch
        return [LeaseCall(environ, names) for environ, names in requests]


async def answer_queued(environ: dict, names: tuple[str, str, str | None], *, principal: str, idle,
                        finish=lambda response: response):
    """From the event loop: ``finish`` of the answer (an HttpResponse) to a
    lease request ``takes`` accepted, its write made with others' by the
    write queue (leases/storage/queue_intake.py); None where writes are not
    made together (the general path answers it). ``principal``: who sent it
    (the queue's fair share); ``idle()``: whether it is all the server serves."""
    return await queue_intake.written(checked, (environ, names), principal=principal,
                                      received_at=environ["leasehold.received_at"], idle=idle, finish=finish)


def answer_together(requests: list[tuple[dict, tuple[str, str, str | None]]]) -> list:
    """The answers (HttpResponses) to lease requests received together: the
    checks, the writes made together (queue_intake.write_now), the answers."""
    calls = checked(requests)
    queue_intake.write_now(calls)
    return [call.answer() for call in calls]

