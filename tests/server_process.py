"""A production server process (python -m config.serve) on a database of the
test's choosing, with its log in a file of its own."""

from __future__ import annotations

import atexit
import fcntl
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .conftest import RUN_DIR, free_port
from tests.processes.test_processes import wait_for_port

ROOT = Path(__file__).resolve().parent.parent


def prepare(database: str | Path, var_dir: Path, env: dict | None = None) -> dict:
    """Migrate ``database`` and create the development account, as `make run`
    does; the environment a server on it needs (``env``: the server's, else
    the run's own).

    ``manage.py migrate`` and ``leasehold_setup`` are two Django start-ups
    and a few hundred fsyncs, seconds per test on a busy machine, so a
    database is a copy of one this process prepared the same way once: a new
    SQLite file a byte copy of ``migrated_template``, an empty PostgreSQL
    database remade from a template database on its server
    (``_pg_template``). Anything else (an existing SQLite file, a
    PostgreSQL database with tables, an environment those commands could
    read differently) runs the commands."""
    env = {**(os.environ if env is None else env), "LEASEHOLD_DATABASE": str(database),
           "LEASEHOLD_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": "config.settings"}
    path = Path(database)
    if not _template_fits(env):
        _migrate(env)
    elif str(database).startswith(("postgres://", "postgresql://")):
        _pg_copy(str(database), env)
    elif "://" not in str(database) and not path.exists():
        template = migrated_template()
        for suffix in ("", "-wal", "-shm"):  # as the commands left them, WAL included
            if template.with_name(template.name + suffix).exists():
                shutil.copyfile(template.with_name(template.name + suffix), path.with_name(path.name + suffix))
        _tokens[str(database)] = template.with_name("token").read_text()
    else:
        _migrate(env)
    return env


