"""Start, watch and stop the two servers under test, on loopback only.

Azurite is installed from npm into bench/node_modules (git-ignored) when
missing, pinned by bench/package.json, and started in memory with
--skipApiVersionCheck --silent. Leasehold runs exactly as `make run` would
(python -m config.serve: uvicorn + serving/front.py, production settings) on a fresh file-backed
SQLite database in a temporary directory (synchronous=FULL by default).
Every server is started in its own session and killed by its process group.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PYTHON = sys.executable
AZURITE_BIN = BENCH / "node_modules" / ".bin" / "azurite-blob"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ensure_azurite() -> Path:
    if AZURITE_BIN.exists():
        return AZURITE_BIN
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm not found: install Node.js 18+ to benchmark against Azurite")
    log("installing Azurite from npm into bench/node_modules ...")
    subprocess.run([npm, "install", "--no-audit", "--no-fund", "--no-package-lock", "--loglevel=error"],
                   cwd=BENCH, check=True, timeout=600)
    if not AZURITE_BIN.exists():
        raise SystemExit("npm install did not provide azurite-blob")
    return AZURITE_BIN


def port_free(port: int, wait: float = 15.0) -> bool:
    """Whether the port can be listened on (as servers do, SO_REUSEADDR),
    waiting a little for a previous server to let go of it."""
    deadline = time.monotonic() + wait
    while True:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
        time.sleep(0.2)


def wait_port(port: int, proc: subprocess.Popen, timeout: float, logfile: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}; log:\n{logfile.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"server did not listen on 127.0.0.1:{port} within {timeout}s")


# ------------------------------------------------------------------ /proc


def tree_pids(root: int) -> list[int]:
    """root and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime
        except OSError:
            pass
    return total / CLK_TCK


def rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            return int(fh.read().split()[1]) * PAGE / 2**20
    except OSError:
        return 0.0


def anon_mib(pid: int) -> float:
    """Anonymous resident memory (heap, stacks): what a leak grows. RSS also
    counts the memory-mapped database pages a worker has read, which grow
    with the database (up to LEASEHOLD_SQLITE_MMAP_MB) and are page cache."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"RssAnon:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            parts = fh.read().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(p.decode(errors="replace") for p in parts if p)
    return text[:60]


# ------------------------------------------------------------------ servers


class Server:
    name = "?"
    proc: subprocess.Popen | None = None

    def __init__(self, port: int, workdir: Path):
        self.port = port
        self.workdir = workdir
        self.logfile = workdir / f"{self.name.lower()}.log"

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The started server's main process."""
        if self.proc is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.proc.pid

    def pids(self) -> list[int]:
        return tree_pids(self.proc.pid) if self.proc else []

    def start(self) -> None:
        raise NotImplementedError

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None,
               cwd: Path | None = None) -> subprocess.Popen[bytes]:
        if not port_free(self.port):
            raise SystemExit(f"port {self.port} is in use; pick others with --port-base")
        with open(self.logfile, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                         start_new_session=True)
        return self.proc

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the server's own session only
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=5)


class Azurite(Server):
    name = "Azurite"

    def start(self) -> None:
        binary = ensure_azurite()
        # in memory: nothing is written (cwd is the temporary directory all the same)
        proc = self._spawn([str(binary), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                            "--skipApiVersionCheck", "--inMemoryPersistence", "--silent", "--disableTelemetry"],
                           cwd=self.workdir)
        wait_port(self.port, proc, 60, self.logfile)

    def version(self) -> str:
        try:
            import json
            return json.loads((BENCH / "node_modules" / "azurite" / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            return "?"


class Leasehold(Server):
    name = "Leasehold"

    def __init__(self, port: int, workdir: Path, *, synchronous: str = "FULL", extra_env: dict | None = None,
                 command: str | None = None, variant: dict | None = None, tree: str | None = None):
        if variant or tree:  # other settings (--compare-env) or code (--compare-tree), measured alongside
            self.name = "Leasehold-variant"
        super().__init__(port, workdir)
        # the checkout served, and its Python (its own .venv if it has one)
        self.repo = Path(tree).resolve() if tree else REPO
        venv_python = self.repo / ".venv" / "bin" / "python"
        self.python = str(venv_python) if tree and venv_python.exists() else PYTHON
        self.command = command  # another server to try (--leasehold-cmd); default: as `make run`
        self.db = workdir / f"{self.name.lower()}.sqlite3"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEHOLD_", "DJANGO_"))}
        self.env.update({
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "LEASEHOLD_VAR_DIR": str(workdir),
            "LEASEHOLD_DATABASE": str(self.db),
            "LEASEHOLD_SQLITE_SYNCHRONOUS": synchronous,
            "LEASEHOLD_BIND": self.host,
            "LEASEHOLD_DEBUG": "0",
            "LEASEHOLD_ADMIN_PASSWORD": "bench-" + os.urandom(8).hex(),
        })
        self.env.update(extra_env or {})
        self.env.update(variant or {})

    def prepare(self) -> None:
        for argv in (["manage.py", "migrate", "--noinput", "-v0"], ["manage.py", "leasehold_setup"]):
            subprocess.run([self.python, *argv], cwd=self.repo, env=self.env, check=True, timeout=300,
                           stdout=subprocess.DEVNULL)

    def start(self) -> None:
        if self.command:
            import shlex
            argv = [a.format(host="127.0.0.1", port=self.port) for a in shlex.split(self.command)]
        else:
            argv = [self.python, "-m", "serving.server"]
        proc = self._spawn(argv, env=self.env, cwd=self.repo)
        wait_port(self.port, proc, 60, self.logfile)
        # the first worker may listen before the others have imported Django
        time.sleep(1.0)

    def settings_summary(self) -> str:
        if self.command:
            return self.command
        get = self.env.get
        if self.repo != REPO:
            return f"{self.repo} (serving/server.py) workers={get('LEASEHOLD_WORKERS', '2')}"
        return (f"uvicorn (serving/server.py) workers={get('LEASEHOLD_WORKERS', '2')} "
                f"threads={get('LEASEHOLD_THREADS', '1')}")

    def issue_api_tokens(self, count: int) -> list[str]:
        """``count`` JSON API tokens of one user (not a superuser) with the
        model permissions lease actions need on blobs, as a deployment would
        give a service: what bench/run.py's api-vs-azure drives the JSON API
        with, a token per client, so that each is a principal of its own,
        counted against the rate limit (LEASEHOLD_API_RATE) on its own as
        separate services would be."""
        script = (
            "from django.contrib.auth.models import Permission, User\n"
            "from leases.models.tokens import ApiToken\n"
            "user, _ = User.objects.get_or_create(username='bench-api')\n"
            "user.user_permissions.add(*Permission.objects.filter(codename__in=["
            "'change_blob', 'break_blob_lease', 'view_blob']))\n"
            f"for i in range({count}):\n"
            "    print(ApiToken.issue(user=user, name=f'bench-{i}')[1])\n")
        out = subprocess.run([self.python, "manage.py", "shell", "-c", script], cwd=self.repo, env=self.env,
                             check=True, timeout=120, capture_output=True, text=True)
        self.api_tokens = out.stdout.strip().splitlines()[-count:]
        return self.api_tokens

    def history_count(self) -> int:
        import sqlite3
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)
        try:
            return con.execute("SELECT count(*) FROM leases_leaseevent").fetchone()[0]
        finally:
            con.close()
