"""The client package installs on its own: a fresh virtualenv, `pip install
./client`, and it imports with Django nowhere in sight."""

from __future__ import annotations

import subprocess

from tests.client.helpers import REPO
from tests.installs import fresh_venv, install

CHECK = """
import importlib.util, leasehold_client
from leasehold_client import AutoRenewLease, LeaderElection, OncePer, do_once
assert importlib.util.find_spec("django") is None, "django is installed"
assert importlib.util.find_spec("azure.storage.blob") is not None
assert importlib.util.find_spec("prometheus_client") is None, "prometheus_client is installed"
election = LeaderElection(None)  # leadership is visible without prometheus_client; its collector says what is missing
assert (election.is_leader, election.transitions, election.elected_at) == (False, 0, None)
try:
    election.collector("jobs")
except ImportError as exc:
    assert "leasehold-client[prometheus]" in str(exc), exc
else:
    raise AssertionError("collector() without prometheus_client")
print(leasehold_client.__file__)
"""


def test_the_client_installs_in_a_fresh_venv_without_django(tmp_path):
    venv = tmp_path / "venv"
    python = fresh_venv(venv)
    installed = install(python, str(REPO / "client"))
    assert installed.returncode == 0, installed.stderr[-3000:]
    out = subprocess.run([str(python), "-c", CHECK], check=True, capture_output=True, text=True, cwd=tmp_path,
                         timeout=60)
    assert str(venv) in out.stdout  # the installed copy, not the source tree
