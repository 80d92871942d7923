"""A production server process (python -m config.serve) on a database of the
test's choosing, with its log in a file of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from .conftest import free_port
from tests.processes.test_processes import wait_for_port

ROOT = Path(__file__).resolve().parent.parent


def prepare(database: str, var_dir: Path) -> dict:
    """Migrate ``database`` and create the development account, as `make run`
    does; the environment a server on it needs."""
    env = {**os.environ, "LEASEHOLD_DATABASE": str(database), "LEASEHOLD_VAR_DIR": str(var_dir),
           "DJANGO_SETTINGS_MODULE": "config.settings"}
    for args in (["migrate", "--noinput", "-v0"], ["leasehold_setup", "--admin-password", "x" * 12]):
        subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True)
    return env


class Instance:
    """One production server process on ``database``."""

    def __init__(self, database: str, tmp: Path, name: str, workers: int = 2):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"{name}.log"
        self.env = {**os.environ, "LEASEHOLD_DATABASE": str(database), "LEASEHOLD_VAR_DIR": str(tmp),
                    "LEASEHOLD_BIND": f"127.0.0.1:{self.port}", "LEASEHOLD_WORKERS": str(workers),
                    "DJANGO_SETTINGS_MODULE": "config.settings"}
        self.proc = None

    def start(self) -> "Instance":
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "config.serve"], cwd=ROOT, env=self.env,
                                     start_new_session=True, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.proc, output=self.output)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.log.close()

    def output(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")
