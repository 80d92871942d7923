"""Two PostgreSQL nodes managed by Patroni, with etcd as its store, on
loopback in a temporary directory: the recipe of docs/deploy/patroni.md, for
`make test-ha` (tests/processes/test_patroni_failover.py) and
bench/ha_failover.py.

    with patroni_cluster.cluster() as ha:
        ha.url()          # postgresql://postgres@127.0.0.1:p1,127.0.0.1:p2/leasehold?target_session_attrs=read-write
        ha.leader()       # the node whose REST API answers /primary 200, or None
        ha.kill(node)     # SIGKILL its Patroni and its PostgreSQL: the node dies
        ha.freeze(node)   # SIGSTOP both (a hung node); ha.thaw(node)

What it needs: etcd (Debian's ``etcd-server``, installed here if missing),
PostgreSQL's server binaries (tests/pg_cluster.py finds or installs them) and
Patroni in its own venv, ``.venv/ha``, made by `make test-ha` (``PATRONI``
names another ``patroni`` executable). Patroni runs as the user PostgreSQL
runs as (``postgres`` when root), so that venv is on Debian's Python, which
that user can run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests import pg_cluster


ROOT = Path(__file__).resolve().parent.parent
PATRONI = Path(os.environ.get("PATRONI", ROOT / ".venv" / "ha" / "bin" / "patroni"))

# The settings that decide failover time (docs/deploy/patroni.md, decision 0051): the leader key
# lives ttl seconds unless renewed (every loop_wait); loop_wait + 2 * retry_timeout <= ttl; a
# crashed primary is failed over at once (primary_start_timeout 0), not restarted in place. The
# bench (bench/ha_failover.py) tries others through HA_TTL, HA_LOOP_WAIT, HA_RETRY_TIMEOUT and
# HA_PRIMARY_START_TIMEOUT.
TTL, LOOP_WAIT, RETRY_TIMEOUT, PRIMARY_START_TIMEOUT = (
    int(os.environ.get(f"HA_{name}", default))
    for name, default in (("TTL", 20), ("LOOP_WAIT", 2), ("RETRY_TIMEOUT", 5), ("PRIMARY_START_TIMEOUT", 0)))


def etcd_bin() -> str:
    found = shutil.which("etcd")
    if found:
        return found
    pg_cluster._apt_install("etcd-server", "etcd")
    found = shutil.which("etcd")
    if not found:
        raise SystemExit("patroni_cluster: etcd-server installed, yet etcd is not found")
    return found


def _get(url: str, timeout: float = 2.0) -> tuple[int, dict]:
    """A GET on a REST API: (status, JSON body); (0, {}) if nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        try:
            return err.code, json.loads(err.read() or b"{}")
        except ValueError:
            return err.code, {}
    except (OSError, ValueError):
        return 0, {}


