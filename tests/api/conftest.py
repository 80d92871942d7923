"""Fixtures of the JSON API tests (tests/api/); ``accounts`` and ``api``
are in tests/conftest.py (tests elsewhere call the API too), plain helpers in
helpers.py."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from .helpers import make_blob, make_container, make_user, resource_path, token_client


@pytest.fixture(autouse=True)
def _own_throttle_file(throttle_file):
    """Every API test counts its requests in a throttle file of its own."""


@pytest.fixture
def client_with(accounts):
    """client_with("leases.view_blob", ...): a token client of a user with
    exactly these permissions."""
    count = 0

    def make(*perms: str) -> APIClient:
        nonlocal count
        count += 1
        return token_client(make_user(f"user{count}", *perms))

    return make


@pytest.fixture(params=["container", "blob"])
def resource(request, accounts) -> str:
    """A leasable resource, once a container and once a blob."""
    make_container("box")
    if request.param == "blob":
        make_blob("box", "dir/a b.txt", b"hello")
    return resource_path(request.param)
