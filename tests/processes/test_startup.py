"""The server (python -m config.serve) refuses to start on a database it
cannot serve -- missing, unmigrated, older schema, history trigger gone,
read-only -- and says what to run; real processes on real databases."""

from __future__ import annotations

import importlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.server_process import prepare

pytestmark = [pytest.mark.processes, pytest.mark.also_postgres]
# Faults of a SQLite file: not repeated in make test's PostgreSQL pass, which
# runs this module for its PostgreSQL tests.
sqlite_file = pytest.mark.skipif(os.environ.get("LEASEHOLD_DATABASE", "").startswith("postgres"),
                                 reason="a SQLite file's own test")

ROOT = Path(__file__).resolve().parents[2]


def _start(database, var_dir: Path) -> str:
    """Start the server; it must exit 1 on its own. Its output."""
    env = {**os.environ, "LEASEHOLD_DATABASE": str(database), "LEASEHOLD_VAR_DIR": str(var_dir),
           "LEASEHOLD_BIND": f"127.0.0.1:{free_port()}", "DJANGO_SETTINGS_MODULE": "config.settings"}
    proc = subprocess.Popen([sys.executable, "-m", "serving.server"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out = proc.communicate(timeout=60)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        raise AssertionError("the server started on a database it should have refused") from None
    assert proc.returncode == 1, out
    assert "Leasehold will not start: " in out and "Traceback" not in out, out
    return out


def _manage(database, var_dir, *args):
    env = {**os.environ, "LEASEHOLD_DATABASE": str(database), "LEASEHOLD_VAR_DIR": str(var_dir),
           "DJANGO_SETTINGS_MODULE": "config.settings"}
    subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True)


@sqlite_file
def test_a_missing_database_is_refused_and_not_created(tmp_path):
    db = tmp_path / "leasehold.sqlite3"
    out = _start(db, tmp_path)
    assert f"the database {db} does not exist" in out and "manage.py migrate" in out, out
    assert not db.exists()


@sqlite_file
def test_an_unmigrated_database_is_refused(tmp_path):
    db = tmp_path / "leasehold.sqlite3"
    sqlite3.connect(db).close()
    out = _start(db, tmp_path)
    assert "the database lacks migrations (" in out and "leases.0001_initial" in out, out
    assert "manage.py migrate" in out


def _database(tmp_path, request):
    """The run's kind of database, new and empty: a PostgreSQL database in the
    PostgreSQL pass (so that the start-up check's PostgreSQL branch runs),
    else a SQLite file's path."""
    if os.environ.get("LEASEHOLD_DATABASE", "").startswith("postgres"):
        return request.getfixturevalue("postgres")()
    return tmp_path / "leasehold.sqlite3"


def _sql(database, *statements: str) -> list[tuple]:
    """Run ``statements`` on the database outside any server; the last one's rows."""
    rows: list[tuple] = []
    if isinstance(database, str):
        import psycopg

        with psycopg.connect(database, autocommit=True) as conn:
            for statement in statements:
                cursor = conn.execute(statement)
                rows = cursor.fetchall() if cursor.description else []
    else:
        with sqlite3.connect(database) as conn:
            for statement in statements:
                rows = conn.execute(statement).fetchall()
    return rows


def test_an_older_schema_is_refused(tmp_path, request):
    database = _database(tmp_path, request)
    _manage(database, tmp_path, "migrate", "leases", "0001_initial", "--noinput", "-v0")
    out = _start(database, tmp_path)
    assert "leases.0002_history_append_only" in out and "leases.0001_initial" not in out, out


def test_a_missing_history_trigger_is_refused(tmp_path, request):
    database = _database(tmp_path, request)
    prepare(database, tmp_path)
    on_pg = isinstance(database, str)
    listed = ("SELECT tgname FROM pg_trigger WHERE tgrelid = 'leases_leaseevent'::regclass AND NOT tgisinternal"
              if on_pg else "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'leases_leaseevent'")
    names = [name for (name,) in _sql(database, listed)]
    assert names  # what migrate left: the triggers this test drops
    _sql(database, *(f"DROP TRIGGER {name}" + (" ON leases_leaseevent" if on_pg else "") for name in names))
    out = _start(database, tmp_path)
    assert "the lease history has no append-only trigger" in out, out
    # with the trigger back (migration 0002's own SQL), the check passes
    migration = importlib.import_module("leases.migrations.0002_history_append_only")
    if on_pg:
        _sql(database, migration.PG_UP)
    else:
        with sqlite3.connect(database) as conn:
            conn.executescript(migration.SQLITE_UP)
    env = {**os.environ, "LEASEHOLD_DATABASE": str(database), "LEASEHOLD_VAR_DIR": str(tmp_path),
           "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run([sys.executable, "-m", "leases.operations.startup"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _left_open(db: Path) -> None:
    """As a process that read ``db`` and ended without closing it leaves it
    (`manage.py migrate` does): its -wal and -shm files still there."""
    code = f"import os, sqlite3; sqlite3.connect({str(db)!r}).execute('SELECT 1 FROM sqlite_master'); os._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert db.with_name(db.name + "-shm").exists()


@sqlite_file
@pytest.mark.parametrize("files", ["closed", "left-open"])
def test_a_read_only_database_is_refused(tmp_path, files):
    """On a volume mounted read-only (as root), else a file and directory
    without write permission; the database closed cleanly (no -shm file:
    SQLite cannot even open it) or left open (it opens, and cannot be
    written)."""
    if os.geteuid() == 0:
        volume = tmp_path / "volume"
        volume.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(volume)]).returncode != 0:
            pytest.skip("cannot mount a tmpfs here")
        try:
            db = volume / "leasehold.sqlite3"
            prepare(db, tmp_path)
            if files == "left-open":
                _left_open(db)
            subprocess.run(["mount", "-o", "remount,ro", str(volume)], check=True)
            out = _start(db, tmp_path)
        finally:
            subprocess.run(["umount", "-l", str(volume)], check=False)
    else:
        data = tmp_path / "data"
        data.mkdir()
        db = data / "leasehold.sqlite3"
        prepare(db, tmp_path)
        if files == "left-open":
            _left_open(db)
        for name in os.listdir(data):
            os.chmod(data / name, 0o444)
        os.chmod(data, 0o555)
        try:
            out = _start(db, tmp_path)
        finally:
            os.chmod(data, 0o755)
    assert "read-only" in out and "make the file, its directory and its volume writable" in out, out


