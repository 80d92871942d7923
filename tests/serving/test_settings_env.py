"""LEASEHOLD_* variables are read once, into one typed object
(leases/conf/__init__.py), through the parsers of leases/conf/env.py: every bad value is
refused with a message naming the variable, an unset or empty one takes the
default, the settings module stops the start on a bad value, nothing else
reads the environment, and the configuration reference lists exactly the
variables read."""

from __future__ import annotations

from datetime import timedelta
import ast
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from leases import conf
from leases.conf.env import SettingError, env_bool, env_choice, env_float, env_int, env_log_level, env_str

REPO = Path(__file__).resolve().parents[2]


def test_unset_and_empty_take_the_default():
    cases: list[tuple[Callable[..., object], object]] = [(env_int, 7), (env_float, 0.5), (env_bool, True),
                                                         (env_str, "x")]
    for helper, default in cases:
        assert helper("LEASEHOLD_X", default, environ={}) == default
        assert helper("LEASEHOLD_X", default, environ={"LEASEHOLD_X": ""}) == default
    assert env_choice("LEASEHOLD_X", "b", ("a", "b"), environ={"LEASEHOLD_X": ""}) == "b"
    assert env_str("LEASEHOLD_X", "x", allow_empty=True, environ={"LEASEHOLD_X": ""}) == ""


@pytest.mark.parametrize("text, value", [("5", 5), (" 12 ", 12), ("0", 0), ("+3", 3)])
def test_env_int(text, value):
    assert env_int("LEASEHOLD_X", 1, at_least=0, environ={"LEASEHOLD_X": text}) == value


@pytest.mark.parametrize("text", ["two", "1.5", "1e3", "1_000", "\u0663", "-1"])
def test_env_int_refusals_name_the_variable(text):
    with pytest.raises(SettingError, match=r"^LEASEHOLD_X must be a whole number >= 0, not " + re.escape(repr(text))):
        env_int("LEASEHOLD_X", 1, at_least=0, environ={"LEASEHOLD_X": text})


@pytest.mark.parametrize("text, value", [("0.1", 0.1), ("5", 5.0), (" 1e3 ", 1000.0), ("0", 0.0)])
def test_env_float(text, value):
    assert env_float("LEASEHOLD_X", 1, at_least=0, environ={"LEASEHOLD_X": text}) == value


@pytest.mark.parametrize("text, expected", [("soon", ">= 0"), ("nan", ">= 0"), ("inf", ">= 0"), ("-0.5", ">= 0")])
def test_env_float_refusals(text, expected):
    with pytest.raises(SettingError, match=f"^LEASEHOLD_X must be a number {expected}, not"):
        env_float("LEASEHOLD_X", 1, at_least=0, environ={"LEASEHOLD_X": text})
    with pytest.raises(SettingError, match="^LEASEHOLD_Y must be a number > 0, not '0'"):
        env_float("LEASEHOLD_Y", 1, above=0, environ={"LEASEHOLD_Y": "0"})


@pytest.mark.parametrize("text, value", [("1", True), ("TRUE", True), ("yes", True), (" on ", True),
                                         ("0", False), ("False", False), ("no", False), ("off", False)])
def test_env_bool(text, value):
    assert env_bool("LEASEHOLD_X", not value, environ={"LEASEHOLD_X": text}) is value


def test_env_bool_refuses_anything_else():
    with pytest.raises(SettingError, match="^LEASEHOLD_X must be 1, true, yes or on, or 0, false, no or off, not '2'"):
        env_bool("LEASEHOLD_X", environ={"LEASEHOLD_X": "2"})


def test_env_choice_and_log_level():
    assert env_choice("LEASEHOLD_X", "FULL", ("FULL", "NORMAL"), environ={"LEASEHOLD_X": "normal"}) == "NORMAL"
    assert env_log_level({"LEASEHOLD_LOG_LEVEL": "INFO"}) == "info"
    assert env_log_level({}) == "warning"
    with pytest.raises(SettingError, match="^LEASEHOLD_X must be FULL or NORMAL, not 'fast'"):
        env_choice("LEASEHOLD_X", "FULL", ("FULL", "NORMAL"), environ={"LEASEHOLD_X": "fast"})
    with pytest.raises(SettingError, match="^LEASEHOLD_LOG_LEVEL must be one of critical, error, warning, info, "
                                           "debug, not 'loud'"):
        env_log_level({"LEASEHOLD_LOG_LEVEL": "loud"})


def test_env_str_pattern():
    assert env_str("LEASEHOLD_X", "a", pattern="[a-z]+", environ={"LEASEHOLD_X": "abc"}) == "abc"
    with pytest.raises(SettingError, match="^LEASEHOLD_X must be letters, not 'ab1'"):
        env_str("LEASEHOLD_X", "a", pattern="[a-z]+", expected="letters", environ={"LEASEHOLD_X": "ab1"})


