"""The credential gate in front of the lease lane (serving/admission.py)
opens only on a database error, and what it lets through while open is
bounded; refusals are counted per IPv4 address, per IPv6 /64, and across
all addresses together (issue 48, points 4 and 6)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from django import db

from leases.auth import principals

pytestmark = pytest.mark.also_postgres

SCOPE = {"path": "/api/v1/leases/acquire/devstoreaccount1/c/b"}
UNKNOWN = "lh_" + "x" * 43  # a token never seen: needs a read


def test_buckets_by_ipv4_address_and_ipv6_slash_64():
    from serving.admission import bucket_of

    assert bucket_of("127.0.0.7") != bucket_of("127.0.0.8")
    assert bucket_of("2001:db8:1:2::1") == bucket_of("2001:db8:1:2:ffff:ffff:ffff:ffff") == "2001:db8:1:2::/64"
    assert bucket_of("2001:db8:1:3::1") != bucket_of("2001:db8:1:2::1")
    assert bucket_of("::ffff:192.0.2.9") == "192.0.2.9"
    assert bucket_of("") == "" and bucket_of("unix") == "unix"


def test_many_addresses_together_are_bounded():
    from serving.admission import FailedRequests

    failed = FailedRequests(rate=50 / 3600, burst=50, total_rate=100 / 3600, total_burst=100)
    taken = [failed.take(f"127.0.0.{n % 200 + 1}") for n in range(400)]
    assert taken[:100] == [True] * 100 and not any(taken[100:])  # each address had 49 left
    assert not failed.has("127.0.1.1") and failed.retry_after() >= 36
    one = FailedRequests(rate=50 / 3600, burst=50)  # no total: an address alone
    assert sum(one.take(f"2001:db8::{n:x}") for n in range(400)) == 50  # all in one /64


@contextlib.contextmanager
def _check(raising):
    def check(request):
        if request.environ.get("HTTP_X_TEST_CHECK"):
            raise raising
        return None

    principals.register(check)
    try:
        yield
    finally:
        principals.CHECKS.remove(check)


def _admission(monkeypatch, burst: int):
    from engines import postgres

    monkeypatch.setattr(postgres, "SERVING", postgres.SERVING)  # undo the wiring's mark (test_async_check.py)
    from config.asgi import DOORS
    from serving.admission import Admission

    return Admission(rate=burst / 3600, burst=burst, read_wait=5, doors={door.name: door for door in DOORS})


def _environ(token: str, address: str = "192.0.2.1", **extra) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}", "REMOTE_ADDR": address, "PATH_INFO": SCOPE["path"], **extra}


def _run(admission, environs: list[dict]) -> list:
    async def admitted():
        return [await admission.admit(SCOPE, environ) for environ in environs]

    try:
        return asyncio.run(admitted())
    finally:
        admission.close()
        admission.reader.shutdown(wait=True)


def _kinds(answers: list) -> list:
    return [answer.split(":")[0] if isinstance(answer, str) else answer[0] for answer in answers]


def test_a_check_that_fails_with_no_database_error_opens_nothing(transactional_db, monkeypatch):
    admission = _admission(monkeypatch, burst=3)
    with _check(OverflowError("date value out of range")):
        answers = _run(admission, [_environ(UNKNOWN, HTTP_X_TEST_CHECK="1")] + [_environ(UNKNOWN)] * 4)
    # The failing request goes to its door alone, charged; the unknown tokens
    # after it are read and refused, then throttled: nobody let through.
    assert _kinds(answers) == ["address", 401, 401, 429, 429]
    assert admission.unread_until == 0.0


def test_a_database_error_lets_requests_through_bounded_and_charged(transactional_db, monkeypatch):
    admission = _admission(monkeypatch, burst=3)
    with _check(db.OperationalError("the database is gone")):
        answers = _run(admission, [_environ(UNKNOWN, HTTP_X_TEST_CHECK="1")] + [_environ(UNKNOWN)] * 4 +
                       [_environ(UNKNOWN, f"192.0.2.{n}") for n in range(2, 200)])
    assert _kinds(answers[:5]) == ["address", "address", "address", 429, 429]
    from serving.admission import UNCHECKED_MAX

    through = _kinds(answers).count("address")
    assert through == UNCHECKED_MAX and set(_kinds(answers)) == {"address", 429}
