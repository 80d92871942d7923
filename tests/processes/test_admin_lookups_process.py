"""Issue 48 through a real server process of one worker: a view-only staff
user's lookup URLs (a catastrophic regular expression on the history's
request ids, which on the old code ran in SQLite's row loop holding the GIL
for minutes; a bisection of a held lease's id) are answered 400 while a
bystander keeps renewing its lease through the Azure door, every renewal and
/health/live answered; and a full lease id typed into the admin's search
appears in the access log only as its fingerprint."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid

import pytest
import requests
from azure.storage.blob import BlobServiceClient

from leases.domain import fingerprints
from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests.server_process import ROOT, Instance, prepare

pytestmark = pytest.mark.processes

PASSWORD = "view-only-" + "x" * 8
REGEX = "^(.|.){26}!"  # 2**26 backtracking steps per request id: seconds per row
VIEWER = f"""
from django.contrib.auth.models import Permission, User
u = User.objects.create_user("viewer", password={PASSWORD!r}, is_staff=True)
u.user_permissions.add(*Permission.objects.filter(content_type__app_label="leases",
                                                   codename__in=("view_blob", "view_container", "view_leaseevent")))
"""
ADMIN_TIMEOUT = 60  # the old code's answer never came within it


def _login(server) -> requests.Session:
    session = requests.Session()
    session.get(f"{server.url}/admin/login/", timeout=30)
    done = session.post(f"{server.url}/admin/login/", allow_redirects=False, timeout=30,
                        data={"username": "viewer", "password": PASSWORD, "next": "/admin/",
                              "csrfmiddlewaretoken": session.cookies["csrftoken"]})
    assert done.status_code == 302, done.text[:500]
    return session


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the module's two tests (each on a container of its own),
    the view-only staff user made once."""
    tmp_path = tmp_path_factory.mktemp("lookups")
    database = tmp_path / "leasehold.sqlite3"
    env = prepare(str(database), tmp_path)
    subprocess.run([sys.executable, "manage.py", "shell", "-c", VIEWER], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    instance = Instance(str(database), tmp_path, "server", workers=1)
    instance.env.update(LEASEHOLD_ACCESS_LOG="on", LEASEHOLD_LOG_LEVEL="info")
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()


def test_lookup_urls_are_refused_while_a_bystander_renews(server):
    service = BlobServiceClient.from_connection_string(
        f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
        f"BlobEndpoint={server.url}/{DEV_ACCOUNT};", retry_total=0)
    container = service.create_container("attacked")
    lease = container.upload_blob("job.lock", b"x").acquire_lease(lease_duration=15)
    for _ in range(10):  # events whose request ids the expression would run on
        lease.renew()
    admin = _login(server)
    answers: dict[str, object] = {}

    def attack(name: str, params: dict) -> None:
        try:
            answers[name] = admin.get(f"{server.url}/admin/leases/{name}/", params=params,
                                      timeout=ADMIN_TIMEOUT).status_code
        except requests.RequestException as exc:
            answers[name] = exc

    attacks = [threading.Thread(target=attack, args=("leaseevent", {"request_id__regex": REGEX})),
               threading.Thread(target=attack, args=("blob", {"lease_id__lt": str(uuid.UUID(int=2**127))})),
               threading.Thread(target=attack, args=("container", {"name__regex": REGEX}))]
    for thread in attacks:
        thread.start()
    renewed = 0
    # The bystander renews for as long as the attacks are unanswered (and once more after).
    while any(thread.is_alive() for thread in attacks) or renewed == 0:
        lease.renew()
        renewed += 1
        live = requests.get(f"{server.url}/health/live", timeout=ADMIN_TIMEOUT)
        assert live.status_code == 200
        if renewed > 200:
            break
    for thread in attacks:
        thread.join(ADMIN_TIMEOUT)
    assert answers == {"leaseevent": 400, "blob": 400, "container": 400}, answers
    lease.renew()  # still the holder's lease
    assert "Filtering by request_id__regex not allowed" in server.output()


def test_a_lease_id_searched_in_the_admin_is_a_fingerprint_in_the_access_log(server):
    service = BlobServiceClient.from_connection_string(
        f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
        f"BlobEndpoint={server.url}/{DEV_ACCOUNT};", retry_total=0)
    lease = service.create_container("searched").upload_blob("job.lock", b"x").acquire_lease(lease_duration=60)
    admin = _login(server)
    for url, term in (("blob", lease.id), ("leaseevent", "{" + lease.id.upper() + "}")):
        page = admin.get(f"{server.url}/admin/leases/{url}/", params={"q": term}, timeout=30)
        assert page.status_code == 200 and "job.lock" in page.text
    log = server.output()
    assert f"/admin/leases/blob/?q=fingerprint:{fingerprints.of(lease.id)}" in log, log[-2000:]
    assert lease.id not in log.lower() and uuid.UUID(lease.id).hex not in log.lower()
