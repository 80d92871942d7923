"""A throwaway PostgreSQL cluster for the tests.

    python tests/pg_cluster.py COMMAND [ARGS...]

initdb's a cluster into a temporary directory, starts it on a free loopback
port (and a unix socket in that directory), creates the database
``leasehold``, runs COMMAND with ``LEASEHOLD_DATABASE`` pointing at it, then
stops the cluster and removes the directory; the exit status is COMMAND's.
If PostgreSQL's server binaries are missing, Debian's ``postgresql`` package
is installed first (apt-get; through sudo when not root).

Tests import ``cluster()`` (or ``pair()``) to get one of their own, or get a
database each on ``server()``, one cluster a run's test processes share. The
cluster trades durability for speed (fsync off): it lives for one test run.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SUPERUSER = "postgres"


def _server_bin() -> Path | None:
    """The directory of initdb/pg_ctl: on PATH, else Debian's newest version."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                      key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    return Path(versions[-1]).parent if versions else None


def _apt_install(package: str, what: str) -> None:
    """Debian's ``package`` (through sudo when not root), saying so."""
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    print(f"pg_cluster: {what} not found; installing Debian's {package} package", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*sudo, "apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run([*sudo, "apt-get", "install", "-y", "-qq", package], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def server_bin() -> Path:
    """initdb's directory, installing Debian's postgresql package if needed."""
    found = _server_bin()
    if found:
        return found
    _apt_install("postgresql", "PostgreSQL")
    found = _server_bin()
    if not found:
        raise SystemExit("pg_cluster: postgresql installed, yet initdb is not found")
    return found


def _faketime_library() -> str | None:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return found[0] if found else None


def faketime_library() -> str:
    """libfaketime, installing Debian's faketime package if needed: a
    process started with it preloaded (``faketime_env``) reads the time of
    day shifted, its monotonic clock left alone."""
    found = _faketime_library()
    if found:
        return found
    _apt_install("faketime", "libfaketime")
    found = _faketime_library()
    if not found:
        raise SystemExit("pg_cluster: faketime installed, yet libfaketime is not found")
    return found


def faketime_env(offset: str | None = None, *, offset_file: Path | None = None) -> dict:
    """Environment for a process whose clock reads ``offset`` from the real
    one ("+1h", "-3600"), or whatever ``offset_file`` says at each reading."""
    env = {"LD_PRELOAD": faketime_library(), "FAKETIME_DONT_FAKE_MONOTONIC": "1", "DONT_FAKE_MONOTONIC": "1"}
    if offset_file is not None:
        env.update(FAKETIME_TIMESTAMP_FILE=str(offset_file), FAKETIME_NO_CACHE="1")
    elif offset is not None:
        env["FAKETIME"] = offset
    else:
        raise TypeError("faketime_env needs an offset or an offset file")
    return env


def _run_as() -> dict:
    """PostgreSQL refuses to run as root: as root, run it as the ``postgres``
    user the Debian package creates (else ``nobody``)."""
    if os.geteuid() != 0:
        return {}
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return {"user": entry.pw_uid, "group": entry.pw_gid}
    raise SystemExit("pg_cluster: running as root and no 'postgres' or 'nobody' user to run PostgreSQL as")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, root: Path, port: int, bin_dir: Path, as_user: dict, *, faketime: bool = False):
        self.root, self.port, self.bin, self.as_user = root, port, bin_dir, as_user
        self.data = root / "data"
        self.durable = False  # synchronous_commit on (a primary with a synchronous standby), else off
        self.on_disk = False  # fsync and full-page writes on, as in production (the bench's)
        self.settings: dict[str, str] = {}  # postgresql.conf lines added at start (the bench's)
        self.max_connections = 200
        # With faketime, the server's clock reads what this file says, at every reading ("+0", "-3600").
        self.clock_file = root / "clock-offset" if faketime else None

    def url(self, database: str = "leasehold") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args, **kwargs):
        return subprocess.run([str(self.bin / args[0]), *args[1:]], check=True, capture_output=True,
                              cwd=self.root, **self.as_user, **kwargs)

    def set_clock(self, offset_seconds: float) -> None:
        """Set the server's clock to the real time plus ``offset_seconds``
        (a cluster started with ``faketime``): a step, at once."""
        if self.clock_file is None:
            raise RuntimeError("this cluster was started without faketime")
        tmp = self.clock_file.with_suffix(".new")
        tmp.write_text(f"{offset_seconds:+.3f}\n")
        tmp.chmod(0o644)
        tmp.replace(self.clock_file)

    def start(self) -> "Cluster":
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                  "--locale=C", "--no-sync")
        self.configure(**self.settings)
        self.launch()
        self.create_database("leasehold")
        return self

    def launch(self) -> None:
        """pg_ctl start (under libfaketime with a clock file)."""
        env = None
        if self.clock_file is not None:
            self.set_clock(0)
            env = {**os.environ, **faketime_env(offset_file=self.clock_file)}
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections={self.max_connections}"
        if not self.on_disk:  # a test's cluster: no fsync (durability comes from the standby, if any)
            options += " -F -c full_page_writes=off"
        if not self.durable:
            options += " -c synchronous_commit=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"),
                  "-w", "-t", "60", "start", env=env)

    def create_database(self, name: str) -> str:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER, name)
        return self.url(name)

    # ------------------------------------------------------------ a primary and its standby (``pair``)

    def configure(self, **settings: str) -> None:
        """Append settings to postgresql.conf (a later line wins); they apply at the next launch."""
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.writelines(f"{name} = '{value}'\n" for name, value in settings.items())

    def base_backup_of(self, primary: "Cluster") -> None:
        """This cluster's data directory: a streaming standby of ``primary``."""
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", SUPERUSER,
                  "-D", str(self.data), "-R", "-X", "stream", "--no-sync")
        self.durable = True

    def promote(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")

    def processes(self) -> list[int]:
        """The postmaster's pid and its children's (its backends and helpers)."""
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return []
        postmaster = int(pid_file.read_text().split()[0])
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                except OSError:
                    continue
                if int(stat.rpartition(")")[2].split()[1]) == postmaster:
                    children.append(int(entry))
        return [postmaster, *children]

    def signal_all(self, sig: int) -> None:
        """Send ``sig`` to the postmaster and each of its children (SIGKILL:
        as a crash of the host, SIGSTOP: as a hung one)."""
        for pid in self.processes():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        self.signal_all(signal.SIGCONT)  # a frozen server cannot stop
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            pid_file = self.data / "postmaster.pid"
            if pid_file.exists():  # last resort: the postmaster this cluster started
                self.signal_all(signal.SIGKILL)


def _started(*, faketime: bool = False, production: dict[str, str] | None = None,
             max_connections: int = 200) -> Cluster:
    """A new cluster started in a new temporary directory (removed if it fails to start)."""
    bin_dir = server_bin()
    as_user = _run_as()
    root = Path(tempfile.mkdtemp(prefix="leasehold-pg-"))
    try:
        if as_user:
            os.chown(root, as_user["user"], as_user["group"])
        pg = Cluster(root, _free_port(), bin_dir, as_user, faketime=faketime)
        pg.max_connections = max_connections
        if production is not None:
            pg.durable = pg.on_disk = True
            pg.settings = production
        pg.start()
        return pg
    except subprocess.CalledProcessError as exc:
        log = root / "server.log"
        detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise SystemExit(f"pg_cluster: {' '.join(map(str, exc.cmd))} failed: "
                         f"{exc.stderr.decode(errors='replace')}{detail}") from None
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def _removed(pg: Cluster) -> None:
    try:
        pg.stop()
    finally:
        shutil.rmtree(pg.root, ignore_errors=True)


@contextmanager
def cluster(*, faketime: bool = False, production: dict[str, str] | None = None) -> Iterator[Cluster]:
    """A started throwaway cluster with a database ``leasehold``; removed
    after. ``faketime``: its clock can be set (``Cluster.set_clock``).
    ``production``: durable as in production (fsync, full-page writes,
    synchronous commit), with these settings added (the bench's)."""
    pg = _started(faketime=faketime, production=production)
    try:
        yield pg
    finally:
        _removed(pg)


# ------------------------------------------------------------ one cluster for a test run's processes

SHARED_RECORD = "pg-cluster.json"  # in the run's directory: the shared cluster's root and port
SHARED_CONNECTIONS = 400  # every test process of the run, each with its server instances


def shared(run_dir: Path) -> Cluster:
    """The run's shared cluster: started by the first test process that asks (under a
    lock in ``run_dir``, which the run's processes share), joined by the others."""
    import fcntl
    import json

    record = run_dir / SHARED_RECORD
    with open(run_dir / "pg-cluster.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.exists():
            found = json.loads(record.read_text())
            return Cluster(Path(found["root"]), found["port"], server_bin(), _run_as())
        pg = _started(max_connections=SHARED_CONNECTIONS)
        record.write_text(json.dumps({"root": str(pg.root), "port": pg.port}))
        # Stopped by the controller at the run's end, or by this watcher once it is gone (killed).
        subprocess.Popen([sys.executable, __file__, "--stop-shared-after", str(os.getppid()), str(run_dir)],
                         start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        return pg


def stop_shared(run_dir: Path) -> None:
    """Stop and remove the run's shared cluster, if one was started."""
    import json

    record = run_dir / SHARED_RECORD
    if record.exists():
        found = json.loads(record.read_text())
        _removed(Cluster(Path(found["root"]), found["port"], server_bin(), _run_as()))


@contextmanager
def pair():
    """A primary and a synchronous standby streaming from it (pg_basebackup):
    a commit returns once the standby has its WAL. Both removed after."""
    bin_dir = server_bin()
    as_user = _run_as()
    roots = [Path(tempfile.mkdtemp(prefix=f"leasehold-pg-{role}-")) for role in ("primary", "standby")]
    started = []
    try:
        for root in roots:
            if as_user:
                os.chown(root, as_user["user"], as_user["group"])
        primary, standby = (Cluster(root, _free_port(), bin_dir, as_user) for root in roots)
        primary.durable = True
        primary._run("initdb", "-D", str(primary.data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                     "--locale=C", "--no-sync")
        primary.configure(synchronous_standby_names="*", synchronous_commit="on")
        with open(primary.data / "pg_hba.conf", "a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        primary.launch()
        started.append(primary)
        standby.base_backup_of(primary)
        # Promoted, it must not wait for a standby of its own.
        standby.configure(synchronous_standby_names="")
        standby.launch()
        started.append(standby)
        primary.create_database("leasehold")
        yield primary, standby
    finally:
        for pg in reversed(started):
            pg.stop()
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--stop-shared-after"]:  # shared()'s watcher: PID RUN_DIR
        while Path(f"/proc/{argv[1]}").exists():
            time.sleep(1)
        stop_shared(Path(argv[2]))
        return 0
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    with cluster() as pg:
        env = {**os.environ, "LEASEHOLD_DATABASE": pg.url()}
        print(f"pg_cluster: PostgreSQL on 127.0.0.1:{pg.port}", file=sys.stderr)
        return subprocess.run(argv, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


@contextmanager
def server(run_dir: str | None = None):
    """A PostgreSQL server for tests that need one whatever the run's
    database: the one ``LEASEHOLD_DATABASE`` names if it is PostgreSQL, else
    the run's shared cluster (``shared``) if the test processes share
    ``run_dir``, else a throwaway cluster of this process's own. Yields
    ``new_database() -> url``: a new, empty database on it."""
    import uuid
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    configured = os.environ.get("LEASEHOLD_DATABASE", "")
    own = None
    if configured.startswith(("postgres://", "postgresql://")):
        base = configured
    elif run_dir:
        base = shared(Path(run_dir)).url()
    else:
        own = _started()
        base = own.url()
    admin = urlunsplit(urlsplit(base)._replace(path="/postgres"))

    def new_database() -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return urlunsplit(urlsplit(base)._replace(path=f"/{name}"))

    try:
        yield new_database
    finally:
        if own is not None:
            _removed(own)
