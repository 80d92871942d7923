"""The client package installs on its own: a fresh virtualenv, `pip install
./client`, and it imports with Django nowhere in sight."""

from __future__ import annotations

import subprocess
import sys

from tests.client.helpers import REPO

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
    # Without pip of its own (quicker): this venv's pip installs into it (--python).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--disable-pip-version-check", str(REPO / "client")],
                   check=True, timeout=600, capture_output=True)
    out = subprocess.run([str(python), "-c", CHECK], check=True, capture_output=True, text=True, cwd=tmp_path,
                         timeout=60)
    assert str(venv) in out.stdout  # the installed copy, not the source tree
