"""Requests serving refuses (the front's size limits before routing, a flood past its address's
bound at the credential gate) are answered by their door, in its shape: the Azure door's XML error
(a throttle as Azure's 503 ServerBusy), the JSON API's error body under /api/ (429); serving says
only what with (leases/domain/refusals.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

AZURE_LEASE = "/devstoreaccount1/c/b"
API_LEASE = "/api/v1/leases/acquire/devstoreaccount1/c/b"


@pytest.fixture
def doors(monkeypatch):
    from engines import postgres

    monkeypatch.setattr(postgres, "SERVING", postgres.SERVING)  # undo the wiring's mark (test_async_check.py)
    from config.asgi import DOORS
    from serving import front

    monkeypatch.setattr(front, "_doors", {door.name: door for door in DOORS})
    return front._doors


def _parts(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines[1:])}
    assert int(headers["content-length"]) == len(body) and headers["connection"] == "close"
    return int(lines[0].split(" ")[1]), headers, body


@pytest.mark.parametrize("status, code", [(431, "RequestHeaderFieldsTooLarge"), (414, "RequestUriTooLong")])
def test_the_fronts_refusals_take_their_doors_shape_by_the_url(doors, status, code):
    from leases.domain.refusals import Refusal
    from serving import front

    refused = Refusal(*(front.HEADERS_TOO_BIG if status == 431 else front.URL_TOO_LONG))
    got, headers, body = _parts(front.refusal(AZURE_LEASE.encode() + b"?comp=lease", refused))
    assert (got, headers["x-ms-error-code"], headers["content-type"]) == (status, code, "application/xml")
    assert body.decode("utf-8-sig").startswith(f'<?xml version="1.0" encoding="utf-8"?><Error><Code>{code}</Code>'
                                               f"<Message>{refused.message}\nRequestId:{headers['x-ms-request-id']}")
    got, headers, body = _parts(front.refusal(API_LEASE.encode(), refused))
    assert (got, headers["content-type"]) == (status, "application/json")
    assert json.loads(body) == {"code": code, "message": refused.message, "request_id": headers["x-request-id"]}


def test_a_flood_past_its_bound_is_refused_in_its_doors_shape(doors):
    from serving.admission import BUSY_MESSAGE, Admission

    admission = Admission(rate=1 / 3600, burst=0, read_wait=5, doors=doors)  # every refusal past the bound

    async def refused(path: str):
        return await admission.admit({"path": path}, {"PATH_INFO": path, "REMOTE_ADDR": "192.0.2.9",
                                                      "REQUEST_METHOD": "PUT", "QUERY_STRING": "comp=lease"})

    try:
        azure, api = asyncio.run(refused(AZURE_LEASE)), asyncio.run(refused(API_LEASE))
    finally:
        admission.close()
    assert azure.pause == api.pause == admission.pause > 0  # both held back before they are sent
    headers = {name.decode().lower(): value.decode() for name, value in azure.headers}
    assert (azure.status, headers["x-ms-error-code"], headers["retry-after"]) == (503, "ServerBusy", "3600")
    assert headers["x-ms-version"] and int(headers["content-length"]) == len(azure.body)
    assert f"<Code>ServerBusy</Code><Message>{BUSY_MESSAGE}\n".encode() in azure.body
    headers = {name.decode().lower(): value.decode() for name, value in api.headers}
    assert (api.status, headers["retry-after"], headers["content-type"]) == (429, "3600", "application/json")
    assert json.loads(api.body) == {"code": "TooManyRequests", "message": BUSY_MESSAGE,
                                    "request_id": headers["x-request-id"]}
