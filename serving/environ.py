"""A request received whole by the ASGI front (serving/asgi.py), as the WSGI
environ Django's handlers and the Azure door's lean path read."""

from __future__ import annotations

import io
import sys

from leases import conf
from leases.operations import timing
from serving import forwarded
from serving.front import RAW_HEADERS


def wsgi_environ(scope, body, length: int) -> dict:
    """A WSGI environ as PEP 3333 has it (strings are latin-1 decoded bytes)."""
    query = scope["query_string"].decode("latin-1")
    raw_path = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    server = scope.get("server") or ("127.0.0.1", 80)
    client = scope.get("client") or ("", 0)
    environ = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": "",
        "PATH_INFO": scope["path"].encode("utf-8").decode("latin-1"),
        "QUERY_STRING": query,
        "RAW_URI": raw_path + ("?" + query if query else ""),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": "HTTP/" + scope.get("http_version", "1.1"),
        "REMOTE_ADDR": str(client[0]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body if not isinstance(body, bytes) else io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        # The header pairs as the client sent them, names in their case
        # (serving/front.py keeps it), in order: a WSGI environ keeps neither
        # case nor order. A front that keeps no case gives scope["headers"].
        "leasehold.raw_headers": (scope.get("extensions") or {}).get(RAW_HEADERS) or scope["headers"],
        # The bench's timing record (leases/operations/timing.py), if its wrapper put one in the scope.
        timing.KEY: scope.get(timing.KEY),
    }
    for name, value in scope["headers"]:
        key = name.decode("latin-1").upper().replace("-", "_")
        if key == "CONTENT_LENGTH":
            # The length actually received (the body is whole by now). A
            # request that announced none keeps none, and a chunked one keeps
            # its Transfer-Encoding: Put Blob refuses both with 411, as Azure.
            environ["CONTENT_LENGTH"] = str(length)
            continue
        if key == "TRANSFER_ENCODING":
            # Kept, without inventing a Content-Length: SharedKey signs the
            # length the client sent (none), and Django then reads no body
            # (under WSGI a request without a Content-Length has none).
            environ["HTTP_TRANSFER_ENCODING"] = value.decode("latin-1")
            continue
        if key == "CONTENT_TYPE":
            environ["CONTENT_TYPE"] = value.decode("latin-1")
            continue
        key = "HTTP_" + key
        value = value.decode("latin-1")
        environ[key] = environ[key] + "," + value if key in environ else value
    own = conf.current()
    if own.trusted_proxies:  # the client's address and scheme, as a trusted proxy forwards them
        environ["REMOTE_ADDR"], scheme = forwarded.client(environ["REMOTE_ADDR"], environ, own.trusted_proxies,
                                                          own.forwarded_header)
        environ["wsgi.url_scheme"] = scheme or environ["wsgi.url_scheme"]
    return environ
