"""Containers and blobs through the JSON API: create, read, delete under
leases as the Azure endpoint does, and the list filters."""

from __future__ import annotations

import base64

import pytest

from leases.domain import fingerprints
from leases import services
from leases.models import Blob, Container, LeaseEvent
from leases.services import ResourceRef
from tests.api.helpers import API, DEV_ACCOUNT, OTHER_ACCOUNT, TEST_ACTOR, lease, make_blob, make_container

ID = "3c7e72eb-b430-4526-bc53-d8ecef03798f"
WRONG_ID = "ca761232-ed42-11ce-bacd-00aa0057b223"


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["name"] for item in response.json()["results"]]


# ------------------------------------------------------------------ containers

def test_create_a_container(api, accounts, clock):
    clock.freeze()
    response = api.put(f"{API}/containers/{DEV_ACCOUNT}/reports",
                       {"metadata": {"Owner": "ops"}, "public_access": "blob"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert (body["account"], body["name"], body["metadata"], body["public_access"]) == (
        DEV_ACCOUNT, "reports", {"Owner": "ops"}, "blob")  # JSON keeps the case Azure keeps
    assert body["lease"]["state"] == "available" and body["lease"]["last_holder"] is None
    assert response["ETag"] == body["etag"] == Container.objects.get().etag


def test_create_a_container_without_a_body(api, accounts):
    assert api.put(f"{API}/containers/{DEV_ACCOUNT}/reports").status_code == 201


@pytest.mark.parametrize("account, name, status, code", [
    (DEV_ACCOUNT, "Upper", 400, "InvalidResourceName"),
    (DEV_ACCOUNT, "a--b", 400, "InvalidResourceName"),
    (DEV_ACCOUNT, "ab", 400, "OutOfRangeInput"),
    ("nosuchaccount", "reports", 404, "ResourceNotFound"),
    (DEV_ACCOUNT, "exists", 409, "ContainerAlreadyExists"),
])
def test_container_creation_refusals(api, accounts, account, name, status, code):
    make_container("exists")
    response = api.put(f"{API}/containers/{account}/{name}")
    assert (response.status_code, response.json()["code"]) == (status, code)


@pytest.mark.parametrize("metadata", [{"has-dash": "x"}, {"1digit": "x"}, {"ok": "caf\u00e9"}, {"ok": "a\nb"},
                                      ["not", "a", "dict"]])
def test_metadata_the_azure_endpoint_could_not_carry_is_refused(api, accounts, metadata):
    response = api.put(f"{API}/containers/{DEV_ACCOUNT}/reports", {"metadata": metadata}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "InvalidMetadata")


def test_public_access_is_validated(api, accounts):
    response = api.put(f"{API}/containers/{DEV_ACCOUNT}/reports", {"public_access": "everyone"}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "InvalidInput")
    assert "public_access" in response.json()["errors"]


def test_read_a_container_in_every_lease_state(api, accounts, clock):
    clock.freeze()
    make_container("box")
    url = f"{API}/containers/{DEV_ACCOUNT}/box"
    lease_id = lease(api, "acquire", f"{DEV_ACCOUNT}/box", {"duration": 20}).json()["lease_id"]
    clock.advance(5)
    view = api.get(url).json()["lease"]
    assert (view["state"], view["status"], view["duration"], view["remaining_seconds"], view["lease_fingerprint"]) \
        == ("leased", "locked", "fixed", 15, fingerprints.of(lease_id))
    clock.advance(15)  # nothing is written: the state is derived from the deadline
    view = api.get(url).json()["lease"]
    assert (view["state"], view["status"], view["duration"], view["remaining_seconds"], view["duration_seconds"]) == (
        "expired", "unlocked", None, 0, 20)
    lease(api, "renew", f"{DEV_ACCOUNT}/box", {"lease_id": lease_id})
    lease(api, "break", f"{DEV_ACCOUNT}/box", {"break_period": 7})
    view = api.get(url).json()["lease"]
    assert (view["state"], view["status"], view["remaining_seconds"]) == ("breaking", "locked", 7)
    assert view["break_ends_at"] is not None
    clock.advance(7)
    view = api.get(url).json()["lease"]
    assert (view["state"], view["status"], view["remaining_seconds"], view["generation"]) == (
        "broken", "unlocked", 0, 1)


def test_reading_with_a_lease_id_checks_it(api, accounts):
    make_container("box")
    url = f"{API}/containers/{DEV_ACCOUNT}/box"
    response = api.get(url, {"lease_id": WRONG_ID})
    assert (response.status_code, response.json()["code"]) == (412, "LeaseNotPresentWithContainerOperation")
    lease(api, "acquire", f"{DEV_ACCOUNT}/box", {"duration": 15, "proposed_lease_id": ID})
    assert api.get(url, {"lease_id": ID}).status_code == 200
    response = api.get(url, {"lease_id": WRONG_ID})
    assert (response.status_code, response.json()["code"]) == (412, "LeaseIdMismatchWithContainerOperation")
    response = api.get(url, {"lease_id": "nope"})
    assert (response.status_code, response.json()["code"], response.json()["field"]) == (
        400, "InvalidHeaderValue", "lease_id")


def test_a_missing_container_is_404(api, accounts):
    response = api.get(f"{API}/containers/{DEV_ACCOUNT}/nothing")
    assert (response.status_code, response.json()["code"]) == (404, "ContainerNotFound")


def test_deleting_a_leased_container_needs_its_lease_id(api, accounts):
    make_container("box")
    make_blob("box", "inside")
    lease(api, "acquire", f"{DEV_ACCOUNT}/box", {"duration": -1, "proposed_lease_id": ID})
    url = f"{API}/containers/{DEV_ACCOUNT}/box"
    response = api.delete(url)
    assert (response.status_code, response.json()["code"]) == (412, "LeaseIdMissing")
    assert LeaseEvent.objects.get(action="delete-container").error_code == "LeaseIdMissing"
    response = api.delete(f"{url}?lease_id={WRONG_ID}")
    assert (response.status_code, response.json()["code"]) == (412, "LeaseIdMismatchWithContainerOperation")
    response = api.delete(f"{url}?lease_id={ID}")
    assert response.status_code == 202 and response.content == b""
    assert not Container.objects.exists() and not Blob.objects.exists()
    assert api.delete(url).status_code == 404


def test_container_delete_honours_date_conditions(api, accounts):
    make_container("box")
    response = api.delete(f"{API}/containers/{DEV_ACCOUNT}/box",
                          HTTP_IF_UNMODIFIED_SINCE="Mon, 01 Jan 2024 00:00:00 GMT")
    assert (response.status_code, response.json()["code"]) == (412, "ConditionNotMet")


# ------------------------------------------------------------------ blobs

def test_put_and_read_a_blob(api, accounts):
    make_container("box")
    url = f"{API}/blobs/{DEV_ACCOUNT}/box/dir/r%C3%A9sum%C3%A9 1.txt"
    response = api.put(url, {"content": base64.b64encode(b"hello").decode(), "content_type": "text/plain",
                             "metadata": {"k": "v"}}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert (body["container"], body["name"], body["size"], body["content_type"], body["metadata"]) == (
        "box", "dir/r\u00e9sum\u00e9 1.txt", 5, "text/plain", {"k": "v"})
    assert body["content_md5"] == "XUFAKrxLKna5cZ2REBfFkg=="
    assert Blob.objects.get().content == b"hello"
    read = api.get(url)
    assert read.status_code == 200 and read.json() == body


def test_overwriting_a_leased_blob_needs_its_lease_id(api, accounts):
    make_container("box")
    make_blob("box", "b", b"v1")
    lease(api, "acquire", f"{DEV_ACCOUNT}/box/b", {"duration": 15, "proposed_lease_id": ID})
    url = f"{API}/blobs/{DEV_ACCOUNT}/box/b"
    response = api.put(url, {"content": base64.b64encode(b"v2").decode()}, format="json")
    assert (response.status_code, response.json()["code"]) == (412, "LeaseIdMissing")
    response = api.put(url, {"content": "", "lease_id": WRONG_ID}, format="json")
    assert (response.status_code, response.json()["code"]) == (412, "LeaseIdMismatchWithBlobOperation")
    response = api.put(url, {"content": base64.b64encode(b"v2").decode(), "lease_id": ID}, format="json")
    assert response.status_code == 201 and response.json()["lease"]["state"] == "leased"
    assert Blob.objects.get().content == b"v2"


def test_a_write_ends_an_expired_blob_lease(api, accounts, clock):
    clock.freeze()
    make_container("box")
    make_blob("box", "b")
    lease_id = lease(api, "acquire", f"{DEV_ACCOUNT}/box/b", {"duration": 15}).json()["lease_id"]
    clock.advance(16)
    assert api.put(f"{API}/blobs/{DEV_ACCOUNT}/box/b", {}, format="json").status_code == 201
    response = lease(api, "renew", f"{DEV_ACCOUNT}/box/b", {"lease_id": lease_id})
    assert (response.status_code, response.json()["code"]) == (409, "LeaseIdMismatchWithLeaseOperation")
    assert LeaseEvent.objects.filter(action="ended-by-write", via="api").exists()


@pytest.mark.parametrize("body", [{"content": "not base64!"}, {"content_type": "t\u00e9xt"}, {"content": 5}])
def test_bad_blob_bodies(api, accounts, body):
    make_container("box")
    response = api.put(f"{API}/blobs/{DEV_ACCOUNT}/box/b", body, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "InvalidInput")


def test_put_blob_conditions(api, accounts):
    make_container("box")
    blob = make_blob("box", "b")
    url = f"{API}/blobs/{DEV_ACCOUNT}/box/b"
    response = api.put(url, {}, format="json", HTTP_IF_NONE_MATCH="*")
    assert (response.status_code, response.json()["code"]) == (409, "BlobAlreadyExists")
    response = api.put(url, {}, format="json", HTTP_IF_MATCH='"0xOTHER"')
    assert (response.status_code, response.json()["code"]) == (412, "ConditionNotMet")
    assert api.put(url, {}, format="json", HTTP_IF_MATCH=blob.etag).status_code == 201


def test_put_blob_into_a_missing_container(api, accounts):
    response = api.put(f"{API}/blobs/{DEV_ACCOUNT}/nothing/b", {}, format="json")
    assert (response.status_code, response.json()["code"]) == (404, "ContainerNotFound")


def test_read_a_missing_blob(api, accounts):
    make_container("box")
    response = api.get(f"{API}/blobs/{DEV_ACCOUNT}/box/nothing")
    assert (response.status_code, response.json()["code"]) == (404, "BlobNotFound")


def test_deleting_blobs_under_leases_and_snapshots(api, accounts):
    make_container("box")
    make_blob("box", "b")
    services.blob_snapshot(ref=ResourceRef(DEV_ACCOUNT, "box", "b"), actor=TEST_ACTOR)
    lease(api, "acquire", f"{DEV_ACCOUNT}/box/b", {"duration": 15, "proposed_lease_id": ID})
    url = f"{API}/blobs/{DEV_ACCOUNT}/box/b"
    response = api.delete(f"{url}?lease_id={ID}")
    assert (response.status_code, response.json()["code"]) == (409, "SnapshotsPresent")
    response = api.delete(f"{url}?delete_snapshots=include")
    assert (response.status_code, response.json()["code"]) == (412, "LeaseIdMissing")
    response = api.delete(f"{url}?delete_snapshots=everything&lease_id={ID}")
    assert (response.status_code, response.json()["field"]) == (400, "delete_snapshots")
    assert api.delete(f"{url}?delete_snapshots=include&lease_id={ID}").status_code == 202
    assert not Blob.objects.exists()


# ------------------------------------------------------------------ lists

@pytest.fixture
def estate(accounts, api, clock):
    """Containers and blobs in every lease state, at a frozen instant."""
    clock.freeze()
    for name in ("alpha", "beta", "gamma", "delta"):
        make_container(name)
    make_container("alpha", account=OTHER_ACCOUNT)
    for name in ("logs/a", "logs/b", "Logs/c", "data/x", "data/y"):
        make_blob("alpha", name)
    make_blob("alpha", "elsewhere", account=OTHER_ACCOUNT)
    lease(api, "acquire", f"{DEV_ACCOUNT}/alpha", {"duration": -1})  # leased, infinite
    lease(api, "acquire", f"{DEV_ACCOUNT}/beta", {"duration": 15})  # expires below
    lease(api, "acquire", f"{DEV_ACCOUNT}/gamma", {"duration": 60})
    lease(api, "break", f"{DEV_ACCOUNT}/gamma", {"break_period": 30})  # breaking
    lease(api, "acquire", f"{DEV_ACCOUNT}/alpha/logs/a", {"duration": 60})  # leased, fixed
    lease(api, "acquire", f"{DEV_ACCOUNT}/alpha/logs/b", {"duration": 15})  # expires below
    lease(api, "acquire", f"{DEV_ACCOUNT}/alpha/data/x", {"duration": -1})
    lease(api, "break", f"{DEV_ACCOUNT}/alpha/data/x", {"break_period": 0})  # broken
    clock.advance(20)


@pytest.mark.parametrize("query, expected", [
    ({}, ["alpha", "alpha", "beta", "delta", "gamma"]),
    ({"account": DEV_ACCOUNT}, ["alpha", "beta", "delta", "gamma"]),
    ({"prefix": "al"}, ["alpha", "alpha"]),
    ({"lease_state": "leased"}, ["alpha"]),
    ({"lease_state": "expired"}, ["beta"]),
    ({"lease_state": "breaking"}, ["gamma"]),
    ({"lease_state": "available", "account": DEV_ACCOUNT}, ["delta"]),
    ({"lease_state": ["expired", "breaking"]}, ["beta", "gamma"]),
    ({"duration": "infinite"}, ["alpha"]),
    ({"duration": "fixed"}, []),
])
def test_container_list_filters(api, estate, query, expected):
    assert names(api.get(f"{API}/containers/", query)) == expected


@pytest.mark.parametrize("query, expected", [
    ({"account": DEV_ACCOUNT, "container": "alpha"}, ["Logs/c", "data/x", "data/y", "logs/a", "logs/b"]),
    ({"prefix": "logs/"}, ["logs/a", "logs/b"]),  # case-sensitive, as Azure's prefix
    ({"prefix": "Logs/"}, ["Logs/c"]),
    ({"lease_state": "leased"}, ["logs/a"]),
    ({"lease_state": "expired"}, ["logs/b"]),
    ({"lease_state": "broken"}, ["data/x"]),
    ({"lease_state": "available", "account": DEV_ACCOUNT}, ["Logs/c", "data/y"]),
    ({"duration": "fixed"}, ["logs/a"]),
    ({"account": OTHER_ACCOUNT}, ["elsewhere"]),
])
def test_blob_list_filters(api, estate, query, expected):
    assert names(api.get(f"{API}/blobs/", query)) == expected


def test_the_list_shows_each_lease_as_of_now(api, estate, clock):
    items = {i["name"]: i["lease"] for i in api.get(f"{API}/blobs/", {"container": "alpha"}).json()["results"]}
    assert (items["logs/a"]["state"], items["logs/a"]["remaining_seconds"]) == ("leased", 40)
    assert items["logs/b"]["state"] == "expired"


def test_blob_lists_leave_snapshots_out(api, accounts):
    make_container("box")
    make_blob("box", "b")
    services.blob_snapshot(ref=ResourceRef(DEV_ACCOUNT, "box", "b"), actor=TEST_ACTOR)
    assert names(api.get(f"{API}/blobs/")) == ["b"]


@pytest.mark.parametrize("query, field", [({"lease_state": "asleep"}, "lease_state"),
                                          ({"duration": "forever"}, "duration"),
                                          ({"cursor": "garbage"}, "cursor")])
def test_bad_list_queries_are_400(api, estate, query, field):
    response = api.get(f"{API}/containers/", query)
    body = response.json()
    assert (response.status_code, body["code"], body["field"], body["value"]) == (
        400, "InvalidQueryParameterValue", field, query[field])


def test_lists_page_by_cursor(api, estate):
    first = api.get(f"{API}/blobs/", {"page_size": 2}).json()
    assert [b["name"] for b in first["results"]] == ["Logs/c", "data/x"] and first["previous"] is None
    second = api.get(first["next"]).json()
    third = api.get(second["next"]).json()
    assert [b["name"] for b in second["results"] + third["results"]] == ["data/y", "elsewhere", "logs/a", "logs/b"]
    assert third["next"] is None


@pytest.mark.parametrize("page_size", ["0", "-1", "abc", "1001", "2.5", "１０", " 5"])
@pytest.mark.parametrize("url", ["blobs/", "containers/", "events/"])
def test_a_page_size_out_of_range_or_not_a_number_is_400(api, estate, page_size, url):
    """DRF ignored a bad page_size (and clamped a large one) silently."""
    response = api.get(f"{API}/{url}", {"page_size": page_size})
    body = response.json()
    assert (response.status_code, body["code"], body["field"], body["value"]) == (
        400, "InvalidQueryParameterValue", "page_size", page_size)
    assert api.get(f"{API}/{url}", {"page_size": "1000"}).status_code == 200


@pytest.mark.parametrize("ordering", ["name", "actor", "-id,actor", "id,", "ID", "Occurred_at"])
def test_an_ordering_by_an_unknown_field_is_400(api, estate, ordering):
    response = api.get(f"{API}/events/", {"ordering": ordering})
    body = response.json()
    assert (response.status_code, body["code"], body["field"], body["value"]) == (
        400, "InvalidQueryParameterValue", "ordering", ordering)
    for good in ("id", "-id", "occurred_at", "-occurred_at"):
        assert api.get(f"{API}/events/", {"ordering": good}).status_code == 200


def test_the_schema_states_the_page_size_and_ordering_the_server_takes(api):
    schema = api.get(f"{API}/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    parameters = {p["name"]: p["schema"] for p in schema["paths"][f"{API}/events/"]["get"]["parameters"]}
    assert parameters["page_size"] == {"type": "integer", "minimum": 1, "maximum": 1000}
    assert parameters["ordering"] == {"type": "string", "enum": ["id", "-id", "occurred_at", "-occurred_at"]}
    blob = next(p for p in schema["paths"][f"{API}/blobs/{{account}}/{{container}}/{{blob}}"]["get"]["parameters"]
                if p["name"] == "blob")
    assert blob["schema"]["pattern"] == r"^[\s\S]{1,1024}$"  # a longer name is refused (leases/domain/names.py)
