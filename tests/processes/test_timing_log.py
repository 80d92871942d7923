"""The bench's timing log (leases/operations/timing.py): a server started with
LEASEHOLD_TIMING_LOG writes, through its one wrapper, every step of a lease
request on both paths -- the batched lean paths (the Azure door's, the JSON
API's) and the lane (a JSON request of another shape, for the DRF view) --
as bench/timing_report.py reads them."""

from __future__ import annotations

import json
import uuid

import pytest
import requests

from leases.management.commands.leasehold_setup import DEV_ACCOUNT
from tests import azure_raw
from tests.server_process import Instance, admin_token, prepare

pytestmark = pytest.mark.processes

STEPS = ("called", "body", "thread", "lock_wait", "begun", "committing", "committed", "synced", "returned",
         "resumed", "sent")


def test_a_timed_server_logs_every_step_of_both_lease_paths(tmp_path):
    database = tmp_path / "timed.sqlite3"
    env = prepare(str(database), tmp_path)
    token = admin_token(database, env)
    server = Instance(str(database), tmp_path, "timed", workers=1)
    server.env["LEASEHOLD_TIMING_LOG"] = str(tmp_path / "timing")
    server.start()
    try:
        assert azure_raw.signed("PUT", server.url, f"/{DEV_ACCOUNT}/box?restype=container").status_code == 201
        for name in ("azure", "api", "view"):
            response = azure_raw.signed("PUT", server.url, f"/{DEV_ACCOUNT}/box/{name}",
                                        headers={"x-ms-blob-type": "BlockBlob"}, body=b"x")
            assert response.status_code == 201
        acquired = azure_raw.lease(server.url, f"/{DEV_ACCOUNT}/box/azure", "acquire", duration=15,
                                   proposed_lease_id=str(uuid.uuid4()))
        assert acquired.status_code == 201, acquired.text
        acquired = requests.post(f"{server.url}/api/v1/leases/acquire/{DEV_ACCOUNT}/box/api",
                                 json={"duration": 15}, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert acquired.status_code == 201, acquired.text
        acquired = requests.post(f"{server.url}/api/v1/leases/acquire/{DEV_ACCOUNT}/box/view?format=json",
                                 json={"duration": 15}, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert acquired.status_code == 201, acquired.text  # a query: not the lean path's, the view's
    finally:
        server.stop()
    records = [json.loads(line) for log in tmp_path.glob("timing.*") for line in log.read_text().splitlines()]
    azure = [r for r in records if r.get("path") == f"/{DEV_ACCOUNT}/box/azure" and r.get("query") == "comp=lease"]
    api = [r for r in records if r.get("path") == f"/api/v1/leases/acquire/{DEV_ACCOUNT}/box/api"]
    view = [r for r in records if r.get("path") == f"/api/v1/leases/acquire/{DEV_ACCOUNT}/box/view"]
    assert len(azure) == len(api) == len(view) == 1, records
    assert azure[0]["lane"] in ("lease-batch", "lease-inline") and azure[0]["batch"] == 1
    assert api[0]["lane"] in ("lease-batch", "lease-inline") and api[0]["batch"] == 1
    assert view[0]["lane"] == "lease"
    for record in (azure[0], api[0], view[0]):
        assert record["status"] == 201
        moments = [record[step] for step in STEPS]  # every step, in order
        assert moments == sorted(moments), record