def test_a_setting_error_is_both_improperly_configured_and_a_value_error():
    assert issubclass(SettingError, ImproperlyConfigured) and issubclass(SettingError, ValueError)


@pytest.mark.parametrize("name, value, message", [
    ("LEASEHOLD_SQLITE_MMAP_MB", "lots", "LEASEHOLD_SQLITE_MMAP_MB must be a whole number >= 0, not 'lots'"),
    ("LEASEHOLD_WRITE_WAIT", "-1", "LEASEHOLD_WRITE_WAIT must be a number >= 0, not '-1'"),
    ("LEASEHOLD_SQLITE_SYNC_OUTSIDE_LOCK", "maybe", "LEASEHOLD_SQLITE_SYNC_OUTSIDE_LOCK must be 1, true"),
    ("LEASEHOLD_SQLITE_SYNCHRONOUS", "fast", "LEASEHOLD_SQLITE_SYNCHRONOUS must be one of FULL, NORMAL, EXTRA"),
    ("LEASEHOLD_API_RATE", "lots", "LEASEHOLD_API_RATE must be requests/period, e.g. 1200/minute"),
    ("LEASEHOLD_LOG_TRACEBACKS", "sure", "LEASEHOLD_LOG_TRACEBACKS must be 1, true"),
    ("LEASEHOLD_DEV_ACCOUNT", "nope", "LEASEHOLD_DEV_ACCOUNT must be 1, true"),
])
def test_settings_refuse_a_bad_value_at_start(tmp_path, name, value, message):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "LEASEHOLD_VAR_DIR": str(tmp_path), name: value}
    run = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and message in run.stderr, run.stderr[-2000:]


