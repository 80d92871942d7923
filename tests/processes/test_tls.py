"""TLS on the server's own port (LEASEHOLD_TLS_CERT, LEASEHOLD_TLS_KEY) and
the client's address behind a trusted proxy (LEASEHOLD_TRUSTED_PROXIES),
through a real server process: the Python SDK leasing over https, verifying
a throwaway CA's certificate; the admin's cookies Secure and HSTS sent;
forwarded addresses believed from the named proxies only."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import os
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import time

import pytest
import requests
from azure.core.exceptions import ServiceRequestError
from azure.storage.blob import BlobServiceClient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from leases.management.commands.leasehold_setup import DEV_ACCOUNT, DEV_KEY
from tests import azure_raw
from tests.server_process import ROOT, Instance, prepare

pytestmark = pytest.mark.processes

PASSWORD = "x" * 12  # the admin's, as server_process.prepare sets it


def _certificates(directory) -> tuple[str, str, str]:
    """A throwaway CA and a certificate it signed for 127.0.0.1 and
    localhost: (CA file, certificate file, key file)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Leasehold test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = (directory / "ca.pem", directory / "server.pem", directory / "server.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    paths[2].chmod(0o600)
    return tuple(str(p) for p in paths)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """Two workers (each loads the certificate) on https, with 127.0.0.1 (and no other address) a
    trusted proxy."""
    tmp = tmp_path_factory.mktemp("tls")
    ca, cert, key = _certificates(tmp)
    database = tmp / "leasehold.sqlite3"
    prepare(str(database), tmp)
    server = Instance(str(database), tmp, "server", workers=2)
    server.env.update(LEASEHOLD_TLS_CERT=cert, LEASEHOLD_TLS_KEY=key, LEASEHOLD_TRUSTED_PROXIES="127.0.0.1")
    server.url = server.url.replace("http://", "https://")
    server.start()
    try:
        yield server, database, ca
    finally:
        server.stop()


def _service(server, **kwargs) -> BlobServiceClient:
    return BlobServiceClient.from_connection_string(
        f"DefaultEndpointsProtocol=https;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
        f"BlobEndpoint={server.url}/{DEV_ACCOUNT};", retry_total=0, **kwargs)


def test_the_sdk_leases_over_https_verifying_the_certificate(tls_server):
    server, _, ca = tls_server
    service = _service(server, connection_verify=ca)
    blob = service.create_container("tls").upload_blob("job.lock", b"x")
    lease = blob.acquire_lease(lease_duration=15)
    lease.renew()
    assert blob.get_blob_properties().lease.state == "leased"
    lease.release()
    assert blob.get_blob_properties().lease.state == "available"
    # A client that does not trust the test CA refuses the server: the certificate is checked.
    with pytest.raises(ServiceRequestError):
        _service(server).get_container_client("tls").get_container_properties()
    # And the port speaks nothing but TLS.
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(server.url.replace("https://", "http://") + "/health/live", timeout=10)
    # The line comes once every worker serves, which may be after the first one answered.
    deadline = time.monotonic() + 60
    while "Leasehold ready on https://127.0.0.1:" not in server.output():
        assert time.monotonic() < deadline, server.output()[-2000:]
        time.sleep(0.1)  # waiting for the second worker, not for lease time


def test_admin_cookies_are_secure_and_hsts_is_sent(tls_server):
    server, _, ca = tls_server
    session = requests.Session()
    session.trust_env = False  # REQUESTS_CA_BUNDLE would win over session.verify
    session.verify = ca
    page = session.get(f"{server.url}/admin/login/", timeout=30)
    assert page.status_code == 200
    assert page.headers["Strict-Transport-Security"] == "max-age=31536000"
    assert "secure" in page.headers["Set-Cookie"].lower()  # csrftoken
    done = session.post(f"{server.url}/admin/login/", allow_redirects=False, timeout=30,
                        data={"username": "admin", "password": PASSWORD, "next": "/admin/",
                              "csrfmiddlewaretoken": session.cookies["csrftoken"]},
                        headers={"Referer": f"{server.url}/admin/login/"})
    assert done.status_code == 302, done.text[:500]
    assert all(cookie.secure for cookie in session.cookies), [(c.name, c.secure) for c in session.cookies]
    assert {"sessionid", "csrftoken"} <= {cookie.name for cookie in session.cookies}
    assert session.get(f"{server.url}/admin/", timeout=30).status_code == 200


def _acquire_from(server, ca, source: str, container: str, headers: dict) -> None:
    """A signed Create Container and a lease acquire on it, sent from the
    address ``source`` (any 127/8 address reaches the loopback server)."""
    context = ssl.create_default_context(cafile=ca)
    for path, extra in ((f"/{DEV_ACCOUNT}/{container}?restype=container", {}),
                        (f"/{DEV_ACCOUNT}/{container}?comp=lease&restype=container",
                         {"x-ms-lease-action": "acquire", "x-ms-lease-duration": "15"})):
        signed = azure_raw.signed_headers("PUT", path, extra)
        conn = http.client.HTTPSConnection("127.0.0.1", server.port, source_address=(source, 0), context=context,
                                           timeout=30)
        conn.request("PUT", path, headers={**signed, **headers, "Content-Length": "0"})
        status = conn.getresponse().status
        conn.close()
        assert status == 201, (path, status)


def _recorded_address(database, container: str) -> str:
    with sqlite3.connect(database) as conn:
        return conn.execute("SELECT remote_addr FROM leases_leaseevent WHERE container = ? AND action = 'acquire'",
                            [container]).fetchone()[0]


@pytest.mark.parametrize("source, headers, recorded", [
    # From the trusted proxy: the client it names; addresses further left are the client's own claims.
    ("127.0.0.1", {"X-Forwarded-For": "198.51.100.7, 203.0.113.9"}, "203.0.113.9"),
    ("127.0.0.1", {"X-Forwarded-For": "203.0.113.9, 127.0.0.1"}, "203.0.113.9"),  # a second trusted hop
    # Forwarded is believed only where LEASEHOLD_FORWARDED_HEADER says the proxy sets it (not by default).
    ("127.0.0.1", {"Forwarded": 'for=198.51.100.7, for="[2001:db8::17]:4711";proto=https'}, "127.0.0.1"),
    ("127.0.0.1", {"X-Forwarded-For": "not-an-address"}, "127.0.0.1"),
    ("127.0.0.1", {}, "127.0.0.1"),
    # From anyone else: the headers are not believed.
    ("127.0.0.2", {"X-Forwarded-For": "203.0.113.9"}, "127.0.0.2"),
    ("127.0.0.2", {"Forwarded": "for=203.0.113.9"}, "127.0.0.2"),
])
def test_forwarded_addresses_are_believed_only_from_the_trusted_proxies(tls_server, source, headers, recorded):
    server, database, ca = tls_server
    container = f"fwd-{abs(hash((source, tuple(headers.items())))) % 10**8}"
    _acquire_from(server, ca, source, container, headers)
    assert _recorded_address(database, container) == recorded


def test_a_key_that_does_not_fit_the_certificate_stops_the_start(tmp_path):
    _, cert, _ = _certificates(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _, _, wrong_key = _certificates(other)
    database = tmp_path / "leasehold.sqlite3"
    env = prepare(str(database), tmp_path)
    env = {**env, "LEASEHOLD_TLS_CERT": cert, "LEASEHOLD_TLS_KEY": wrong_key}
    done = subprocess.run([sys.executable, "-m", "serving.server"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert "Leasehold will not start: LEASEHOLD_TLS_CERT=" in done.stderr, done.stderr[-2000:]


def _client_hello() -> bytes:
    """The first flight of a TLS client, as a real one sends it."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_side=False)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("workers", [1, 2])  # uvicorn's own server, and the forked workers'
def test_a_tls_handshake_not_finished_within_the_header_timeout_is_cut(tmp_path, workers):
    """A client that opens a connection and sends nothing, half a
    ClientHello, or a whole one and then nothing, is cut by the server when
    LEASEHOLD_HEADER_TIMEOUT (2 s here) has passed, as one slow with its
    headers is; asyncio's default handshake timeout is 60 s, past the
    ceiling the client waits here. The client never closes its side: an end
    of stream it reads is the server's doing.

    Then a SIGTERM with a pooled client idle on its keep-alive TLS connection
    (the SDK's between renewals), which never answers the server's
    close_notify: a stopping server that waited for it sat out its whole
    graceful-shutdown timeout (10 s) and said so in its log. It cuts such a
    connection at once and exits 0."""
    ca, cert, key = _certificates(tmp_path)
    database = tmp_path / "leasehold.sqlite3"
    prepare(str(database), tmp_path)
    server = Instance(str(database), tmp_path, "server", workers=workers)
    server.env.update(LEASEHOLD_TLS_CERT=cert, LEASEHOLD_TLS_KEY=key, LEASEHOLD_HEADER_TIMEOUT="2")
    server.url = server.url.replace("http://", "https://")
    server.start()
    try:
        hello = _client_hello()
        for first in (b"", hello[:len(hello) // 2], hello):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)  # the ceiling
            try:
                sock.sendall(first)
                ended = False
                while not ended:
                    try:
                        ended = sock.recv(65536) == b""  # the server's answer to a whole hello, then the end
                    except ConnectionResetError:
                        ended = True
                    except TimeoutError:
                        pytest.fail(f"the server kept a handshake open 30 s after {len(first)} bytes")
            finally:
                sock.close()
        assert requests.get(f"{server.url}/health/live", verify=ca, timeout=30).status_code == 200

        assert server.proc is not None
        with requests.Session() as idle:
            idle.trust_env = False
            idle.verify = ca
            assert idle.get(f"{server.url}/health/live", timeout=30).status_code == 200  # its connection now idles
            os.killpg(server.proc.pid, signal.SIGTERM)
            server.proc.wait(timeout=60)
        # a stop that sat out serving/server.py's timeout_graceful_shutdown says so in the log
        assert "timeout graceful shutdown exceeded" not in server.output(), server.output()[-2000:]
        # uvicorn's single-process server ends by its own SIGTERM once it has stopped (it raises the
        # signal again); a supervisor exits 0
        assert server.proc.returncode == (0 if workers == 2 else -signal.SIGTERM), server.output()[-2000:]
    finally:
        server.stop()
