"""Behind a real nginx (Debian's), configured by the block docs/guide/tls.md
documents, with LEASEHOLD_TRUSTED_PROXIES naming it: a client's own
``Forwarded: for=...;proto=https`` makes no one believe it is elsewhere or on
https (issue 48, point 5). A SAS limited to another address (sip) or to
https (spr) is refused over plain http, the history records the client's
real address (from X-Forwarded-For), and refusals land in the client's one
bucket. Three arrangements: the documented block as it is; the block
without its line clearing ``Forwarded`` (the server alone must ignore it);
and the server told to read ``Forwarded`` (the block's clearing alone must
keep the client's out). nginx runs as the test's own process, on loopback
ports, its pid and logs in the test's directory."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import sqlite3
import subprocess
from email.utils import formatdate
from pathlib import Path

import pytest
from azure.storage.blob import BlobSasPermissions, generate_blob_sas

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests.server_process import stop_group
from tests import azure_raw
from tests.conftest import free_port

from .test_processes import ROOT, Server, wait_for_port

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
pytestmark = [pytest.mark.processes,
              pytest.mark.skipif(NGINX is None, reason="nginx (Debian's) is not installed: make debian")]

SPOOF = "198.51.100.7"
CLEARING = 'proxy_set_header Forwarded "";'


def documented_block() -> str:
    text = (ROOT / "docs/guide/tls.md").read_text()
    found = re.search(r"```nginx\n(.*?)```", text, re.S)
    assert found, "docs/guide/tls.md has no nginx block"
    return found.group(1)


def nginx_config(tmp: Path, listen: int, upstream: int, *, clearing: bool) -> str:
    """The documented server block on a loopback port over plain http (its
    TLS lines left out), passing to ``upstream``, in a whole nginx.conf
    whose pid, logs and temporary files are in ``tmp``."""
    block, changed = [], set()
    for line in documented_block().splitlines():
        kept = line.strip()
        if kept.startswith(("ssl_certificate", "add_header Strict-Transport-Security")):
            continue
        if kept.startswith("listen "):
            line = f"    listen 127.0.0.1:{listen};"
            changed.add("listen")
        if "http://127.0.0.1:10000" in line:
            line = line.replace("127.0.0.1:10000", f"127.0.0.1:{upstream}")
            changed.add("upstream")
        if kept.startswith(CLEARING):
            changed.add("clearing")
            if not clearing:
                continue
        block.append(line)
    assert changed == {"listen", "upstream", "clearing"}, f"the documented block changed shape: {changed}"
    body = "\n".join(block)
    temp = "\n".join(f"    {kind}_temp_path {tmp}/{kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    user = "user root;\n" if os.geteuid() == 0 else ""  # the workers read the test's private directory
    return (f"{user}daemon off;\npid {tmp}/nginx.pid;\nerror_log {tmp}/error.log info;\n"
            f"events {{ worker_connections 64; }}\n"
            f"http {{\n    access_log {tmp}/access.log;\n{temp}\n{body}\n}}\n")


class Nginx:
    def __init__(self, tmp: Path, upstream: int, *, clearing: bool):
        self.dir = tmp / "nginx"
        self.dir.mkdir()
        self.port = free_port()
        (self.dir / "nginx.conf").write_text(nginx_config(self.dir, self.port, upstream, clearing=clearing))
        self.log = open(self.dir / "stderr.log", "ab")
        assert NGINX is not None
        self.proc = subprocess.Popen([NGINX, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf")],
                                     start_new_session=True, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for_port(self.port, self.proc, output=self.output)

    def output(self) -> str:
        return "".join((self.dir / name).read_text(errors="replace")
                       for name in ("stderr.log", "error.log") if (self.dir / name).exists())

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_group(self.proc)  # the master, and its workers with it
        self.log.close()


def _send(port: int, target: str, headers: dict, *, source: str) -> tuple[int, str, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        connection.request("PUT", target, body=b"", headers={"Content-Length": "0", **headers})
        response = connection.getresponse()
        return response.status, response.getheader("x-ms-error-code") or "", response.read().decode(errors="replace")
    finally:
        connection.close()


def _acquire(**more: str) -> dict:
    return {"x-ms-version": "2025-11-05", "x-ms-lease-action": "acquire", "x-ms-lease-duration": "15",
            "x-ms-date": formatdate(usegmt=True), "Forwarded": f"for={SPOOF};proto=https", **more}


def _server(tmp: Path, header: str) -> Server:
    server = Server(tmp, workers=1).migrate()
    server.env.update(LEASEHOLD_TRUSTED_PROXIES="127.0.0.1", LEASEHOLD_FORWARDED_HEADER=header,
                      LEASEHOLD_UNAUTHENTICATED_RATE="3/hour", LEASEHOLD_UNAUTHENTICATED_RATE_TOTAL="")
    return server.start()


@pytest.fixture(scope="module")
def x_forwarded_for(tmp_path_factory):
    """The server reading X-Forwarded-For, for the two arrangements that
    differ only in nginx's block (each with a container and client
    addresses of its own: a bucket each)."""
    server = _server(tmp_path_factory.mktemp("xff"), "x-forwarded-for")
    yield server
    server.kill()


@pytest.mark.parametrize("clearing, header, client, flooder", [
    (True, "x-forwarded-for", "127.0.0.5", "127.0.0.6"), (False, "x-forwarded-for", "127.0.0.7", "127.0.0.8"),
    (True, "forwarded", "127.0.0.5", "127.0.0.6")], ids=["documented", "without-clearing", "server-reads-forwarded"])
def test_a_clients_own_forwarded_header_is_not_believed(request, tmp_path, clearing, header, client, flooder):
    shared = header == "x-forwarded-for"
    server = request.getfixturevalue("x_forwarded_for") if shared else _server(tmp_path, header)
    name = f"proxied{'clearing' if clearing else 'kept'}{header.replace('-', '')}"
    root = f"/{DEV_ACCOUNT}/{name}"
    nginx = None
    try:
        assert azure_raw.signed("PUT", server.url, f"{root}?restype=container").status_code == 201
        for blob in ("ip", "https", "shared"):
            assert azure_raw.signed("PUT", server.url, f"{root}/{blob}", body=b"x",
                                    headers={"x-ms-blob-type": "BlockBlob"}).status_code == 201
        nginx = Nginx(tmp_path, server.port, clearing=clearing)
        expiry = "2099-01-01T00:00:00Z"
        only_spoof = generate_blob_sas(DEV_ACCOUNT, name, "ip", account_key=DEV_KEY, expiry=expiry,
                                       permission=BlobSasPermissions(write=True), ip=SPOOF)
        only_https = generate_blob_sas(DEV_ACCOUNT, name, "https", account_key=DEV_KEY, expiry=expiry,
                                       permission=BlobSasPermissions(write=True), protocol="https")
        by_ip = _send(nginx.port, f"{root}/ip?comp=lease&{only_spoof}", _acquire(), source=client)
        by_https = _send(nginx.port, f"{root}/https?comp=lease&{only_https}", _acquire(), source=client)
        path = f"{root}/shared?comp=lease"
        signed = azure_raw.signed_headers("PUT", path, {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15"})
        shared_key = _send(nginx.port, path, {**signed, "Forwarded": f"for={SPOOF};proto=https"}, source=client)
        # Anonymous, each claiming an address of its own: one client, one bucket (3 refusals, then throttled).
        anonymous = [_send(nginx.port, f"{root}/shared?comp=lease", _acquire(Forwarded=f"for=198.51.100.{n}"),
                           source=flooder)[:2] for n in range(10, 15)]
    finally:
        if nginx is not None:
            nginx.stop()
        if not shared:
            server.kill()
    assert by_ip[:2] == (403, "AuthorizationSourceIPMismatch"), by_ip
    assert by_https[:2] == (403, "AuthorizationProtocolMismatch"), by_https
    assert shared_key[0] == 201, shared_key
    # With the server reading Forwarded, which nginx clears, every client is the proxy itself: one bucket,
    # which the two SAS refusals above had already drawn on.
    real, left = ("127.0.0.1", 1) if header == "forwarded" else (client, 3)
    assert anonymous == [(401, "NoAuthenticationInformation")] * left + [(503, "ServerBusy")] * (5 - left)
    with sqlite3.connect(f"file:{server.db}?mode=ro", uri=True) as db:
        recorded = db.execute("SELECT DISTINCT remote_addr FROM leases_leaseevent WHERE container = ?",
                              (name,)).fetchall()
    assert recorded == [(real,)]
