"""One strict number parser for both doors (leases/domain/lease_params.py): a
duration or break period that is no whole number in the range the history
stores is 400 InvalidHeaderValue naming it, recorded as a refused attempt,
and changes nothing -- never a 500 ("--15", a huge string, a float)."""

from __future__ import annotations

import pytest

from leases.models import Blob, LeaseEvent
from tests import azure_raw
from tests.api.helpers import DEV_ACCOUNT, lease, make_blob, make_container

pytestmark = pytest.mark.also_postgres

HEADER_NUMBERS = ["--15", "--0", "-", "1-5", "+15", "15.0", "1e3", "0x0F", "9" * 13, "-" + "9" * 12]
JSON_NUMBERS = [2**63, -10**30, 10**12, True, 15.5, "15", [15], {"s": 15}]


def _refusals(blob: str) -> list[tuple[int, str]]:
    return list(LeaseEvent.objects.filter(blob=blob, outcome="refused").values_list("status_code", "error_code"))


@pytest.mark.parametrize("field, header", [("duration", "x-ms-lease-duration"),
                                           ("break_period", "x-ms-lease-break-period")])
@pytest.mark.parametrize("value", HEADER_NUMBERS)
def test_a_malformed_number_header_is_400_recorded_on_the_azure_door(azure_server, field, header, value):
    make_container("nums")
    make_blob("nums", "b")
    action = "acquire" if field == "duration" else "break"
    headers = {"x-ms-lease-action": action, header: value}
    if action == "acquire":
        headers.setdefault("x-ms-lease-duration", "15")
    answer = azure_raw.signed("PUT", azure_server, f"/{DEV_ACCOUNT}/nums/b?comp=lease", headers=headers)
    assert answer.status_code == 400, answer.text[:300]
    assert answer.headers["x-ms-error-code"] == "InvalidHeaderValue"
    assert _refusals("b") == [(400, "InvalidHeaderValue")]
    assert Blob.objects.get(name="b").lease_state == "available"


@pytest.mark.parametrize("field", ["duration", "break_period"])
@pytest.mark.parametrize("value", JSON_NUMBERS, ids=repr)
def test_a_number_out_of_range_or_of_another_type_is_400_recorded_on_the_json_api(api, accounts, field, value):
    make_container("nums")
    make_blob("nums", "b")
    action = "acquire" if field == "duration" else "break"
    body = {field: value} if action == "break" else {"duration": value}
    answer = lease(api, action, f"{DEV_ACCOUNT}/nums/b", body)
    assert answer.status_code == 400, answer.content[:300]
    assert Blob.objects.get(name="b").lease_state == "available"
    refusals = _refusals("b")
    assert refusals in ([(400, "InvalidHeaderValue")], []), refusals  # [] where the request body itself is refused