def wait_for(done, seconds: float, what: str, interval: float = 0.1):
    """Poll ``done()`` until it returns something true, at most ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        found = done()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {seconds} s: {what}")
        time.sleep(interval)


class Node:
    """One PostgreSQL node and the Patroni that manages it."""

    def __init__(self, name: str, root: Path, bin_dir: Path, as_user: dict):
        self.name, self.root = name, root
        self.pg = pg_cluster.Cluster(root, pg_cluster._free_port(), bin_dir, as_user)
        self.api_port = pg_cluster._free_port()
        self.api = f"http://127.0.0.1:{self.api_port}"
        self.config = root / "patroni.yml"
        self.log_path = root / "patroni.log"
        self.proc: subprocess.Popen | None = None
        self.as_user = as_user

    @property
    def port(self) -> int:
        return self.pg.port

    def role(self) -> str:
        """What Patroni's REST API says this node is: primary, replica, ..., or "" if it does not answer."""
        status, body = _get(f"{self.api}/patroni", timeout=1.0)
        return str(body.get("role", "")) if status else ""

    def start(self) -> None:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(PATRONI), str(self.config)], cwd=self.root, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True, **self.as_user)
        log.close()

    def signal(self, sig: int) -> None:
        """``sig`` to Patroni and to PostgreSQL's postmaster and every child of it."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        self.pg.signal_all(sig)

    def output(self) -> str:
        return self.log_path.read_bytes().decode(errors="replace") if self.log_path.exists() else ""


class HaCluster:
    def __init__(self, root: Path, synchronous: str = "on"):
        self.root = root
        self.bin = pg_cluster.server_bin()
        self.as_user = pg_cluster._run_as()
        self.scope = f"leasehold-{root.name[-8:]}"
        self.etcd_port, self.etcd_peer = pg_cluster._free_port(), pg_cluster._free_port()
        self.etcd: subprocess.Popen | None = None
        self.nodes = [Node(f"node{n}", root / f"node{n}", self.bin, self.as_user) for n in range(2)]
        self.synchronous = synchronous  # "on": synchronous_mode; "strict": also synchronous_mode_strict

    def url(self, database: str = "leasehold") -> str:
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"postgresql://{pg_cluster.SUPERUSER}@{hosts}/{database}?target_session_attrs=read-write"

    def node_url(self, node: Node, database: str = "leasehold") -> str:
        return f"postgresql://{pg_cluster.SUPERUSER}@127.0.0.1:{node.port}/{database}"

    def _config(self, node: Node) -> dict:
        return {
            "scope": self.scope, "name": node.name,
            "log": {"level": "INFO", "format": "%(asctime)s %(levelname)s: %(message)s"},
            "restapi": {"listen": f"127.0.0.1:{node.api_port}", "connect_address": f"127.0.0.1:{node.api_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL, "loop_wait": LOOP_WAIT, "retry_timeout": RETRY_TIMEOUT,
                    "primary_start_timeout": PRIMARY_START_TIMEOUT,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True, "synchronous_mode_strict": self.synchronous == "strict",
                    "postgresql": {
                        "use_pg_rewind": True, "use_slots": True,
                        "parameters": {"max_connections": 200, "wal_level": "replica", "hot_standby": "on",
                                       "wal_log_hints": "on", "max_wal_senders": 10,
                                       "max_replication_slots": 10, "wal_keep_size": "128MB"},
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, {"auth": "trust"}, "no-sync"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.port}", "connect_address": f"127.0.0.1:{node.port}",
                "data_dir": str(node.pg.data), "bin_dir": str(self.bin), "pgpass": str(node.root / "pgpass"),
                "authentication": {"superuser": {"username": pg_cluster.SUPERUSER, "password": "x"},
                                   "replication": {"username": pg_cluster.SUPERUSER, "password": "x"},
                                   "rewind": {"username": pg_cluster.SUPERUSER, "password": "x"}},
                # A test's nodes: no fsync (their processes die, their machine does not).
                "parameters": {"unix_socket_directories": str(node.root), "fsync": "off"},
                "pg_hba": ["local all all trust", "host all all 127.0.0.1/32 trust",
                           "host replication all 127.0.0.1/32 trust"],
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }

    def start(self) -> "HaCluster":
        if not PATRONI.exists():
            raise SystemExit(f"patroni_cluster: {PATRONI} is missing: `make test-ha` installs Patroni into .venv/ha")
        etcd_dir = self.root / "etcd"
        peer = f"http://127.0.0.1:{self.etcd_peer}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        with open(self.root / "etcd.log", "ab") as log:
            self.etcd = subprocess.Popen(
                [etcd_bin(), "--name", "etcd0", "--data-dir", str(etcd_dir), "--listen-client-urls", client,
                 "--advertise-client-urls", client, "--listen-peer-urls", peer,
                 "--initial-advertise-peer-urls", peer, "--initial-cluster", f"etcd0={peer}",
                 "--initial-cluster-state", "new"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: _get(f"{client}/health")[1].get("health") == "true", 60, "etcd answering")
        for node in self.nodes:
            node.root.mkdir()
            node.config.write_text(json.dumps(self._config(node), indent=1))  # YAML reads JSON
            if self.as_user:
                for path in (node.root, node.config):
                    os.chown(path, self.as_user["user"], self.as_user["group"])
        first, second = self.nodes
        first.start()
        wait_for(lambda: first.role() == "primary" and _get(f"{first.api}/primary")[0] == 200, 120,
                 f"{first.name} bootstrapped as primary\n{first.output()[-3000:]}", 0.2)
        second.start()
        self.wait_synchronous(second, 180)
        import psycopg

        with psycopg.connect(self.node_url(first, "postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE leasehold")
        return self

    def wait_synchronous(self, node: Node, seconds: float) -> None:
        """Until ``node`` is the synchronous standby (Patroni's /sync answers 200)."""
        wait_for(lambda: _get(f"{node.api}/sync", timeout=1.0)[0] == 200, seconds,
                 f"{node.name} the synchronous standby\n{node.output()[-3000:]}", 0.2)

    def leader(self) -> Node | None:
        """The node Patroni's REST API answers /primary 200 on (it holds the leader key)."""
        for node in self.nodes:
            if _get(f"{node.api}/primary", timeout=1.0)[0] == 200:
                return node
        return None

    def primary_answers(self, node: Node) -> bool:
        """Whether ``node``'s PostgreSQL answers, out of recovery (it takes writes)."""
        import psycopg

        try:
            with psycopg.connect(self.node_url(node, "postgres"), connect_timeout=2, autocommit=True) as conn:
                return conn.execute("SELECT NOT pg_is_in_recovery()").fetchone() == (True,)
        except psycopg.Error:
            return False

    def other(self, node: Node) -> Node:
        return self.nodes[1 - self.nodes.index(node)]

    def patronictl(self, *args: str) -> subprocess.CompletedProcess:
        """patronictl with the first live node's configuration (the same DCS and scope)."""
        return subprocess.run([str(PATRONI.with_name("patronictl")), "-c", str(self.nodes[0].config), *args],
                              capture_output=True, text=True, timeout=120, **self.as_user)

    def switchover(self, candidate: Node) -> subprocess.CompletedProcess:
        return self.patronictl("switchover", "--candidate", candidate.name, "--force", self.scope)

    def stop(self) -> None:
        for node in self.nodes:
            node.signal(signal.SIGCONT)
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()  # Patroni stops its PostgreSQL
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
            node.pg.signal_all(signal.SIGKILL)  # a PostgreSQL whose Patroni died before it
        if self.etcd is not None:
            self.etcd.kill()
            self.etcd.wait()


@contextmanager
def cluster(synchronous: str = "on") -> Iterator[HaCluster]:
    """A started Patroni cluster (a primary and its synchronous standby) with a database ``leasehold``."""
    root = Path(tempfile.mkdtemp(prefix="leasehold-ha-"))
    ha = None
    try:
        if pg_cluster._run_as():
            user = pg_cluster._run_as()
            os.chown(root, user["user"], user["group"])
        ha = HaCluster(root, synchronous)
        ha.start()
        yield ha
    finally:
        if ha is not None:
            ha.stop()
        if os.environ.get("HA_KEEP"):  # the logs, for a timeline (bench/ha_failover.py --keep)
            for log in [*root.glob("etcd.log"), *root.glob("node*/patroni.log")]:
                kept = Path(os.environ["HA_KEEP"]) / root.name / log.relative_to(root)
                kept.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(log, kept)
        shutil.rmtree(root, ignore_errors=True)
