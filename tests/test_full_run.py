"""What `make test` asks of a full run (LEASEHOLD_FULL_RUN=1): a skip whose
reason tests/skips.py does not justify fails its test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_full_run_fails_an_unjustified_skip_and_keeps_a_justified_one(tmp_path):
    (tmp_path / "conftest.py").write_text("from tests.skips import pytest_runtest_makereport  # noqa: F401\n")
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n"
        "def test_tool_missing():\n    pytest.skip('systemd-analyze is not installed here')\n"
        "@pytest.mark.skipif(\"1 == 1\")\ndef test_condition():\n    pass\n"
        "def test_other_database():\n    pytest.skip(\"NOTIFY is PostgreSQL's\")\n")
    run = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
           str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # no plugin is needed
    full = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, env={**env, "LEASEHOLD_FULL_RUN": "1"})
    assert full.returncode == 1, full.stdout
    assert "1 failed, 1 skipped, 1 error" in full.stdout, full.stdout
    assert "'systemd-analyze is not installed here'" in full.stdout and "'condition: 1 == 1'" in full.stdout


def test_a_skip_is_justified_only_in_the_pass_of_the_other_database(tmp_path):
    """A PostgreSQL test skipped in the PostgreSQL pass (or a SQLite one in
    the SQLite pass) tested less than the run says: it fails there, and is
    kept as a skip in the other pass."""
    (tmp_path / "conftest.py").write_text("from tests.skips import pytest_runtest_makereport  # noqa: F401\n")
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n"
        "def test_notify():\n    pytest.skip(\"NOTIFY is PostgreSQL's\")\n"
        "def test_writer_lock():\n    pytest.skip(\"the writer lock is SQLite's\")\n")
    run = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
           str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "LEASEHOLD_DATABASE"}
    env.update(PYTHONPATH=str(ROOT), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", LEASEHOLD_FULL_RUN="1")
    passes = {"sqlite": {}, "postgresql": {"LEASEHOLD_DATABASE": "postgresql://leasehold@127.0.0.1:5432/leasehold"}}
    kept = {"sqlite": ("test_writer_lock", "NOTIFY is PostgreSQL's"),
            "postgresql": ("test_notify", "the writer lock is SQLite's")}
    for name, database in passes.items():
        done = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, env={**env, **database})
        failed, skipped = kept[name]
        assert done.returncode == 1 and "1 failed, 1 skipped" in done.stdout, done.stdout
        assert f"FAILED test_skips.py::{failed}" in done.stdout, done.stdout
        assert f"in the {name} pass, which is the one that must run it" in done.stdout, done.stdout
        assert "SKIPPED [1] test_skips.py" in done.stdout and skipped in done.stdout, done.stdout
