"""The lean lease path checks a SharedKey request's signature against the account's keys it last
read, and its write checks, in the write's own snapshot, that the signing key is still one of the
account's (leases/services/lease_rows.py, KeyGone). A key changed between the two is refused as the
door refuses a key that does not sign, 403 AuthenticationFailed with the same body as the general
path's, and the write is rolled back: no history event, no lease, no tenure. Checked before the row's
lease is looked at (a held lease, a bad action, a missing blob: still 403, nothing recorded)."""

from __future__ import annotations

import base64
import re

import pytest

from leases.auth import sharedkey
from leases.azure import lean as azure_lean
from leases.azure.handler import AzureDoorHandler
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from leases.models import Account, Blob, Container, LeaseEvent, Tenure
from leases.storage import queue_intake
from tests.azure.test_azure_lean import A, B, BLOB, CONTAINER, _answer, environ, fast_state, lease  # noqa: F401

pytestmark = [pytest.mark.also_postgres, pytest.mark.usefixtures("fast_state")]

NEW_KEY = base64.b64encode(b"the key after the change, 32 b..").decode()
VOLATILE = re.compile(rb"RequestId:[0-9a-f-]+|<(RequestId|Time)>[^<]*</\1>")  # drawn per request


def _state() -> tuple:
    leases = sorted((str(o.lease_id), o.lease_generation) for o in [*Blob.objects.all(), *Container.objects.all()])
    return LeaseEvent.objects.count(), Tenure.objects.count(), leases


def _lean_checked_then_written(env: dict, change_key) -> tuple[int, dict, bytes]:
    names = azure_lean.takes(dict(env))
    assert names is not None
    [call] = azure_lean.checked([(env, names)])
    assert call.error is None and call.arguments is not None
    assert call.arguments.get("signed_with") == DEV_KEY  # checked against the keys last read, not read again
    change_key()
    queue_intake.write_now([call])
    response = call.answer()
    return response.status_code, dict(response.items()), response.content


@pytest.mark.parametrize("path, spec", [
    lease(BLOB, "acquire", duration=15, proposed=A),
    lease(CONTAINER, "acquire", duration=-1, proposed=B),
    lease(BLOB, "bogus"),  # refused before the row is read: the key is still checked first
    lease(BLOB, "renew", lease_id=B),  # a lease the request does not hold
    lease("/devstoreaccount1/fast/nothing", "acquire", duration=15),  # no such blob
    lease("/devstoreaccount1/nowhere", "acquire", duration=15),  # no such container
])
def test_a_key_changed_before_the_write_refuses_it_as_the_general_path_does(path, spec):
    sharedkey.account_keys(DEV_ACCOUNT)  # the keys last read in this process: the old one
    before = _state()
    env = environ(path, **spec)
    status, headers, body = _lean_checked_then_written(
        env, lambda: Account.objects.filter(name=DEV_ACCOUNT).update(key1=NEW_KEY))
    general_status, general_headers, general_body = _answer(AzureDoorHandler(), environ(path, **spec))
    assert (status, headers["x-ms-error-code"]) == (403, "AuthenticationFailed"), body
    assert general_status.startswith("403") and dict(general_headers)["x-ms-error-code"] == "AuthenticationFailed"
    assert VOLATILE.sub(b"", body).decode() == VOLATILE.sub(b"", general_body).decode()
    assert _state() == before  # nothing written, nothing recorded
    assert sharedkey.known_account_keys(DEV_ACCOUNT) == ((NEW_KEY,), DEV_ACCOUNT)  # the keys the write read
    new = environ(path, **{**spec, "key": NEW_KEY})
    names = azure_lean.takes(dict(new))
    assert names is not None
    assert azure_lean.answer(new, names).status_code != 403  # the new key is taken at once


def test_the_other_key_kept_still_signs():
    """Key 1 rotated while key 2 signs: a key still among the account's is not refused."""
    Account.objects.filter(name=DEV_ACCOUNT).update(key2=DEV_KEY)
    sharedkey.account_keys(DEV_ACCOUNT)
    path, spec = lease(BLOB, "acquire", duration=15, proposed=A)
    status, _, body = _lean_checked_then_written(
        environ(path, **spec), lambda: Account.objects.filter(name=DEV_ACCOUNT).update(key1=NEW_KEY))
    assert status == 201, body
    assert Blob.objects.get(name="item.bin").lease_id is not None
