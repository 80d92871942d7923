"""The OpenAPI schema: valid, complete, with its docs served offline; and a
schema-driven fuzz run (schemathesis) that must find no 5xx and no
response the schema does not describe."""

from __future__ import annotations

import re

import hypothesis
import pytest
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.urls import URLPattern, URLResolver, get_resolver

from leases.models import Blob, Container
from leases.models.tokens import ApiToken
from tests.api.helpers import API, DEV_ACCOUNT, make_blob, make_container, make_user

NOT_OPERATIONS = {"schema/", "docs/", "redoc/", ""}  # the schema, its two viewers, the JSON 404


def test_schema_validates_without_warnings(tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))


def api_routes() -> list[str]:
    resolver = next(p for p in get_resolver().url_patterns
                    if isinstance(p, URLResolver) and str(p.pattern) == "api/v1/")
    routes = [str(p.pattern) for p in resolver.url_patterns if isinstance(p, URLPattern)]
    return [re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route) for route in routes if route.lstrip("^") not in NOT_OPERATIONS]


def test_every_route_is_described_with_its_errors(api):
    schema = api.get(f"{API}/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert sorted(schema["paths"]) == sorted(f"{API}/{route}" for route in api_routes())
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert {"400", "401", "403", "429", "503"} <= set(responses), (method, path)
            for status in ("429", "503"):
                assert "Retry-After" in responses[status]["headers"], (method, path, status)
            for status, response in responses.items():
                assert response["description"], (method, path, status)
                if status.startswith(("4", "5")):
                    assert response["content"] == {"application/json": {"schema": {
                        "$ref": "#/components/schemas/Error"}}}, (method, path, status)
    assert set(schema["components"]["securitySchemes"]) == {"apiToken", "sharedKey", "cookieAuth"}


def test_docs_work_without_the_internet(client):
    page = client.get(f"{API}/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "cdn.jsdelivr.net" not in html
    found = re.search(r'src="([^"]*swagger-ui-bundle\.js)"', html)
    assert found, html
    bundle = found.group(1)
    assert bundle.startswith("/static/drf_spectacular_sidecar/")
    asset = client.get(bundle)
    assert asset.status_code == 200 and b"SwaggerUI" in b"".join(asset.streaming_content)
    assert client.get(f"{API}/redoc/").status_code == 200


@pytest.mark.parametrize("path", ["nothing", "containers", "events/nope", "leases/steal/devstoreaccount1/box"])
def test_unknown_api_paths_are_json_404s_not_the_azure_endpoint(api, path):
    response = api.post(f"{API}/{path}")
    assert (response.status_code, response["Content-Type"], response.json()["code"]) == (
        404, "application/json", "ResourceNotFound")


# ------------------------------------------------------------------ fuzzing

# schemathesis is imported by the fuzz test alone, not by every test process's
# collection (its pytest plugin is off too: pyproject.toml, docs/decisions/0046).

# (mode, aimed at the real resource, examples) per operation: about 440
# requests, about 15 s on one core (drawing the cases costs more than
# serving them). Valid data aimed at a real container and blob reaches the
# lease rules (201, 409, 412...); invalid data tests the refusals.
PASSES = [("POSITIVE", True, 10), ("NEGATIVE", True, 6), ("NEGATIVE", False, 5)]
REAL = {"account": DEV_ACCOUNT, "container": "fuzz", "blob": "locks/b"}


@pytest.fixture
def wsgi_app():
    """The real WSGI application, called in this thread so it shares the
    test's transaction; like Django's test client, keep the request signals
    from closing that connection."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        from config.wsgi import application

        yield application
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def ensure_real_resources():
    """The container and blob fuzzing aims at, whatever earlier examples
    deleted; leases left on them stay, so later operations meet them."""
    if not Container.objects.filter(name=REAL["container"]).exists():
        make_container(REAL["container"])
    if not Blob.objects.filter(name=REAL["blob"]).exists():
        make_blob(REAL["container"], REAL["blob"], b"fuzz")


@pytest.mark.slow
def test_fuzzing_finds_no_server_error_and_no_undocumented_response(accounts, wsgi_app):
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.core.result import Err
    from schemathesis.specs.openapi.checks import (content_type_conformance, response_headers_conformance,
                                                   response_schema_conformance, status_code_conformance)

    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
              response_headers_conformance]
    _, token = ApiToken.issue(user=make_user("fuzzer", superuser=True), name="fuzzer")
    schema = schemathesis.openapi.from_wsgi(f"{API}/schema/", wsgi_app)
    schema.config.update(headers={"Authorization": f"Bearer {token}"})
    # The token above is the credential; generated Authorization values would only test rejection.
    schema.config.generation.update(with_security_parameters=False)
    operations = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # an operation the schema does not describe well enough to test
            raise result.err()
        operations.append(result.ok())
    assert len(operations) == len(api_routes()) + 4  # detail routes also PUT and DELETE
    statuses = set()
    for operation in operations:
        ensure_real_resources()
        for mode, real, examples in PASSES:
            path = {name: value for name, value in REAL.items() if "{%s}" % name in operation.path} if real else None

            @hypothesis.given(case=operation.as_strategy(generation_mode=GenerationMode[mode], path_parameters=path))
            @hypothesis.settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                                 suppress_health_check=list(hypothesis.HealthCheck),
                                 phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate])
            def call(case):
                statuses.add(case.call_and_validate(checks=checks).status_code)

            call()
    # The run reached the domain, not only the validation in front of it.
    assert {200, 201, 202, 400, 404, 409, 412} <= statuses
