"""Lease actions through the JSON API: success codes and bodies, every
refusal with its Azure code, and what the lease history records."""

from __future__ import annotations

import io
import uuid

import pytest

from leases.domain import fingerprints
from leases import services
from leases.api.parsers import BoundedJSONParser
from leases.domain.errors import LeaseholdError
from leases.models import LeaseEvent
from tests.api.helpers import API, DEV_ACCOUNT, lease, make_blob, make_container

pytestmark = pytest.mark.also_postgres

NEW_ID = "3c7e72eb-b430-4526-bc53-d8ecef03798f"
OTHER_ID = "ca761232-ed42-11ce-bacd-00aa0057b223"


def acquire(api, path, duration=15, **body):
    response = lease(api, "acquire", path, {"duration": duration, **body})
    assert response.status_code == 201, response.content
    return response.json()["lease_id"]


def test_acquire_answers_201_with_the_lease_and_records_who(api, resource, clock):
    clock.freeze()
    response = lease(api, "acquire", resource, {"duration": 15}, HTTP_X_CLIENT_REQUEST_ID="job-42",
                     HTTP_USER_AGENT="deployer/1.0")
    assert response.status_code == 201
    body = response.json()
    assert body["action"] == "acquire" and body["generation"] == 1 and body["lease_time"] is None
    assert body["lease"] == {
        "state": "leased", "status": "locked", "duration": "fixed", "duration_seconds": 15,
        "lease_fingerprint": fingerprints.of(body["lease_id"]), "expires_at": body["lease"]["expires_at"], "remaining_seconds": 15,
        "break_ends_at": None, "generation": 1,
        "last_holder": {"actor": "token:root", "address": "127.0.0.1", "client_request_id": "job-42",
                        "acquired_at": body["lease"]["last_holder"]["acquired_at"]}}
    assert response["ETag"] == body["etag"] and response["Last-Modified"].endswith(" GMT")
    assert response["X-Client-Request-Id"] == "job-42"
    event = LeaseEvent.objects.get()
    assert (event.action, event.outcome, event.status_code, event.actor, event.via) == (
        "acquire", "success", 201, "token:root", "api")
    assert (event.request_id, event.client_request_id, event.user_agent) == (
        response["X-Request-Id"], "job-42", "deployer/1.0")
    assert event.lease_fingerprint == fingerprints.of(body["lease_id"])


def test_the_azure_client_request_id_header_is_accepted_too(api, resource):
    response = lease(api, "acquire", resource, {"duration": -1}, HTTP_X_MS_CLIENT_REQUEST_ID="azure-style")
    assert response["X-Client-Request-Id"] == "azure-style"
    assert LeaseEvent.objects.get().client_request_id == "azure-style"


def test_infinite_lease_with_a_proposed_id_in_any_guid_format(api, resource):
    response = lease(api, "acquire", resource, {"duration": -1, "proposed_lease_id": "{" + NEW_ID.upper() + "}"})
    body = response.json()
    assert response.status_code == 201 and body["lease_id"] == NEW_ID
    assert body["lease"]["duration"] == "infinite" and body["lease"]["remaining_seconds"] is None


def test_refused_acquire_says_why_and_when_to_retry(api, resource, clock):
    clock.freeze()
    acquire(api, resource)
    clock.advance(5)
    response = lease(api, "acquire", resource, {"duration": 15})
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "LeaseAlreadyPresent"
    assert body["message"] == "There is already a lease present."
    assert (body["lease_state"], body["retry_after"], body["generation"]) == ("leased", 10, 1)
    assert body["request_id"] == response["X-Request-Id"]
    assert response["Retry-After"] == "10"
    refused = LeaseEvent.objects.get(outcome="refused")
    assert (refused.error_code, refused.status_code, refused.request_id) == ("LeaseAlreadyPresent", 409,
                                                                             body["request_id"])


def test_refused_acquire_of_an_infinite_lease_has_no_retry_time(api, resource):
    acquire(api, resource, duration=-1)
    response = lease(api, "acquire", resource, {"duration": 15})
    assert response.status_code == 409
    assert response.json()["retry_after"] is None and "Retry-After" not in response


