"""Storage faults under a running server (python -m config.serve): a full
disk, read-only storage, a corrupt page and a missing table answer 503
ServerBusy on both doors, with the cause in one log line (no traceback), and
the server serves again once the fault is gone. Real faults: a small tmpfs
filled up or remounted read-only (needs root), bytes of a page overwritten,
a table dropped."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import uuid

import pytest

from tests import azure_raw
from tests.server_process import Instance, prepare

pytestmark = [pytest.mark.processes, pytest.mark.also_postgres]
# Faults of a SQLite file: not repeated in make test's PostgreSQL pass, which
# runs this module for its PostgreSQL tests.
sqlite_file = pytest.mark.skipif(os.environ.get("LEASEHOLD_DATABASE", "").startswith("postgres"),
                                 reason="a SQLite file's own test")

C = "/devstoreaccount1/faults"


def _put(base, path, body=b"x"):
    return azure_raw.signed("PUT", base, path, body=body, headers={"x-ms-blob-type": "BlockBlob"})


def _server(tmp_path, database) -> Instance:
    prepare(database, tmp_path)
    server = Instance(database, tmp_path, "server", workers=1).start()
    assert azure_raw.signed("PUT", server.url, C + "?restype=container").status_code == 201
    assert _put(server.url, C + "/b").status_code == 201
    return server


def _busy(response) -> bool:
    return response.status_code == 503 and azure_raw.error_code(response) == "ServerBusy"


def _fault_lines(server: Instance) -> list[str]:
    log = server.output()
    # Once, with its cause: not again by Django's request logger ("Service Unavailable: /...").
    assert "Traceback" not in log and "Internal Server Error" not in log, log[-3000:]
    assert "Service Unavailable" not in log, log[-3000:]
    return [line for line in log.splitlines() if "storage fault" in line]


@pytest.fixture
def running(tmp_path):
    servers = []

    def start(database):
        server = _server(tmp_path, database)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def volume(tmp_path):
    """A 4 MiB tmpfs of this test's own (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small volume needs root")
    mount = tmp_path / "volume"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@sqlite_file
def test_a_full_disk_is_503_and_the_server_recovers(volume, running):
    server = running(volume / "leasehold.sqlite3")
    filler = volume / "filler"
    with open(filler, "wb", buffering=0) as fh:  # take every free byte of the volume
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass
        try:
            while True:
                fh.write(b"\0" * 512)
        except OSError:
            pass
    response = _put(server.url, C + "/big", body=os.urandom(1 << 20))
    assert _busy(response), (response.status_code, response.content)
    [line] = _fault_lines(server)
    assert "disk full" in line and "PUT /devstoreaccount1/faults/big" in line, line
    filler.unlink()
    assert _put(server.url, C + "/big", body=os.urandom(1 << 20)).status_code == 201


def _admin(url: str):
    """A psycopg connection to the cluster's maintenance database; the name of url's database."""
    import psycopg
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True), parts.path[1:]


def _set_read_only(url: str, on: bool) -> None:
    """A database turned read-only (as a standby is): new sessions may not
    write; the server's sessions are ended so that it reconnects."""
    conn, name = _admin(url)
    with conn:
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = {"on" if on else "off"}')
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                     " WHERE datname = %s AND pid <> pg_backend_pid()", [name])


@pytest.mark.postgres
def test_read_only_storage_is_503_and_the_server_recovers(postgres, running):
    database = postgres()
    server = running(database)
    _set_read_only(database, True)
    statuses = [_put(server.url, C + "/b", body=b"ro") for _ in range(3)]
    assert all(_busy(r) for r in statuses), [(r.status_code, r.content) for r in statuses]
    lines = _fault_lines(server)
    # named as what it is on PostgreSQL: no writable primary (a standby), not a file to make writable
    assert len(lines) == 3 and "no primary (database failover or outage)" in lines[-1], lines
    assert "database file" not in lines[-1], lines
    assert all(r.headers.get("Retry-After") == "1" for r in statuses), [r.headers for r in statuses]
    _set_read_only(database, False)
    # Each of the server's connections (a worker's threads each hold one) finds on its next use that
    # it was cut and fails that one request, 503 with Retry-After; then it reconnects: the server
    # recovers within as many attempts as it has connections, and stays recovered.
    statuses = []
    while statuses[-3:] != [201] * 3 and len(statuses) < 20:
        response = _put(server.url, C + "/b", body=b"rw")
        statuses.append(response.status_code)
        assert response.status_code == 201 or (_busy(response) and response.headers.get("Retry-After") == "1"), (
            response.status_code, response.content)
    assert statuses[-3:] == [201] * 3, statuses


