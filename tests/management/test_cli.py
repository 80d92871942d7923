"""The operator's shell commands go through the same services and history."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from leases.domain import fingerprints
from leases.models import LeaseEvent

pytestmark = pytest.mark.also_postgres


def run(*args) -> str:
    out = StringIO()
    call_command("leasehold_lease", *args, stdout=out)
    return out.getvalue()


def test_show_break_release(service, clock):
    clock.freeze()
    blob = service.create_container("ops").upload_blob("stuck", b"x")
    lease = blob.acquire_lease(lease_duration=30)
    shown = json.loads(run("show", "devstoreaccount1/ops/stuck"))
    assert (shown["state"], shown["lease_fingerprint"], shown["seconds_left"], shown["holder"]) == (
        "leased", fingerprints.of(lease.id), 30, "account:devstoreaccount1")
    assert lease.id not in json.dumps(shown)
    assert run("break", "devstoreaccount1/ops/stuck", "--period", "0", "--reason", "stuck job") == "broken in 0 s\n"
    event = LeaseEvent.objects.order_by("-id").first()
    assert (event.action, event.via, event.reason, event.actor[:4]) == ("break", "cli", "stuck job", "cli:")
    assert blob.get_blob_properties().lease.state == "broken"
    assert run("release", "devstoreaccount1/ops/stuck") == "released\n"
    assert blob.get_blob_properties().lease.state == "available"


def test_cli_refusals_are_clear(service):
    service.create_container("ops")
    with pytest.raises(CommandError, match="409 LeaseNotPresentWithLeaseOperation"):
        run("break", "devstoreaccount1/ops")
    with pytest.raises(CommandError, match="404 BlobNotFound"):
        run("show", "devstoreaccount1/ops/none")
    with pytest.raises(CommandError, match="400 InvalidHeaderValue"):
        run("break", "devstoreaccount1/ops", "--period", "99")
    with pytest.raises(CommandError, match="account/container"):
        run("show", "justone")


@pytest.mark.skipif(connection.vendor == "postgresql", reason="a setting, not the database: the SQLite pass runs it")
@pytest.mark.parametrize("level, ok", [("info", True), ("WARNING", True), ("debug", True), ("loud", False)])
def test_log_level_setting_is_checked_at_start(level, ok):
    """LEASEHOLD_LOG_LEVEL as the README writes it (lower case) starts the
    server's Django; a misspelt level stops it with a message saying why."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "LEASEHOLD_LOG_LEVEL": level}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=Path(__file__).resolve().parents[2],
                          env=env, capture_output=True, text=True, timeout=120)
    assert (done.returncode == 0) == ok, done.stderr[-2000:]
    if not ok:
        assert "LEASEHOLD_LOG_LEVEL must be one of" in done.stderr


@pytest.mark.django_db
def test_a_lost_admin_password_is_reset_by_leasehold_setup(monkeypatch):
    """The documented way back from a lost admin password (docs/guide/operations.md)."""
    from django.contrib.auth import authenticate, get_user_model

    monkeypatch.delenv("LEASEHOLD_ADMIN_PASSWORD", raising=False)
    call_command("leasehold_setup", admin_password="first-one", stdout=StringIO())
    again = StringIO()
    call_command("leasehold_setup", stdout=again)  # a plain re-run leaves the password alone
    assert "Admin" not in again.getvalue() and authenticate(username="admin", password="first-one")
    get_user_model().objects.filter(username="admin").update(is_active=False)  # locked out, too
    out = StringIO()
    call_command("leasehold_setup", reset_admin_password=True, stdout=out)
    new = out.getvalue().split("Password: ")[1].split()[0]
    assert "Admin password reset. User: admin" in out.getvalue()
    assert authenticate(username="admin", password=new) and not authenticate(username="admin", password="first-one")