def test_acquire_while_breaking_with_the_same_id(api, resource, clock):
    clock.freeze()
    lease_id = acquire(api, resource, duration=60)
    assert lease(api, "break", resource, {"break_period": 20}).status_code == 202
    clock.advance(5)
    response = lease(api, "acquire", resource, {"duration": 15, "proposed_lease_id": lease_id})
    assert response.status_code == 409
    body = response.json()
    assert (body["code"], body["lease_state"], body["retry_after"]) == ("LeaseIsBreakingAndCannotBeAcquired",
                                                                       "breaking", 15)
    assert response["Retry-After"] == "15"


def test_renew_resumes_an_expired_lease(api, resource, clock):
    clock.freeze()
    lease_id = acquire(api, resource)
    clock.advance(16)
    response = lease(api, "renew", resource, {"lease_id": lease_id})
    assert response.status_code == 200
    body = response.json()
    assert body["lease_id"] == lease_id
    assert (body["lease"]["state"], body["lease"]["remaining_seconds"]) == ("leased", 15)


def test_change_gives_the_lease_a_new_id(api, resource):
    old_id = acquire(api, resource)
    response = lease(api, "change", resource, {"lease_id": old_id, "proposed_lease_id": NEW_ID})
    assert response.status_code == 200 and response.json()["lease_id"] == NEW_ID
    refused = lease(api, "renew", resource, {"lease_id": old_id})
    assert (refused.status_code, refused.json()["code"]) == (409, "LeaseIdMismatchWithLeaseOperation")
    assert lease(api, "renew", resource, {"lease_id": NEW_ID}).status_code == 200


def test_release_frees_the_resource_and_keeps_the_reason(api, resource):
    lease_id = acquire(api, resource)
    response = lease(api, "release", resource, {"lease_id": lease_id, "reason": "job done"})
    assert response.status_code == 200
    body = response.json()
    assert body["lease_id"] is None and body["lease"]["state"] == "available"
    assert body["lease"]["last_holder"]["actor"] == "token:root"  # the last holder stays visible
    assert LeaseEvent.objects.get(action="release").reason == "job done"
    assert acquire(api, resource)  # anyone may take it now


def test_break_answers_202_with_the_lease_time(api, resource, clock):
    clock.freeze()
    acquire(api, resource, duration=60)
    response = lease(api, "break", resource, {"break_period": 10, "reason": "stuck job"})
    assert response.status_code == 202
    body = response.json()
    assert body["lease_time"] == 10
    assert (body["lease"]["state"], body["lease"]["status"], body["lease"]["remaining_seconds"]) == (
        "breaking", "locked", 10)
    assert body["lease"]["break_ends_at"] is not None
    clock.advance(10)
    assert lease(api, "break", resource).json()["lease"]["state"] == "broken"
    assert LeaseEvent.objects.filter(action="break").first().reason == ""
    assert LeaseEvent.objects.filter(action="break").last().reason == "stuck job"


def test_break_period_zero_breaks_at_once(api, resource):
    acquire(api, resource, duration=-1)
    body = lease(api, "break", resource, {"break_period": 0}).json()
    assert (body["lease_time"], body["lease"]["state"]) == (0, "broken")


@pytest.mark.parametrize("action, body, field, value", [
    ("acquire", {}, "duration", None),
    ("acquire", {"duration": 14}, "duration", "14"),
    ("acquire", {"duration": 61}, "duration", "61"),
    ("acquire", {"duration": 15, "proposed_lease_id": "not-a-guid"}, "proposed_lease_id", "not-a-guid"),
    ("renew", {}, "lease_id", None),
    ("renew", {"lease_id": None}, "lease_id", None),
    ("change", {"lease_id": OTHER_ID}, "proposed_lease_id", None),
    ("release", {"lease_id": "1234"}, "lease_id", "1234"),
    ("break", {"break_period": 61}, "break_period", "61"),
    ("break", {"break_period": -1}, "break_period", "-1"),
])
def test_bad_lease_parameters_are_refused_and_recorded_as_on_azure(api, resource, action, body, field, value):
    response = lease(api, action, resource, body)
    assert response.status_code == 400
    error = response.json()
    code = "MissingRequiredHeader" if value is None else "InvalidHeaderValue"
    assert (error["code"], error["field"], error.get("value")) == (code, field, value)
    # The services decided, so the refusal is in the history as the Azure door would record it.
    event = LeaseEvent.objects.get()
    assert (event.action, event.outcome, event.error_code, event.via) == (action, "refused", code, "api")


