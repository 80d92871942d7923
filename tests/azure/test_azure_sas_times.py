"""A SAS's signed times (st, se) and a stored access policy's (Set Container
ACL) are refused cleanly whatever they hold: a far UTC offset on year 1 or
9999 (outside what a time holds in UTC), a leap second, garbage. The parser
is fuzzed against a reference; the door answers 403 AuthenticationFailed for
a SAS field and 400 InvalidXmlDocument for an ACL body, never a 500
(issue 48, point 4)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import requests
from azure.storage.blob import (AccountSasPermissions, BlobSasPermissions, ResourceTypes, generate_account_sas,
                                generate_blob_sas)
from hypothesis import given, settings
from hypothesis import strategies as st

from leases.auth import sas
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from leases.models import LeaseEvent
from tests import azure_raw

FAR = ("9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "9999-12-31T23:00:00-01:00",
       "0001-01-01T00:59:59.9999999+01:00")


def _reference(year, month, day, hour, minute, second, fraction, zone) -> datetime | None:
    """The time these fields name, in UTC, by plain arithmetic, or None."""
    if zone is None and hour is not None:
        return None
    offset = 0 if zone in (None, "Z") else (int(zone[1:3]) * 60 + int(zone[4:6])) * (1 if zone[0] == "+" else -1)
    if abs(offset) >= 24 * 60:
        return None
    try:
        naive = datetime(year, month, day, hour or 0, minute or 0, second or 0,
                         int((fraction or "0").ljust(6, "0")[:6]))
        return (naive - timedelta(minutes=offset)).replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError):
        return None


# Offsets mostly as Azure's clients write them (under 24 h), some past any bound.
hours, minutes = (st.sampled_from([23, 1]) | st.integers(0, 23) | st.integers(0, 99),
                  st.sampled_from([59, 0]) | st.integers(0, 99))
offsets = st.tuples(st.sampled_from("+-"), hours, minutes).map(lambda z: f"{z[0]}{z[1]:02d}:{z[2]:02d}")
zones = st.one_of(st.none(), st.just("Z"), offsets, offsets)


@st.composite
def signed_times(draw):
    edges = st.sampled_from([(1, 1, 1), (9999, 12, 31), (2, 1, 1), (9998, 12, 31), (2024, 2, 29), (2023, 2, 29)])
    year, month, day = draw(edges | st.tuples(st.integers(1, 9999), st.integers(0, 13), st.integers(0, 32)))
    text = f"{year:04d}-{month:02d}-{day:02d}"
    fields: list = [None, None, None, None]
    if draw(st.booleans()):
        fields[0], fields[1] = draw(st.integers(0, 25)), draw(st.integers(0, 61))
        text += f"T{fields[0]:02d}:{fields[1]:02d}"
        if draw(st.booleans()):
            fields[2] = draw(st.sampled_from([0, 59, 60, 61]) | st.integers(0, 61))  # 60: a leap second
            text += f":{fields[2]:02d}"
            if draw(st.booleans()):
                fields[3] = draw(st.from_regex(r"[0-9]{1,7}", fullmatch=True))
                text += f".{fields[3]}"
    zone = draw(zones)
    if fields[0] is not None and zone is not None:
        text += zone
    elif zone is not None and draw(st.booleans()):
        text += zone  # a zone on a bare date: not a form Azure takes
        return text, None
    return text, _reference(year, month, day, fields[0], fields[1], fields[2], fields[3],
                            zone if fields[0] is not None else None)


@settings(max_examples=600, deadline=None)
@given(signed_times())
def test_signed_times_parse_as_plain_arithmetic_says_or_not_at_all(case):
    text, expected = case
    assert sas.parse_time(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=48) | st.binary(max_size=48).map(lambda b: b.decode("latin-1")))
def test_any_text_is_a_time_or_none(text):
    found = sas.parse_time(text)
    assert found is None or found.utcoffset() == timedelta(0)


@pytest.mark.parametrize("text", FAR)
def test_far_offsets_are_no_time(text):
    assert sas.parse_time(text) is None


@pytest.fixture
def box(service):
    container = service.create_container("box")
    container.upload_blob("item.bin", b"content")
    return container


def _future() -> datetime:
    return datetime.now(timezone.utc) + timedelta(hours=1)


def _tokens(field: str, value: str) -> list[str]:
    """A blob SAS and an account SAS, each signed with the account key, whose ``field`` is ``value``."""
    times = {"expiry": value} if field == "se" else {"start": value, "expiry": _future()}
    blob = generate_blob_sas(DEV_ACCOUNT, "box", "item.bin", account_key=DEV_KEY,
                             permission=BlobSasPermissions(read=True, write=True), **times)
    account = generate_account_sas(DEV_ACCOUNT, DEV_KEY, ResourceTypes(object=True),
                                   AccountSasPermissions(read=True, write=True), **times)
    return [blob, account]


@pytest.mark.parametrize("field, value", [("se", FAR[0]), ("st", FAR[1]), ("se", "2016-12-31T23:59:60Z")])
def test_a_far_offset_sas_is_refused_403_on_a_lease_and_on_a_read(box, azure_server, field, value):
    for token in _tokens(field, value):
        url = f"{azure_server}/{DEV_ACCOUNT}/box/item.bin"
        for response in (requests.put(f"{url}?comp=lease&{token}", timeout=10, headers={
                            "x-ms-version": "2025-11-05", "x-ms-lease-action": "acquire", "x-ms-lease-duration": "15"}),
                         requests.get(f"{url}?{token}", timeout=10, headers={"x-ms-version": "2025-11-05"})):
            assert (response.status_code, azure_raw.error_code(response)) == (403, "AuthenticationFailed"), \
                response.text
            assert "Signature fields not well formed." in response.text
    assert not LeaseEvent.objects.exists()


@pytest.mark.parametrize("start, expiry", [("", FAR[0]), (FAR[1], ""), ("", FAR[2]), (FAR[3], "2030-01-01T00:00:00Z")])
def test_set_container_acl_refuses_a_far_offset_400(box, azure_server, start, expiry):
    policy = (f"<Start>{start}</Start>" if start else "") + (f"<Expiry>{expiry}</Expiry>" if expiry else "")
    body = (f"<SignedIdentifiers><SignedIdentifier><Id>far</Id><AccessPolicy>{policy}<Permission>r</Permission>"
            "</AccessPolicy></SignedIdentifier></SignedIdentifiers>").encode()
    response = azure_raw.signed("PUT", azure_server, f"/{DEV_ACCOUNT}/box?restype=container&comp=acl", body=body)
    assert (response.status_code, azure_raw.error_code(response)) == (400, "InvalidXmlDocument"), response.text
    assert box.get_container_access_policy()["signed_identifiers"] == []


SAS_FIELDS = {"sv": ["2012-02-12", "2013-08-15", "2015-04-05", "2025-11-05", "9999-99-99", ""],
              "sr": ["b", "c", "bs", ""], "sp": ["r", "rw", "", "zz"], "ss": ["b", ""], "srt": ["o", "sco", ""],
              "sip": ["127.0.0.1", "127.0.0.1-127.0.0.9", "9.9.9.9-1.1.1.1", "::1", "1.2.3.4-", ""],
              "spr": ["https", "https,http", "http", ""], "si": ["p", ""], "rsct": ["text/plain", ""]}


@settings(max_examples=400, deadline=None)
@given(st.fixed_dictionaries({}, optional={name: st.sampled_from(values) | st.text(max_size=24)
                                           for name, values in SAS_FIELDS.items()}),
       st.sampled_from(FAR + ("2030-01-01", "2030-01-01T00:00:00Z", "", "0000-00-00")) | st.text(max_size=40),
       st.sampled_from(FAR + ("2020-01-01", "")) | st.text(max_size=40), st.booleans())
def test_any_sas_is_a_grant_or_an_azure_refusal(fields, expiry, start, signed):
    """sas.verify answers a grant or raises Azure's error (LeaseholdError),
    whatever the fields hold, signed or not: never another exception."""
    from urllib.parse import urlencode

    from leases.auth.sharedkey import sign
    from leases.domain.errors import LeaseholdError

    params = {**fields, "se": expiry, "st": start, "sig": "x"}
    environ = {"QUERY_STRING": urlencode(params), "REMOTE_ADDR": "127.0.0.1", "wsgi.url_scheme": "http"}
    if signed:  # the signature the server computes, so that the checks after it run too
        try:
            sas.verify(environ, DEV_ACCOUNT, "box", "item.bin", keys=lambda name: ([DEV_KEY], name), policy=lambda *a: None)
        except LeaseholdError as err:
            text = (err.detail or {}).get("AuthenticationErrorDetail", "")
            if text.startswith("Signature did not match. String to sign used was "):
                params["sig"] = sign(DEV_KEY, text[len("Signature did not match. String to sign used was "):])
                environ["QUERY_STRING"] = urlencode(params)
    try:
        grant = sas.verify(environ, DEV_ACCOUNT, "box", "item.bin", keys=lambda name: ([DEV_KEY], name),
                           policy=lambda *a: sas.Policy(None, None, "r"))
    except LeaseholdError as err:
        assert 400 <= err.status < 500
    else:
        assert grant.account == DEV_ACCOUNT
