"""The floor under the Azure door's latency: what the fixed stack (Python, uvicorn, httptools, uvloop)
costs a lease request that does no work at all.

    .venv/bin/python bench/run.py --scenarios cycle-1,cycle-16 --rounds 5 \\
        --leasehold-cmd ".venv/bin/python -m uvicorn bench.floor_asgi:app --host {host} --port {port} \\
                         --loop uvloop --http httptools --workers 2 --no-access-log"

An ASGI application that reads each request whole and answers it as the Azure
door's usual answer is shaped (the status, the lease id, a Date, an ETag and
the version headers), with no signature checked, no state kept and nothing
written; with FLOOR_FSYNC=1 each lease action also appends a record to a file
and fdatasyncs it, the least a durable answer costs. bench/run.py drives it
as it drives Leasehold, against Azurite, so that the ratio a server built on
this stack cannot beat is a figure, not a guess.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from email.utils import formatdate

FSYNC = os.environ.get("FLOOR_FSYNC") == "1"
_log = os.open(os.path.join(tempfile.gettempdir(), f"floor-{os.getpid()}.log"),
               os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if FSYNC else -1

STATUS = {b"acquire": 201, b"renew": 200, b"release": 200, b"change": 200, b"break": 202}


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    more = True
    while more:  # the body whole, as Leasehold's front reads it
        message = await receive()
        more = message.get("more_body", False)
    headers = dict(scope["headers"])
    action = headers.get(b"x-ms-lease-action")
    status = STATUS.get(action, 201) if action else 201
    answer = [(b"date", formatdate(usegmt=True).encode()), (b"etag", b'"0x8D000000000000"'),
              (b"x-ms-request-id", str(uuid.uuid4()).encode()), (b"x-ms-version", b"2021-12-02"),
              (b"content-length", b"0")]
    if action in (b"acquire", b"renew", b"release", b"change"):
        lease_id = headers.get(b"x-ms-proposed-lease-id") or headers.get(b"x-ms-lease-id") or b""
        answer.append((b"x-ms-lease-id", lease_id))
        if FSYNC:
            os.write(_log, action + b" " + lease_id + b"\n")
            os.fdatasync(_log)
    elif action == b"break":
        answer.append((b"x-ms-lease-time", b"0"))
    await send({"type": "http.response.start", "status": status, "headers": answer})
    await send({"type": "http.response.body", "body": b""})
