"""A lease id is a capability: only the answer to the acquire or change that
made it (and a renew, which sent it) carries it. A real server process, with
its access log on, leases a blob and a container through the Azure SDK; then
every reader's view is scanned for the full ids: the JSON API's reads and
exports, the Azure door's reads, every admin page that shows a lease or an
event, the server's log and a /metrics scrape. The fingerprint finds the
events; a user who may view and change but not break cannot learn an id, so
cannot release another's lease."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import uuid
from datetime import datetime, timedelta

import pytest
import requests
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobServiceClient

from leases.domain import fingerprints
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests import azure_raw
from tests.server_process import ROOT, Instance, prepare

pytestmark = pytest.mark.processes

PASSWORD = "x" * 12  # the admin's, as server_process.prepare sets it
CONTAINER, BLOB, OTHER = "secrets", "job.lock", "other.lock"
USERS = """
import json
from django.contrib.auth.models import Permission, User
from leases.models.tokens import ApiToken
def user(name, *codenames, superuser=False):
    u = User.objects.create_user(name, password=None, is_superuser=superuser, is_staff=superuser)
    u.user_permissions.add(*Permission.objects.filter(content_type__app_label="leases", codename__in=codenames))
    return ApiToken.issue(user=u, name=name)[1]
VIEW = ("view_blob", "view_container", "view_leaseevent")
print(json.dumps({"root": user("root", superuser=True), "viewer": user("viewer", *VIEW),
                  "changer": user("changer", *VIEW, "change_blob", "change_container")}))