@pytest.mark.parametrize("body, field, value", [
    ({"duration": "15"}, "duration", '"15"'),
    ({"duration": True}, "duration", "true"),
    ({"duration": 15.5}, "duration", "15.5"),
    ({"duration": 15, "proposed_lease_id": 7}, "proposed_lease_id", "7"),
])
def test_lease_parameters_of_the_wrong_json_type(api, resource, body, field, value):
    response = lease(api, "acquire", resource, body)
    assert response.status_code == 400
    assert (response.json()["code"], response.json()["field"], response.json()["value"]) == (
        "InvalidHeaderValue", field, value)


def test_a_body_that_is_not_a_json_object(api, resource):
    response = api.post(f"{API}/leases/acquire/{resource}", "[15]", content_type="application/json")
    assert (response.status_code, response.json()["code"]) == (400, "InvalidInput")
    assert "non_field_errors" in response.json()["errors"]


def test_malformed_json(api, resource):
    response = api.post(f"{API}/leases/acquire/{resource}", '{"duration": 15', content_type="application/json")
    assert (response.status_code, response.json()["code"]) == (400, "InvalidInput")


@pytest.mark.parametrize("text", ['{"duration": 15, "reason": "\\ud800"}', '{"duration": NaN}',
                                  '{"duration": 15, "reason": "a\\u0000b"}'])
def test_json_that_cannot_be_stored_is_refused(api, resource, text):
    response = api.post(f"{API}/leases/release/{resource}", text, content_type="application/json")
    assert (response.status_code, response.json()["code"]) == (400, "InvalidInput")


def test_a_form_body_is_unsupported(api, resource):
    response = api.post(f"{API}/leases/acquire/{resource}", {"duration": 15}, format="multipart")
    assert (response.status_code, response.json()["code"]) == (415, "UnsupportedMediaType")


