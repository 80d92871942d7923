"""The installable server: the wheel a PEP 517 build of the checkout makes,
installed into a fresh virtual environment outside the repository, gives a
`leasehold` command that lists its commands and serves the Azure SDK, the
admin and its static files from a data directory of its own."""

from __future__ import annotations

import os
import signal
import site
import subprocess
import time
from pathlib import Path

import pytest
import requests
from azure.storage.blob import BlobServiceClient

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests.conftest import free_port
from tests.installs import build_wheel, fresh_venv, install

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The fresh environment's bin directory, the wheel installed in it (its
    dependencies seen from this environment's site-packages, not reinstalled)."""
    tmp = tmp_path_factory.mktemp("install")
    built = build_wheel(ROOT, tmp / "dist")
    assert built.returncode == 0, built.stderr[-3000:]
    wheel, = (tmp / "dist").glob("leasehold-*.whl")
    venv = tmp / "venv"
    python = fresh_venv(venv)
    purelib = next(venv.glob("lib/python*/site-packages"))
    # This environment's packages (Django, uvicorn, ...) after the venv's own; its editable
    # install of this checkout is a .pth here, which a path added this way does not run.
    (purelib / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    result = install(python, "--no-deps", "--no-compile", str(wheel), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return venv / "bin"


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEHOLD_", "DJANGO_", "PYTHON"))}
    return {**env, **extra}


def test_help_lists_the_commands(installed, tmp_path):
    out = subprocess.run([str(installed / "leasehold"), "--help"], cwd=tmp_path, env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for command in ("serve", "migrate", "setup", "leasehold_prune", "createsuperuser"):
        assert f"  {command}" in out.stdout, out.stdout
    where = subprocess.run([str(installed / "leasehold"), "--data-dir", str(tmp_path / "d"), "shell", "-c",
                            "import config, leases; print(leases.__file__, config.__file__)"],
                           cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert str(ROOT) not in where.stdout and str(installed.parent) in where.stdout, where.stdout


def test_leasehold_serve_from_any_directory(installed, tmp_path):
    port = free_port()
    data = tmp_path / "data"
    proc = subprocess.Popen([str(installed / "leasehold"), "--data-dir", str(data), "serve"], cwd=tmp_path,
                            env=_env(LEASEHOLD_BIND=f"127.0.0.1:{port}", LEASEHOLD_WORKERS="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        seen = b""
        deadline = time.monotonic() + 90
        while b"Leasehold ready on" not in seen:
            assert proc.stdout is not None  # spawned with a pipe
            line = proc.stdout.readline()
            assert line or proc.poll() is None, seen.decode(errors="replace")
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            seen += line
        base = f"http://127.0.0.1:{port}"
        service = BlobServiceClient.from_connection_string(
            f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
            f"BlobEndpoint={base}/{DEV_ACCOUNT};")
        container = service.create_container("installed")
        lease = container.acquire_lease(lease_duration=15)
        assert container.get_container_properties().lease.state == "leased"
        lease.release()
        assert requests.get(f"{base}/admin/login/", timeout=10).status_code == 200
        css = requests.get(f"{base}/static/admin/css/base.css", timeout=10)
        assert css.status_code == 200 and "text/css" in css.headers["Content-Type"]
        icon = requests.get(f"{base}/static/leases/favicon.svg", timeout=10)
        assert icon.status_code == 200, icon.status_code
        assert (data / "leasehold.sqlite3").exists() and (data / "static" / "admin").is_dir()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=30)


def test_the_systemd_unit_is_valid(tmp_path):
    unit = ROOT / "docs" / "deploy" / "leasehold.service"
    text = unit.read_text()
    assert "ExecStart=/opt/leasehold/bin/leasehold --data-dir ${STATE_DIRECTORY} serve" in text
    analyze = subprocess.run(["systemd-analyze", "--version"], capture_output=True) if os.path.exists(
        "/usr/bin/systemd-analyze") else None
    if analyze is None or analyze.returncode != 0:
        pytest.skip("systemd-analyze is not installed here")
    # verify needs the binary it names: a stand-in at a path of this test's
    fake = tmp_path / "leasehold"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    copy = tmp_path / "leasehold.service"
    copy.write_text(text.replace("/opt/leasehold/bin/leasehold", str(fake)))
    result = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    problems = [line for line in result.stderr.splitlines() if str(copy) in line or "leasehold.service" in line]
    assert not problems, result.stderr
