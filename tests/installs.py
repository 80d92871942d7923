"""Installing into a fresh virtual environment as the tests do: with uv where the test environment
has it (make installs it beside pip, docs/decisions/0023: the same PEP 517 build and install, several
times quicker, its cache shared), else with pip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

UV = Path(sys.executable).parent / "uv"


def _pip_or_uv() -> list[str]:
    return [str(UV), "pip"] if UV.exists() else [sys.executable, "-m", "pip", "--disable-pip-version-check"]


def fresh_venv(path: Path) -> Path:
    """A new virtual environment without pip of its own; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    return path / "bin" / "python"


def install(python: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``pip install -q *args`` into ``python``'s environment."""
    return subprocess.run([*_pip_or_uv(), "install", "-q", "--python", str(python), *args],
                          capture_output=True, text=True, timeout=timeout)


def build_wheel(source: Path, out: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The wheel of ``source`` (no dependencies) in ``out``."""
    command = ([str(UV), "build", "-q", "--wheel", "--out-dir", str(out), str(source)] if UV.exists()
               else [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)])
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
