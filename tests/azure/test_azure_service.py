"""Account-level calls SDK clients make at start: Get Blob Service Properties
answers a new account's defaults, Get Account Information the account's kind;
Get Service Stats, which Azure serves only on a geo-replicated account's
secondary endpoint, is refused as Azure and Azurite refuse it on the primary."""

from __future__ import annotations

import pytest
from azure.core.exceptions import HttpResponseError

from tests import azure_raw

pytestmark = pytest.mark.also_postgres


def test_get_service_properties_answers_a_new_accounts_defaults(service):
    props = service.get_service_properties()
    logging = props["analytics_logging"]
    assert (logging.read, logging.write, logging.delete) == (False, False, False)
    assert logging.retention_policy.enabled is False
    assert props["hour_metrics"].enabled is False and props["minute_metrics"].enabled is False
    assert props["cors"] == []
    assert props["delete_retention_policy"].enabled is False
    assert props["static_website"].enabled is False


def test_get_account_information(service):
    info = service.get_account_information()
    assert info["sku_name"] == "Standard_LRS" and info["account_kind"] == "StorageV2"


def test_get_service_stats_is_refused_on_the_primary_endpoint_as_on_azure(azure_server):
    # The SDK sends it to the account's secondary endpoint only, which a
    # connection string to an emulator does not name: a signed request instead.
    answer = azure_raw.signed("GET", azure_server, "/devstoreaccount1/?restype=service&comp=stats")
    assert answer.status_code == 400
    assert answer.headers["x-ms-error-code"] == "InvalidQueryParameterValue"
    assert answer.text.lstrip("\ufeff").startswith("<?xml")


def test_set_service_properties_is_refused_and_changes_nothing(service):
    from azure.storage.blob import BlobAnalyticsLogging

    with pytest.raises(HttpResponseError) as raised:
        service.set_service_properties(analytics_logging=BlobAnalyticsLogging(read=True))
    assert raised.value.status_code == 400
    assert service.get_service_properties()["analytics_logging"].read is False
