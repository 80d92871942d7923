"""Django's check against database calls from async code stays on in the
server (no DJANGO_ALLOW_ASYNC_UNSAFE): the event loop reaches the database
through threads. The check of a lease request's credentials
(serving/admission.py) reads one never seen in its own thread, and answers
from memory on the loop after that."""

from __future__ import annotations

import asyncio
import os

import pytest
from django.core.exceptions import SynchronousOnlyOperation

from leases.models.tokens import ApiToken

pytestmark = pytest.mark.also_postgres

SCOPE = {"path": "/api/v1/leases/acquire/devstoreaccount1/c/b"}


def test_a_database_call_on_the_event_loop_is_refused(transactional_db):
    import serving.asgi  # noqa: F401  the server's modules, loaded: they switch no check off

    assert "DJANGO_ALLOW_ASYNC_UNSAFE" not in os.environ

    async def on_the_loop():
        return ApiToken.objects.count()

    with pytest.raises(SynchronousOnlyOperation):
        asyncio.run(on_the_loop())


def test_a_credential_never_seen_is_read_in_the_admission_thread(transactional_db, django_user_model, monkeypatch):
    from engines import postgres

    # Importing the wiring builds the served application, which marks this
    # process as a server's (bounded statements on PostgreSQL): undone after.
    monkeypatch.setattr(postgres, "SERVING", postgres.SERVING)
    from config.asgi import DOORS
    from serving.admission import Admission

    _, raw = ApiToken.issue(user=django_user_model.objects.create_user("reader"), name="first-seen")
    admission = Admission(rate=50, burst=50, read_wait=5, doors={door.name: door for door in DOORS})

    def environ(token: str) -> dict:
        return {"HTTP_AUTHORIZATION": f"Bearer {token}", "REMOTE_ADDR": "192.0.2.1", "PATH_INFO": SCOPE["path"]}

    async def admitted():
        # A read on the loop would raise SynchronousOnlyOperation, which
        # admit() takes for a failed database: "address:...", not the token.
        return [await admission.admit(SCOPE, environ(raw)),  # read, in the thread
                await admission.admit(SCOPE, environ(raw)),  # remembered, on the loop
                await admission.admit(SCOPE, environ("lh_" + "x" * 43))]  # read, and unknown

    try:
        first, again, unknown = asyncio.run(admitted())
    finally:
        admission.close()
        admission.reader.shutdown(wait=True)
    assert first == again == "token:first-seen"
    assert isinstance(unknown, tuple) and unknown[0] == 401 and b"AuthenticationFailed" in unknown[2]