"""


@pytest.fixture(scope="module")
def leased(tmp_path_factory):
    """The server, the full ids it handed out, and the API tokens."""
    tmp = tmp_path_factory.mktemp("capability")
    database = tmp / "leasehold.sqlite3"
    env = prepare(str(database), tmp)
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c", USERS], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    tokens = json.loads(out.strip().splitlines()[-1])
    server = Instance(str(database), tmp, "server", workers=1)
    server.env.update(LEASEHOLD_ACCESS_LOG="on", LEASEHOLD_LOG_LEVEL="info",
                      LEASEHOLD_WATCHED_LEASES=f"{DEV_ACCOUNT}/{CONTAINER}/{BLOB}")
    server.start()
    try:
        service = BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
            f"BlobEndpoint={server.url}/{DEV_ACCOUNT};", retry_total=0)
        container = service.create_container(CONTAINER)
        blob = container.upload_blob(BLOB, b"x")
        container.upload_blob(OTHER, b"y")
        first = blob.acquire_lease(lease_duration=60)
        ids = [first.id]
        first.renew()
        changed = str(uuid.uuid4())
        first.change(changed)
        assert first.id == changed
        ids.append(changed)
        container_lease = container.acquire_lease(lease_duration=-1)
        ids.append(container_lease.id)
        # The holder reads its own blob with its id in the query string: the access log must not keep it.
        root = {"Authorization": f"Bearer {tokens['root']}"}
        own = requests.get(f"{server.url}/api/v1/blobs/{DEV_ACCOUNT}/{CONTAINER}/{BLOB}",
                           params={"lease_id": changed}, headers=root, timeout=30)
        assert own.status_code == 200, own.text
        # A lease another caller breaks: the breaker is answered without its id.
        other = container.get_blob_client(OTHER).acquire_lease(lease_duration=30)
        ids.append(other.id)
        broken = requests.post(f"{server.url}/api/v1/leases/break/{DEV_ACCOUNT}/{CONTAINER}/{OTHER}",
                               json={"break_period": 10}, headers=root, timeout=30)
        assert broken.status_code == 202 and broken.json()["lease_id"] is None, broken.text
        assert other.id not in broken.text
        yield server, database, ids, tokens, blob, first
    finally:
        server.stop()


def _no_id(text: str, ids: list[str], where: str) -> None:
    lowered = text.lower()
    for lease_id in ids:
        assert lease_id.lower() not in lowered and uuid.UUID(lease_id).hex not in lowered, \
            f"a full lease id in {where}"


def _login(server) -> requests.Session:
    session = requests.Session()
    session.get(f"{server.url}/admin/login/", timeout=30)
    done = session.post(f"{server.url}/admin/login/", allow_redirects=False, timeout=30,
                        data={"username": "admin", "password": PASSWORD, "next": "/admin/",
                              "csrfmiddlewaretoken": session.cookies["csrftoken"]})
    assert done.status_code == 302, done.text[:500]
    return session


def _rows(database, sql: str) -> list:
    with sqlite3.connect(database) as conn:
        return [row[0] for row in conn.execute(sql)]


def test_no_reader_sees_a_full_lease_id(leased):
    server, database, ids, tokens, _, _ = leased
    base, api = server.url, f"{server.url}/api/v1"
    seen: dict[str, str] = {}
    for who in ("root", "viewer", "changer"):
        headers = {"Authorization": f"Bearer {tokens[who]}"}
        for url, params in (
                (f"{api}/blobs/{DEV_ACCOUNT}/{CONTAINER}/{BLOB}", {}),
                (f"{api}/blobs/{DEV_ACCOUNT}/{CONTAINER}/{OTHER}", {}),
                (f"{api}/containers/{DEV_ACCOUNT}/{CONTAINER}", {}),
                (f"{api}/blobs/", {"account": DEV_ACCOUNT}), (f"{api}/containers/", {}),
                (f"{api}/events/", {}), (f"{api}/events/", {"ordering": "id"}),
                (f"{api}/events/export/", {"format": "csv"}), (f"{api}/events/export/", {"format": "ndjson"}),
                (f"{api}/events/holder/", {"account": DEV_ACCOUNT, "container": CONTAINER, "blob": BLOB}),
                (f"{api}/events/holder/", {"account": DEV_ACCOUNT, "container": CONTAINER})):
            response = requests.get(url, params=params, headers=headers, timeout=30)
            assert response.status_code == 200, (who, url, response.text[:300])
            seen[f"{who} GET {response.url}"] = response.text
        blob_view = requests.get(f"{api}/blobs/{DEV_ACCOUNT}/{CONTAINER}/{BLOB}", headers=headers, timeout=30)
        assert blob_view.json()["lease"]["lease_fingerprint"] == fingerprints.of(ids[1])
    metrics = requests.get(f"{base}/metrics", headers={"Authorization": f"Bearer {tokens['root']}"}, timeout=30)
    assert metrics.status_code == 200 and "leasehold_lease_requests" in metrics.text
    seen["/metrics"] = metrics.text
    # The Azure door's reads carry no id, as on Azure.
    for path in (f"/{DEV_ACCOUNT}/{CONTAINER}/{BLOB}", f"/{DEV_ACCOUNT}/{CONTAINER}?restype=container",
                 f"/{DEV_ACCOUNT}/{CONTAINER}?restype=container&comp=list", f"/{DEV_ACCOUNT}?comp=list"):
        response = azure_raw.signed("GET", base, path)
        assert response.status_code == 200, (path, response.text[:300])
        seen[f"azure GET {path}"] = response.text + json.dumps(dict(response.headers))

    admin = _login(server)
    blob_pks = _rows(database, f"SELECT id FROM leases_blob ORDER BY name = '{BLOB}' DESC")  # ours first
    container_pks = _rows(database, "SELECT id FROM leases_container")
    event_pks = _rows(database, "SELECT id FROM leases_leaseevent")
    changed_at = _rows(database, "SELECT occurred_at FROM leases_leaseevent WHERE action = 'change'")[0]
    held_at = (datetime.fromisoformat(changed_at) + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S")
    held_at += "&tz=UTC"
    pages = ["/admin/", "/admin/leases/leaseevent/dashboard/", "/admin/leases/blob/", "/admin/leases/container/",
             "/admin/leases/blob/holders/", "/admin/leases/container/holders/", "/admin/leases/leaseevent/",
             "/admin/leases/leaseevent/export.csv",
             f"/admin/leases/leaseevent/?account={DEV_ACCOUNT}&container={CONTAINER}&blob={BLOB}",
             f"/admin/leases/leaseevent/holder/?account={DEV_ACCOUNT}&container={CONTAINER}&blob={BLOB}"
             f"&held_at={held_at}"]
    for kind, pks in (("blob", blob_pks), ("container", container_pks)):
        for pk in pks:
            pages += [f"/admin/leases/{kind}/{pk}/change/", f"/admin/leases/{kind}/{pk}/release/",
                      f"/admin/leases/{kind}/{pk}/break/", f"/admin/leases/{kind}/{pk}/change/?held_at={held_at}"]
    pages += [f"/admin/leases/leaseevent/{pk}/change/" for pk in event_pks]
    for page in pages:
        response = admin.get(f"{base}{page}", timeout=30)
        assert response.status_code == 200, (page, response.status_code)
        seen[f"admin {page}"] = response.text
    # The pages do show the fingerprints, where they showed ids.
    assert fingerprints.of(ids[1]) in seen[f"admin /admin/leases/blob/{blob_pks[0]}/change/"]
    assert any(fingerprints.of(ids[1]) in seen[f"admin {page}"] for page in pages if "held_at" in page)
    assert fingerprints.of(ids[1]) in seen[f"admin {pages[9]}"]  # the history's own "who held it"
    assert fingerprints.of(ids[0]) in seen["admin /admin/leases/leaseevent/export.csv"]

    for where, text in seen.items():
        _no_id(text, ids, where)
    log = server.output()
    assert "GET /api/v1/blobs/" in log and "lease_id=fingerprint:" + fingerprints.of(ids[1]) in log, log[-2000:]
    _no_id(log, ids, "the server's log")


def test_the_fingerprint_or_the_full_id_finds_the_lease_s_events(leased):
    server, _, ids, tokens, _, _ = leased
    api = f"{server.url}/api/v1"
    headers = {"Authorization": f"Bearer {tokens['viewer']}"}

    def actions(**params) -> list[str]:
        response = requests.get(f"{api}/events/", params={**params, "ordering": "id"}, headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return [event["action"] for event in response.json()["results"]]

    first, changed = ids[0], ids[1]
    assert actions(lease_fingerprint=fingerprints.of(first)) == ["acquire", "renew", "change"]
    assert actions(lease_id=first) == ["acquire", "renew", "change"]
    assert actions(lease_fingerprint=fingerprints.of(changed)) == ["change"]
    assert actions(lease_id="{" + changed.upper() + "}") == ["change"]
    refused = requests.get(f"{api}/events/", params={"lease_fingerprint": "not-one"}, headers=headers, timeout=30)
    assert refused.status_code == 400

    admin = _login(server)
    for term in (fingerprints.of(first), first, first.upper()):
        page = admin.get(f"{server.url}/admin/leases/leaseevent/", params={"q": term}, timeout=30).text
        assert len(re.findall(r'<td class="field-action_and_outcome">acquire<', page)) == 1, term
        assert len(re.findall(r'<td class="field-action_and_outcome">renew<', page)) == 1, term


def test_a_user_who_may_change_but_not_break_cannot_release_another_s_lease(leased):
    server, _, ids, tokens, blob, holder = leased
    api = f"{server.url}/api/v1"
    headers = {"Authorization": f"Bearer {tokens['changer']}"}
    url = f"{api}/leases/release/{DEV_ACCOUNT}/{CONTAINER}/{BLOB}"
    shown = requests.get(f"{api}/blobs/{DEV_ACCOUNT}/{CONTAINER}/{BLOB}", headers=headers, timeout=30).json()
    fingerprint = shown["lease"]["lease_fingerprint"]
    # All a reader learns is the fingerprint, and it is no lease id.
    as_id = requests.post(url, json={"lease_id": fingerprint}, headers=headers, timeout=30)
    assert (as_id.status_code, as_id.json()["code"]) == (400, "InvalidHeaderValue")
    guessed = requests.post(url, json={"lease_id": str(uuid.uuid4())}, headers=headers, timeout=30)
    assert (guessed.status_code, guessed.json()["code"]) == (409, "LeaseIdMismatchWithLeaseOperation")
    may_not = requests.post(f"{api}/leases/break/{DEV_ACCOUNT}/{CONTAINER}/{BLOB}", json={}, headers=headers,
                            timeout=30)
    assert may_not.status_code == 403
    acquire = requests.post(f"{api}/leases/acquire/{DEV_ACCOUNT}/{CONTAINER}/{BLOB}", json={"duration": 15},
                            headers=headers, timeout=30)
    assert (acquire.status_code, acquire.json()["code"]) == (409, "LeaseAlreadyPresent")
    _no_id(as_id.text + guessed.text + may_not.text + acquire.text, ids, "the refusals")
    holder.renew()  # the holder keeps its lease
    assert blob.get_blob_properties().lease.state == "leased"
    with pytest.raises(HttpResponseError):  # and a made-up id does not hold it
        blob.get_blob_properties(lease=str(uuid.uuid4()))
