"""Smaller refusals of hostile input to the JSON API, each decided as Azure documents it."""

from __future__ import annotations

from leases.models import Blob, LeaseEvent
from tests import azure_raw
from tests.api.helpers import API, DEV_ACCOUNT, make_blob, make_container, make_user, token_client

# Not run again on PostgreSQL: each refusal is decided before the services; the recording of
# refusals runs there in the history's tests (docs/development/tests.md, "Which modules run on PostgreSQL").


def test_a_token_that_may_not_read_the_history_cannot_fill_it_with_refusals(accounts):
    nobody = token_client(make_user("nobody"), "nobody")
    for method in ("post", "put", "delete"):
        answer = getattr(nobody, method)(f"{API}/events/")
        assert answer.status_code == 403 and answer.json()["code"] == "AuthorizationPermissionMismatch"
    assert not LeaseEvent.objects.filter(resource_type="history").exists()
    auditor = token_client(make_user("auditor", "leases.view_leaseevent"), "auditor")
    assert auditor.delete(f"{API}/events/").status_code == 405  # who may read it: refused and recorded
    assert LeaseEvent.objects.filter(resource_type="history", action="history-delete", outcome="refused").count() == 1


def test_the_415_message_names_the_media_type(api, accounts):
    make_container("box")
    answer = api.post(f"{API}/leases/acquire/{DEV_ACCOUNT}/box", "duration=15", content_type="text/plain")
    assert answer.status_code == 415
    message = answer.json()["message"]
    assert "{media_type}" not in message and "text/plain" in message


def test_restype_container_on_a_blobs_url_is_refused_and_leases_nothing(azure_server):
    make_container("box")
    make_blob("box", "b")
    answer = azure_raw.signed("PUT", azure_server, f"/{DEV_ACCOUNT}/box/b?comp=lease&restype=container",
                              headers={"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15"})
    assert answer.status_code == 400 and answer.headers["x-ms-error-code"] == "InvalidQueryParameterValue"
    assert "<QueryParameterName>restype</QueryParameterName>" in answer.text
    assert Blob.objects.get(name="b").lease_state == "available"
    refused = LeaseEvent.objects.get(blob="b", outcome="refused")  # a lease attempt: recorded, as every refusal
    assert (refused.action, refused.error_code) == ("acquire", "InvalidQueryParameterValue")