def test_a_missing_table_is_503_on_both_doors_and_names_the_fix(tmp_path, running, request):
    """On the run's database: a SQLite file ("no such table"), or in the
    PostgreSQL pass a PostgreSQL database, whose SQLSTATE 42P01
    (undefined_table) leases/operations/faults.py maps to the same fault."""
    on_pg = os.environ.get("LEASEHOLD_DATABASE", "").startswith("postgres")
    database = request.getfixturevalue("postgres")() if on_pg else tmp_path / "leasehold.sqlite3"
    server = running(database)
    held = azure_raw.lease(server.url, C + "/b", "acquire", duration=-1)
    assert held.status_code == 201
    if on_pg:
        import psycopg

        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("DROP TABLE leases_leaseevent CASCADE")
    else:
        with sqlite3.connect(database) as conn:
            conn.execute("DROP TABLE leases_leaseevent")
    # a refusal (the lease is held) whose history row cannot be written
    response = azure_raw.lease(server.url, C + "/b", "acquire", duration=15)
    assert _busy(response), (response.status_code, response.content)
    api = azure_raw.signed("POST", server.url, "/api/v1/leases/break/devstoreaccount1/faults/b",
                           body=json.dumps({"period": 0}).encode(), headers={"content-type": "application/json"})
    assert api.status_code == 503 and api.json()["code"] == "ServerBusy", api.content
    first, second = _fault_lines(server)
    missing = 'relation "leases_leaseevent" does not exist' if on_pg else "no such table: leases_leaseevent"
    assert "schema out of date" in first and missing in first, first
    assert "manage.py migrate" in first and "refusal 409 LeaseAlreadyPresent" in first, first
    assert "POST /api/v1/leases/break/" in second, second
    # nothing changed: the holder still holds the lease
    props = azure_raw.signed("HEAD", server.url, C + "/b")
    assert props.headers["x-ms-lease-state"] == "leased"


@sqlite_file
def test_a_corrupt_page_is_503(tmp_path, running):
    """A copy of a working database with the blob table's root page
    overwritten: reads and writes that touch it are 503, others still work."""
    original = tmp_path / "original.sqlite3"
    server = running(original)
    server.stop()
    copy = tmp_path / "copy.sqlite3"
    with sqlite3.connect(original) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)  # a consistent copy, WAL included
        dst.execute("PRAGMA journal_mode=DELETE")
        page_size = dst.execute("PRAGMA page_size").fetchone()[0]
        [root] = dst.execute("SELECT rootpage FROM sqlite_master WHERE name = 'leases_blob'").fetchone()
    with open(copy, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(uuid.uuid4().bytes * (page_size // 16))
    server = Instance(copy, tmp_path, "corrupt", workers=1).start()
    try:
        response = azure_raw.signed("HEAD", server.url, C + "/b")
        assert response.status_code == 503 and azure_raw.error_code(response) == "ServerBusy", response.headers
        response = azure_raw.lease(server.url, C + "/b", "acquire", duration=15)
        assert _busy(response), (response.status_code, response.content)
        lines = _fault_lines(server)
        assert len(lines) == 2 and all("corrupt database" in line for line in lines), lines
        # the container table is intact: its lease still works
        assert azure_raw.lease(server.url, C, "acquire", duration=15).status_code == 201
    finally:
        server.stop()