@pytest.mark.parametrize("value", ["uvicorn", "hypercorn"])
def test_a_removed_variable_stops_the_start_saying_it_was_removed(tmp_path, value):
    """LEASEHOLD_FRONT chose between two fronts; uvicorn is the only one now.
    Set, it is refused rather than ignored as an unknown variable is."""
    with pytest.raises(SettingError, match="LEASEHOLD_FRONT was removed: uvicorn is the only HTTP front"):
        conf.load({"LEASEHOLD_FRONT": value})
    assert conf.load({"LEASEHOLD_FRONT": "", "LEASEHOLD_SOMETHING_UNKNOWN": "x"}).bind == ("127.0.0.1", 10000)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "LEASEHOLD_VAR_DIR": str(tmp_path),
           "LEASEHOLD_FRONT": value}
    run = subprocess.run([sys.executable, "-m", "serving.server"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode != 0 and "LEASEHOLD_FRONT was removed" in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr


def test_settings_read_typed_values(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "LEASEHOLD_VAR_DIR": str(tmp_path),
           "LEASEHOLD_SQLITE_SYNC_OUTSIDE_LOCK": "off", "LEASEHOLD_WRITE_WAIT": "2.5", "LEASEHOLD_API_RATE": "",
           "LEASEHOLD_SQLITE_SYNCHRONOUS": "normal", "LEASEHOLD_CLOCK_SKEW_SECONDS": " 60 "}
    env.pop("LEASEHOLD_DATABASE", None)
    code = ("from django.conf import settings as s; o = s.DATABASES['default']['OPTIONS'];"
            "print(o['sync_outside_lock'], o['write_wait'], repr(s.REST_FRAMEWORK['DEFAULT_THROTTLE_RATES']['api']),"
            " 'synchronous=NORMAL' in o['init_command'], s.LEASEHOLD_CLOCK_SKEW_SECONDS)")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert run.stdout.split() == ["False", "2.5", "''", "True", "60"], run.stderr[-2000:]


# ------------------------------------------------------------------ the secret key file

def _settings_in(var_dir: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LEASEHOLD_SECRET_KEY"}
    env.update(LEASEHOLD_VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE="config.settings",
               LEASEHOLD_DATABASE=str(var_dir / "leasehold.sqlite3"))  # the var dir's key is SQLite's
    return subprocess.run([sys.executable, "-c", "from django.conf import settings; print(settings.SECRET_KEY)"],
                          cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
                          timeout=60)


def test_an_empty_secret_key_file_stops_the_start_naming_the_file(tmp_path):
    (tmp_path / "secret_key").write_text("")  # as a power cut right after the first start left it
    done = _settings_in(tmp_path)
    assert done.returncode != 0
    assert f"the secret key file {tmp_path / 'secret_key'} is empty" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_secret_key_is_made_once_whole_and_private_even_by_processes_starting_together(tmp_path):
    starts = [subprocess.Popen([sys.executable, "-c", "from django.conf import settings; print(settings.SECRET_KEY)"],
                               cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, text=True,
                               env={**{k: v for k, v in os.environ.items() if k != "LEASEHOLD_SECRET_KEY"},
                                    "LEASEHOLD_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "config.settings",
                                    "LEASEHOLD_DATABASE": str(tmp_path / "leasehold.sqlite3")})
              for _ in range(4)]
    keys = {p.communicate(timeout=60)[0].strip() for p in starts}
    stored = (tmp_path / "secret_key").read_text()
    assert keys == {stored} and len(stored) >= 50
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".secret_key")] == []  # no temporary left
    assert _settings_in(tmp_path).stdout.strip() == stored  # read again, not made again


# ------------------------------------------------------------------ one settings object

DOCUMENTED = re.compile(r"^\| `(LEASEHOLD_[A-Z_]+)` \|", re.M)
TEST_ONLY = {"LEASEHOLD_SCREENS"}  # read by the browser tests (tests/browser), not the server


def test_the_reference_lists_exactly_the_variables_read():
    documented = DOCUMENTED.findall((REPO / "docs/reference/configuration.md").read_text())
    assert len(documented) == len(set(documented))
    assert set(documented) - TEST_ONLY == set(conf.variables())
    assert all(any(name in p.read_text() for p in (REPO / "tests").rglob("*.py")) for name in TEST_ONLY)


def test_defaults_and_typed_values():
    defaults = conf.load({"LEASEHOLD_VAR_DIR": "/srv/lh"})
    assert defaults.database == "/srv/lh/leasehold.sqlite3" and defaults.bind == ("127.0.0.1", 10000)
    assert defaults.lease_threads is None and defaults.retention_renewals == timedelta(days=1) and not defaults.on_postgres
    given = conf.load({"LEASEHOLD_BIND": "[::1]:8080", "LEASEHOLD_THREADS": "3", "LEASEHOLD_RETENTION_EVENTS": "2h",
                       "LEASEHOLD_WATCHED_LEASES": " a/c , a/c/b/ ", "LEASEHOLD_DATABASE": "postgresql://h/db"})
    assert given.bind == ("::1", 8080) and given.lease_threads == 3 and given.on_postgres
    assert given.retention_events is not None and given.retention_events.total_seconds() == 7200
    assert given.watched_leases == ("a/c", "a/c/b")


@pytest.mark.parametrize("name, value", [("LEASEHOLD_BIND", "10000"), ("LEASEHOLD_BIND", "h:99999"),
                                         ("LEASEHOLD_THREADS", "0"), ("LEASEHOLD_WATCHED_LEASES", "nameless"),
                                         ("LEASEHOLD_RETENTION_BATCH", "0"), ("LEASEHOLD_HEADER_TIMEOUT", "0")])
def test_load_refuses_a_bad_value_naming_it(name, value):
    with pytest.raises(SettingError, match=name):
        conf.load({name: value})


def _reads_the_environment(path: Path) -> list[str]:
    """Places in ``path`` that read a LEASEHOLD_* variable, or use the
    parsers of leases/conf/env.py, other than through leases/conf/__init__.py."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("env") and any(
                alias.name.startswith("env_") for alias in node.names):
            found.append(f"{path.name}:{node.lineno} imports {node.module}'s parsers")
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("environ.get", "getenv")):
            named = node.args[0] if node.args else None
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                ast.unparse(node.value).endswith("environ"):
            named = node.slice
        else:
            continue
        if isinstance(named, ast.Constant) and isinstance(named.value, str) and named.value.startswith("LEASEHOLD_"):
            found.append(f"{path.name}:{node.lineno} reads {named.value}")
    return found


def test_nothing_but_the_settings_object_reads_the_environment():
    sources = [p for top in ("leases", "serving", "config") for p in (REPO / top).rglob("*.py")
               if p.relative_to(REPO).as_posix() not in ("leases/conf/__init__.py", "leases/conf/env.py")]
    assert [hit for path in sources for hit in _reads_the_environment(path)] == []


@pytest.mark.parametrize("source", ['import os\nx = os.environ.get("LEASEHOLD_X")\n',
                                    'import os\nx = os.getenv("LEASEHOLD_X", "1")\n',
                                    'import os\nx = os.environ["LEASEHOLD_X"]\n',
                                    'from leases.conf.env import env_int\n'])
def test_a_stray_environment_read_is_found(tmp_path, source):
    (tmp_path / "stray.py").write_text(source)
    assert len(_reads_the_environment(tmp_path / "stray.py")) == 1


def test_setting_a_variable_for_a_child_is_not_a_read(tmp_path):
    (tmp_path / "child.py").write_text('import os\nos.environ["LEASEHOLD_X"] = "1"\nenv = dict(LEASEHOLD_Y="0")\n')
    assert _reads_the_environment(tmp_path / "child.py") == []
