"""One lease, two doors: a lease taken through the JSON API is seen,
renewed and released through the Azure endpoint (the official SDK against
the live server), and the reverse; both doors refuse alike."""

from __future__ import annotations

import pytest
import requests
from azure.core.exceptions import HttpResponseError, ResourceExistsError
from azure.storage.blob import BlobLeaseClient

from leases.domain import fingerprints
from leases.models import LeaseEvent
from leases.models.tokens import ApiToken
from tests.api.helpers import API, DEV_ACCOUNT, make_user
from tests.sdk_errors import sdk_error_code

BLOB = f"{DEV_ACCOUNT}/shared/locks/job.lock"
CONTAINER = f"{DEV_ACCOUNT}/shared"


@pytest.fixture
def json_api(azure_server, service):
    """requests against the JSON API of the live server, as a superuser's
    token; the SDK has created the container and blob first."""
    service.create_container("shared").upload_blob("locks/job.lock", b"")
    _, raw = ApiToken.issue(user=make_user("ops", superuser=True), name="ops")
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {raw}"

    def call(method: str, path: str, body: dict | None = None) -> requests.Response:
        return session.request(method, f"{azure_server}{API}/{path}", json=body, timeout=10)

    return call


def test_a_json_lease_is_seen_renewed_and_released_by_the_sdk(json_api, service, clock):
    acquired = json_api("POST", f"leases/acquire/{BLOB}", {"duration": 15})
    assert acquired.status_code == 201
    lease_id = acquired.json()["lease_id"]
    blob = service.get_blob_client("shared", "locks/job.lock")
    props = blob.get_blob_properties()
    assert (props.lease.state, props.lease.status, props.lease.duration) == ("leased", "locked", "fixed")
    with pytest.raises(ResourceExistsError) as refused:  # the SDK cannot take it...
        blob.acquire_lease(lease_duration=15)
    assert sdk_error_code(refused.value) == "LeaseAlreadyPresent"
    clock.advance(16)
    assert blob.get_blob_properties().lease.state == "expired"
    sdk_lease = BlobLeaseClient(blob, lease_id=lease_id)  # ...but may use the id it was given
    sdk_lease.renew()
    assert json_api("GET", f"blobs/{BLOB}").json()["lease"]["state"] == "leased"
    sdk_lease.release()
    assert json_api("GET", f"blobs/{BLOB}").json()["lease"]["state"] == "available"
    vias = list(LeaseEvent.objects.filter(outcome="success").order_by("id").values_list("action", "via"))
    assert vias == [("acquire", "api"), ("renew", "azure"), ("release", "azure")]


def test_an_sdk_lease_is_seen_renewed_changed_and_released_by_json(json_api, service, clock):
    container = service.get_container_client("shared")
    sdk_lease = container.acquire_lease(lease_duration=-1)
    detail = json_api("GET", f"containers/{CONTAINER}").json()["lease"]
    assert (detail["state"], detail["duration"], detail["lease_fingerprint"]) == (
        "leased", "infinite", fingerprints.of(sdk_lease.id))
    assert detail["last_holder"]["actor"] == f"account:{DEV_ACCOUNT}"
    refused = json_api("POST", f"leases/acquire/{CONTAINER}", {"duration": 15})
    assert (refused.status_code, refused.json()["code"], refused.json()["retry_after"]) == (
        409, "LeaseAlreadyPresent", None)
    assert json_api("POST", f"leases/renew/{CONTAINER}", {"lease_id": sdk_lease.id}).status_code == 200
    new_id = "3c7e72eb-b430-4526-bc53-d8ecef03798f"
    changed = json_api("POST", f"leases/change/{CONTAINER}", {"lease_id": sdk_lease.id, "proposed_lease_id": new_id})
    assert changed.status_code == 200
    with pytest.raises(HttpResponseError) as stale:  # the SDK's old id no longer holds it
        sdk_lease.renew()
    assert sdk_error_code(stale.value) == "LeaseIdMismatchWithLeaseOperation"
    assert json_api("POST", f"leases/release/{CONTAINER}", {"lease_id": new_id}).status_code == 200
    assert container.get_container_properties().lease.state == "available"


def test_a_json_break_is_seen_by_the_sdk(json_api, service, clock):
    clock.freeze()
    blob = service.get_blob_client("shared", "locks/job.lock")
    sdk_lease = blob.acquire_lease(lease_duration=60)
    broken = json_api("POST", f"leases/break/{BLOB}", {"break_period": 10})
    assert (broken.status_code, broken.json()["lease_time"]) == (202, 10)
    props = blob.get_blob_properties()
    assert (props.lease.state, props.lease.status) == ("breaking", "locked")
    clock.advance(10)
    assert blob.get_blob_properties().lease.state == "broken"
    sdk_lease.release()


def test_both_doors_refuse_a_leased_delete_alike(json_api, service):
    blob = service.get_blob_client("shared", "locks/job.lock")
    sdk_lease = blob.acquire_lease(lease_duration=15)
    response = json_api("DELETE", f"blobs/{BLOB}")
    assert (response.status_code, response.json()["code"]) == (412, "LeaseIdMissing")
    with pytest.raises(HttpResponseError) as refused:
        blob.delete_blob()
    assert (refused.value.status_code, sdk_error_code(refused.value)) == (412, "LeaseIdMissing")
    assert json_api("DELETE", f"blobs/{BLOB}?lease_id={sdk_lease.id}").status_code == 202
    assert not blob.exists()