@pytest.mark.postgres
def test_postgresql_unmigrated_or_read_only_is_refused(postgres, tmp_path):
    import psycopg
    from urllib.parse import urlsplit, urlunsplit

    database = postgres()
    out = _start(database, tmp_path)
    assert "the database lacks migrations (" in out, out
    prepare(database, tmp_path)
    parts = urlsplit(database)
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{parts.path[1:]}" SET default_transaction_read_only = on')
    out = _start(database, tmp_path)
    assert "the database is read-only" in out, out


def test_a_newer_schema_is_refused(tmp_path, request):
    """A database a newer version migrated (a migration this code does not
    know is recorded as applied) is refused, naming the migration."""
    on_pg = os.environ.get("LEASEHOLD_DATABASE", "").startswith("postgres")
    database = request.getfixturevalue("postgres")() if on_pg else tmp_path / "leasehold.sqlite3"
    prepare(database, tmp_path)
    insert = ("INSERT INTO django_migrations (app, name, applied) VALUES "
              "('leases', '0099_from_a_newer_version', CURRENT_TIMESTAMP)")
    if on_pg:
        import psycopg

        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute(insert)
    else:
        with sqlite3.connect(database) as conn:
            conn.execute(insert)
    out = _start(database, tmp_path)
    assert "schema is newer than this version" in out and "leases.0099_from_a_newer_version" in out, out
    assert len(out.strip().splitlines()) == 1, out


@pytest.mark.postgres
def test_a_libpq_url_is_taken_whole(postgres, tmp_path):
    """Several hosts (the first one down), target_session_attrs, sslmode and
    connect_timeout in the URL: the server serves through the host that
    answers as primary."""
    import requests

    from tests import azure_raw
    from urllib.parse import urlsplit

    database = postgres()
    prepare(database, tmp_path)
    parts = urlsplit(database)
    url = (f"postgresql://{parts.username}@127.0.0.1:{free_port()},{parts.hostname}:{parts.port}{parts.path}"
           "?target_session_attrs=read-write&sslmode=disable&connect_timeout=3&application_name=leasehold-test")
    port = free_port()
    env = {**os.environ, "LEASEHOLD_DATABASE": url, "LEASEHOLD_VAR_DIR": str(tmp_path),
           "LEASEHOLD_BIND": f"127.0.0.1:{port}", "LEASEHOLD_WORKERS": "1", "DJANGO_SETTINGS_MODULE": "config.settings"}
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "serving.server"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        from tests.processes.test_processes import wait_for_port

        wait_for_port(port, proc, output=lambda: (tmp_path / "server.log").read_text())
        base = f"http://127.0.0.1:{port}"
        assert azure_raw.signed("PUT", base, "/devstoreaccount1/urls?restype=container").status_code == 201
        assert requests.get(f"{base}/health/ready", timeout=10).status_code == 200
        import psycopg

        with psycopg.connect(database) as conn:  # the URL's own parameters reached the server
            names = {n for (n,) in conn.execute("SELECT application_name FROM pg_stat_activity")}
        assert "leasehold-test" in names, names
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=20)
        log.close()


@pytest.mark.parametrize("url, says", [
    ("postgresql://u@127.0.0.1:5432,127.0.0.1:5433/db?no_such_option=1", "invalid URI query parameter"),
    ("postgresql://u@127.0.0.1:5432/", "must name the database"),
    ("postgresql://u@127.0.0.1:notaport/db?connect_timeout=2", "port"),
    ("postgresql://u@127.0.0.1:9/db?sslmode=sometimes", "sslmode"),
])
def test_a_url_it_cannot_use_stops_the_start_in_one_line(tmp_path, url, says):
    pytest.importorskip("psycopg")
    out = _start(url, tmp_path)
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and says in lines[0], out
