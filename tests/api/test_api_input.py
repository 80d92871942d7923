"""Input strictness of the JSON API: the same metadata, name and
GUID rules as the Azure door (one home: leases/domain/metadata.py, leases/domain/names.py,
leases/domain/guids.py), JSON that nests too deep, and a fuzz run of arbitrary JSON
bodies that must never reach a 500."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leases.models import Blob, Container
from tests.api.helpers import API, DEV_ACCOUNT, lease, make_blob, make_container

# Run again on PostgreSQL (also_postgres): the tests whose input reaches the database (stored
# metadata, the fuzz run's bodies); the refusals decided before any query run on SQLite alone
# (docs/development/tests.md, "Which modules run on PostgreSQL").
stored = pytest.mark.also_postgres

GUID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def code_of(response) -> tuple[int, str]:
    return response.status_code, response.json().get("code")


# ------------------------------------------------------------------ metadata

@stored
def test_metadata_names_keep_case_and_underscores(api, accounts):
    response = api.put(f"{API}/containers/{DEV_ACCOUNT}/box", {"metadata": {"Build_Id": "42", "_x": ""}},
                       format="json")
    assert response.status_code == 201 and response.json()["metadata"] == {"Build_Id": "42", "_x": ""}
    response = api.put(f"{API}/blobs/{DEV_ACCOUNT}/box/b", {"metadata": {"run_id": "7"}}, format="json")
    assert response.status_code == 201 and Blob.objects.get().metadata == {"run_id": "7"}


@pytest.mark.parametrize("metadata, code", [
    ({"a-b": "1"}, "InvalidMetadata"),
    ({"1a": "1"}, "InvalidMetadata"),
    ({"": "1"}, "EmptyMetadataKey"),
    ({"caf\u00e9": "1"}, "InvalidMetadata"),
    ({"a": 1}, "InvalidMetadata"),
    ({"a": None}, "InvalidMetadata"),
    ({"a": "tab\tok", "b": "caf\u00e9"}, "InvalidMetadata"),
    ({"Owner": "a", "owner": "b"}, "InvalidMetadata"),  # names ignore case
    ("not a dict", "InvalidMetadata"),
    ({"big": "x" * 8190}, "MetadataTooLarge"),  # 3 + 8190 > 8192
    ({"a": "x" * 5000, "b": "y" * 4000}, "MetadataTooLarge"),
])
@pytest.mark.parametrize("target", ["container", "blob"])
def test_invalid_metadata_is_refused_and_changes_nothing(api, accounts, metadata, code, target):
    make_container("box")
    make_blob("box", "b", b"old")
    if target == "container":
        response = api.put(f"{API}/containers/{DEV_ACCOUNT}/new", {"metadata": metadata}, format="json")
    else:
        response = api.put(f"{API}/blobs/{DEV_ACCOUNT}/box/b", {"metadata": metadata, "content": "bmV3"},
                           format="json")
    assert code_of(response) == (400, code)
    assert list(Container.objects.values_list("name", flat=True)) == ["box"]
    assert bytes(Blob.objects.get().content) == b"old"


@stored
def test_metadata_of_exactly_8_kib_is_accepted(api, accounts):
    value = "x" * (8 * 1024 - 3)
    response = api.put(f"{API}/containers/{DEV_ACCOUNT}/box", {"metadata": {"big": value}}, format="json")
    assert response.status_code == 201 and response.json()["metadata"] == {"big": value}


# ------------------------------------------------------------------ names

@pytest.mark.parametrize("name", ["a%01b", "a%7Fb", "a%EF%BF%BFb", "a%0Db", "a%09b"])
def test_blob_names_xml_cannot_carry_are_refused(api, accounts, name):
    make_container("box")
    response = api.put(f"{API}/blobs/{DEV_ACCOUNT}/box/{name}", {}, format="json")
    assert code_of(response) == (400, "InvalidResourceName")
    assert not Blob.objects.exists()


# ------------------------------------------------------------------ GUIDs

@pytest.mark.parametrize("proposed, status", [
    (GUID, 201), (GUID.upper(), 201), (GUID.replace("-", ""), 201), ("{" + GUID + "}", 201), ("(" + GUID + ")", 201),
    ("urn:" + GUID.replace("-", ""), 400), ("{" + GUID.replace("-", "") + "}", 400),
    ("0f8f-ad5bd9cb-469f-a165-70867728950e", 400), ("{" + GUID + ")", 400),
])
def test_guid_spellings_as_on_the_azure_door(api, resource, proposed, status):
    response = lease(api, "acquire", resource, {"duration": 15, "proposed_lease_id": proposed})
    assert response.status_code == status, response.json()
    if status == 201:
        assert response.json()["lease_id"] == GUID


# ------------------------------------------------------------------ JSON shape

@pytest.mark.parametrize("depth", [33, 1_000, 100_000])
@pytest.mark.parametrize("kind", ["list", "object"])
def test_json_nested_deeply_is_400_not_500(api, accounts, depth, kind):
    make_container("box")
    inner = "[" * depth + "]" * depth if kind == "list" else '{"a":' * depth + "1" + "}" * depth
    body = '{"metadata": ' + inner + "}"
    response = api.put(f"{API}/blobs/{DEV_ACCOUNT}/box/b", body, content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] in ("InvalidInput", "InvalidMetadata")
    assert not Blob.objects.exists()


def test_json_nested_to_the_limit_is_parsed(api, accounts):
    make_container("box")
    inner = "[" * 30 + "]" * 30  # 32 levels with the body object and metadata's value
    body = '{"content": "", "metadata": {}, "x": ' + inner + "}"
    assert api.put(f"{API}/blobs/{DEV_ACCOUNT}/box/b", body, content_type="application/json").status_code == 201


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
FIELDS = ["metadata", "content", "content_type", "lease_id", "public_access", "duration", "break_period",
          "proposed_lease_id"]
BODIES = st.one_of(JSON, st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=4))
TARGETS = [("put", "containers/{a}/box"), ("put", "containers/{a}/new"), ("put", "blobs/{a}/box/b"),
           ("post", "leases/acquire/{a}/box/b"), ("post", "leases/break/{a}/box"),
           ("post", "leases/change/{a}/box/b"), ("post", "leases/renew/{a}/box")]


@stored
@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(TARGETS), body=BODIES)
def test_fuzzed_json_bodies_never_500(api, accounts, target, body):
    if not Container.objects.filter(name="box").exists():
        make_container("box")
        make_blob("box", "b", b"x")
    method, path = target
    response = getattr(api, method)(f"{API}/{path.format(a=DEV_ACCOUNT)}", json.dumps(body),
                                    content_type="application/json")
    assert response.status_code < 500, response.content[:500]
    if response.status_code >= 400:
        assert response["Content-Type"] == "application/json" and response.json()["code"]