def test_a_body_over_the_size_limit(api, resource, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    response = lease(api, "release", resource, {"lease_id": OTHER_ID, "reason": "x" * 200})
    assert (response.status_code, response.json()["code"]) == (413, "RequestBodyTooLarge")


def test_the_parser_bounds_a_raw_stream_too(settings):
    """DRF before 3.16 hands parsers the raw request stream, unchecked."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    with pytest.raises(LeaseholdError) as refused:
        BoundedJSONParser().parse(io.BytesIO(b'{"reason": "' + b"x" * 200 + b'"}'))
    assert refused.value.code == "RequestBodyTooLarge"
    assert BoundedJSONParser().parse(io.BytesIO(b'{"duration": 15}')) == {"duration": 15}


def test_a_reason_longer_than_the_history_keeps(api, resource):
    response = lease(api, "break", resource, {"reason": "x" * 501})
    assert (response.status_code, response.json()["code"]) == (400, "InvalidInput")
    assert "reason" in response.json()["errors"]


@pytest.mark.parametrize("path, code", [
    (f"{DEV_ACCOUNT}/nothing", "ContainerNotFound"),
    (f"{DEV_ACCOUNT}/nothing/blob", "ContainerNotFound"),
    (f"{DEV_ACCOUNT}/box/nothing", "BlobNotFound"),
    ("noaccount/box", "ContainerNotFound"),
])
def test_missing_resources_are_404(api, accounts, path, code):
    make_container("box")
    response = lease(api, "acquire", path, {"duration": 15})
    assert (response.status_code, response.json()["code"]) == (404, code)


def test_lease_conflicts_are_409_with_azure_codes(api, resource, clock):
    clock.freeze()
    assert lease(api, "break", resource).json()["code"] == "LeaseNotPresentWithLeaseOperation"
    lease_id = acquire(api, resource, duration=60)
    assert lease(api, "renew", resource, {"lease_id": OTHER_ID}).json()["code"] == \
        "LeaseIdMismatchWithLeaseOperation"
    assert lease(api, "release", resource, {"lease_id": OTHER_ID}).json()["code"] == \
        "LeaseIdMismatchWithLeaseOperation"
    lease(api, "break", resource, {"break_period": 30})
    assert lease(api, "change", resource, {"lease_id": lease_id, "proposed_lease_id": NEW_ID}).json()["code"] == \
        "LeaseIsBreakingAndCannotBeChanged"
    assert lease(api, "renew", resource, {"lease_id": lease_id}).json()["code"] == "LeaseIsBrokenAndCannotBeRenewed"
    clock.advance(30)
    response = lease(api, "change", resource, {"lease_id": lease_id, "proposed_lease_id": NEW_ID})
    assert (response.status_code, response.json()["code"]) == (409, "LeaseNotPresentWithLeaseOperation")


def test_blob_leases_honour_etag_conditions(api, accounts):
    make_container("box")
    blob = make_blob("box", "b")
    path = f"{DEV_ACCOUNT}/box/b"
    response = lease(api, "acquire", path, {"duration": 15}, HTTP_IF_MATCH='"0xNOTTHEETAG"')
    assert (response.status_code, response.json()["code"]) == (412, "ConditionNotMet")
    assert lease(api, "acquire", path, {"duration": 15}, HTTP_IF_MATCH=blob.etag).status_code == 201


def test_container_leases_honour_date_conditions_only(api, accounts):
    make_container("box")
    path = f"{DEV_ACCOUNT}/box"
    past = "Mon, 01 Jan 2024 00:00:00 GMT"
    response = lease(api, "acquire", path, {"duration": 15}, HTTP_IF_UNMODIFIED_SINCE=past)
    assert (response.status_code, response.json()["code"]) == (412, "ConditionNotMet")
    # As on Azure, a container ignores ETag conditions.
    assert lease(api, "acquire", path, {"duration": 15}, HTTP_IF_MATCH='"0xNOTTHEETAG"').status_code == 201


def test_a_malformed_condition_header(api, resource):
    response = lease(api, "acquire", resource, {"duration": 15}, HTTP_IF_MODIFIED_SINCE="yesterday")
    body = response.json()
    assert (response.status_code, body["code"], body["field"], body["value"]) == (
        400, "InvalidHeaderValue", "If-Modified-Since", "yesterday")


def test_a_blob_whose_name_ends_like_an_action(api, accounts):
    """The action precedes the resource in the URL, so any blob name works."""
    make_container("box")
    make_blob("box", "jobs/acquire")
    path = f"{DEV_ACCOUNT}/box/jobs/acquire"
    assert lease(api, "acquire", path, {"duration": 15}).status_code == 201
    assert api.get(f"{API}/blobs/{path}").json()["lease"]["state"] == "leased"


def test_a_backslash_in_a_blob_name_is_a_slash(api, accounts):
    make_container("box")
    make_blob("box", "dir/b")
    assert lease(api, "acquire", f"{DEV_ACCOUNT}/box/dir\\b", {"duration": 15}).status_code == 201
    assert LeaseEvent.objects.get().blob == "dir/b"


def test_lease_ids_are_compared_by_value(api, resource):
    acquire(api, resource, proposed_lease_id=NEW_ID)
    response = lease(api, "renew", resource, {"lease_id": uuid.UUID(NEW_ID).hex.upper()})
    assert response.status_code == 200 and response.json()["lease_id"] == NEW_ID


def test_a_bug_is_a_json_500_and_is_logged(api, resource, monkeypatch, caplog):
    def broken(**kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(services, "lease_action", broken)
    response = lease(api, "acquire", resource, {"duration": 15})
    body = response.json()
    assert (response.status_code, body["code"], body["request_id"]) == (500, "InternalError", response["X-Request-Id"])
    assert "unhandled error on POST" in caplog.text and "a bug" in caplog.text


def test_a_waiting_acquire_refused_for_a_held_lease_is_quiet_until_its_last_attempt(api, resource):
    """With the server's offer to wait (serving/waiting.py puts a Wait in the
    environ), a refusal for a held lease records nothing and tells the server
    what to wait for; the last attempt's refusal is recorded; past the bound
    per principal, 429 and nothing recorded. Without the offer, answered at once."""
    from serving.waiting import Waiters
    from leases.domain.waiting import Wait

    acquire(api, resource, 60)
    wait = Wait(Waiters(bound=1))
    refused = lease(api, "acquire", resource, {"duration": 15, "wait": 5}, **{"leasehold.wait": wait})
    assert refused.status_code == 409 and refused.json()["retry_after"] == 60
    assert wait.key is not None and wait.ends_at is not None and LeaseEvent.objects.count() == 1
    full = lease(api, "acquire", resource, {"duration": 15, "wait": 5}, **{"leasehold.wait": Wait(wait.registry)})
    assert full.status_code == 429 and full.json()["code"] == "TooManyRequests" and full["Retry-After"] == "1"
    assert LeaseEvent.objects.count() == 1
    wait.final = True
    assert lease(api, "acquire", resource, {"duration": 15, "wait": 5},
                 **{"leasehold.wait": wait}).status_code == 409
    assert lease(api, "acquire", resource, {"duration": 15, "wait": 5}).status_code == 409  # no offer: at once
    assert list(LeaseEvent.objects.order_by("id").values_list("status_code", flat=True)) == [201, 409, 409]


@pytest.mark.parametrize("steps", [
    [("acquire", {"duration": 15})],
    [("acquire", {"duration": -1}), ("break", {"break_period": 20})],
    [("acquire", {"duration": 15}), ("break", {"break_period": 0})],
    [("acquire", {"duration": 15}), ("release", {})],
])
def test_the_lease_answer_is_what_its_documented_serializer_renders(api, resource, clock, settings, steps):
    """The lease actions' answer is built without DRF's serializer
    (serializers.lease_action_result), which stays the OpenAPI schema's: the
    two are equal, in an operator's time zone too (not only UTC's Z)."""
    from leases.api.serializers import LeaseActionResultSerializer, lease_action_result
    from leases.models import Blob, Container

    settings.TIME_ZONE = "Europe/Berlin"
    lease_id = None
    for action, body in steps:
        if lease_id is not None and action == "release":
            body = {"lease_id": lease_id}
        response = lease(api, action, resource, body)
        assert response.status_code in (200, 201, 202), response.content
        lease_id = response.json()["lease_id"] or lease_id
    account, container, *blob = resource.split("/", 2)
    obj = (Blob.objects.get(container__name=container, name=blob[0]) if blob
           else Container.objects.get(account__name=account, name=container))
    clock.advance(3)  # remaining seconds counted from a later instant than the action's
    now = clock.now()
    for lease_id_shown, lease_time in ((lease_id, None), (None, 20)):
        fields = {"action": steps[-1][0], "lease_id": lease_id_shown and uuid.UUID(lease_id_shown),
                  "lease_time": lease_time, "generation": obj.lease_generation}
        documented = LeaseActionResultSerializer({**fields, "etag": obj.etag, "last_modified": obj.last_modified,
                                                  "lease": obj}, context={"now": now}).data
        assert lease_action_result(**fields, obj=obj, now=now) == documented
        assert list(lease_action_result(**fields, obj=obj, now=now)) == list(documented)


@pytest.mark.parametrize("accept, status", [
    (None, 201), ("*/*", 201), ("application/json", 201), ("application/json; indent=2", 201),
    ("text/html", 406), ("text/csv", 406),
])
def test_lease_answers_are_json_or_not_acceptable(api, resource, accept, status):
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    response = lease(api, "acquire", resource, {"duration": 15}, **headers)
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    if status == 406:
        assert response.json()["code"] == "NotAcceptable"
    elif accept and "indent" in accept:
        assert response.content.startswith(b'{\n  "action"')  # DRF's negotiation, as before