def _pg_copy(url: str, env: dict) -> None:
    """Remake the empty database ``url`` names as a copy of its server's
    template (CREATE DATABASE ... TEMPLATE: a file copy on the server); a
    database that has tables already is migrated as it is."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    with psycopg.connect(url, autocommit=True) as conn:
        empty = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)
    if not empty:
        _migrate(env)
        return
    template = _pg_template(urlunsplit(parts._replace(path="/postgres")), env)
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    _tokens[url] = _pg_tokens[template]


def _pg_template(admin_url: str, env: dict) -> str:
    """A database on ``admin_url``'s server migrated and set up as
    ``prepare`` does, once per test run (per process outside an xdist run)
    and server (made again if the server is a new one on the same port): its
    name. The run's workers share it, as ``migrated_template``."""
    shared = os.environ.get(RUN_DIR)
    if shared is None:
        return _pg_template_made(admin_url, env, f"leasehold_template_{os.getpid()}", None)
    name = f"leasehold_template_{re.sub(r'[^a-z0-9]', '', Path(shared).name)}"
    with open(Path(shared) / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        return _pg_template_made(admin_url, env, name, Path(shared) / f"{name}-{urlsplit(admin_url).port}.token")


def _pg_template_made(admin_url: str, env: dict, name: str, token_file: Path | None) -> str:
    """``_pg_template``'s database ``name``, made unless it is there (with its
    token in ``token_file``, if the run's workers share it)."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            if token_file is None or token_file.exists():
                if token_file is not None:
                    _pg_tokens[name] = token_file.read_text()
                return name
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # left half made
        conn.execute(f'CREATE DATABASE "{name}"')
    template_env = {**env, "LEASEHOLD_DATABASE": urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))}
    _migrate(template_env)
    _pg_tokens[name] = _new_token(template_env)
    if token_file is not None:
        token_file.write_text(_pg_tokens[name])
    return name


def _migrate(env: dict) -> None:
    for args in (["migrate", "--noinput", "-v0"], ["leasehold_setup", "--admin-password", "x" * 12]):
        subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True)


# database -> the secret of an API token of the admin user in it, for the databases
# prepare() made from a template (the template's token); _pg_template's by template name.
_tokens: dict[str, str] = {}
_pg_tokens: dict[str, str] = {}


def admin_token(database: str | Path, env: dict) -> str:
    """The secret of a JSON API token of the admin user in ``database``
    (prepared by ``prepare``; ``env``: its environment): the template's, if
    the database is a copy of one, else a new one (`manage.py
    leasehold_token create`, a Django start-up)."""
    return _tokens.get(str(database)) or _new_token(env)


def _new_token(env: dict) -> str:
    made = subprocess.run([sys.executable, "manage.py", "leasehold_token", "create", "--user", "admin", "--name",
                           "tests"], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    return max(made.stdout.split(), key=len)  # the secret is the longest word of the output


# Settings a test may give its server that migrate and leasehold_setup do not
# read (serving, timeouts, retention): a copy of the template fits those too.
# Any other LEASEHOLD_* setting that differs from the run's own means a real
# migrate, so a new setting is never silently ignored.
_PER_SERVER = {"LEASEHOLD_DATABASE", "LEASEHOLD_VAR_DIR", "LEASEHOLD_BIND", "LEASEHOLD_WORKERS"}
_SERVING_ONLY = ("LEASEHOLD_HEADER_TIMEOUT", "LEASEHOLD_BODY_IDLE_TIMEOUT", "LEASEHOLD_MAX_BLOB_BYTES",
                 "LEASEHOLD_WRITE_WAIT", "LEASEHOLD_RETENTION_", "LEASEHOLD_LONG_READ", "LEASEHOLD_WORKER_",
                 "LEASEHOLD_STAGE_PAUSE")


def _template_fits(env: dict) -> bool:
    keys = {k for k in {*env, *os.environ} if k.startswith("LEASEHOLD_")} - _PER_SERVER
    return all(env.get(k) == os.environ.get(k) or k.startswith(_SERVING_ONLY) for k in keys)


@functools.cache
def migrated_template() -> Path:
    """A SQLite file migrated and set up as ``prepare`` does, once per run:
    in the run's directory the workers share (conftest.RUN_DIR), made by the
    first worker that needs it while the others wait on its lock; in a
    directory of this process's own (removed at exit) outside an xdist run.
    It holds an API token of the admin user (``admin_token``, made last:
    that command closes the database, so no -wal or -shm file is left). A
    copy of its files is the database a server would find after those
    commands."""
    shared = os.environ.get(RUN_DIR)
    if shared is None:
        root = Path(tempfile.mkdtemp(prefix="leasehold-template-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
    else:
        root = Path(shared) / "template"
    template = root / "leasehold.sqlite3"
    made = root / "made"
    with open(Path(shared or root) / "template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
        if not made.exists():
            root.mkdir(exist_ok=True)
            env = {**os.environ, "LEASEHOLD_DATABASE": str(template), "LEASEHOLD_VAR_DIR": str(root),
                   "DJANGO_SETTINGS_MODULE": "config.settings"}
            _migrate(env)
            template.with_name("token").write_text(_new_token(env))
            made.touch()
    return template


class Instance:
    """One production server process on ``database``."""

    def __init__(self, database: str, tmp: Path, name: str, workers: int = 2):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"{name}.log"
        self.env = {**os.environ, "LEASEHOLD_DATABASE": str(database), "LEASEHOLD_VAR_DIR": str(tmp),
                    "LEASEHOLD_BIND": f"127.0.0.1:{self.port}", "LEASEHOLD_WORKERS": str(workers),
                    "DJANGO_SETTINGS_MODULE": "config.settings"}
        self.proc: subprocess.Popen[bytes] | None = None
        self.database = database
        self.token: str | None = None  # a JSON API token, for the tests that make one

    def start(self) -> "Instance":
        self.log = open(self.log_path, "ab")
        self.proc = proc = subprocess.Popen([sys.executable, "-m", "serving.server"], cwd=ROOT, env=self.env,
                                            start_new_session=True, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, proc, output=self.output)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            stop_group(self.proc)
            self.log.close()

    def output(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace")


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to a process started with start_new_session and its children; SIGKILL after 20 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
