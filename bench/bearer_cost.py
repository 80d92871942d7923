#!/usr/bin/env python3
"""CPU per lease renewal on the Azure door with a bearer token against SharedKey, paired, in one
process, no HTTP: each request is checked as the server checks it (the admission check,
leases/auth/principals.py, then the WSGI application, whose lean lease path checks again and
writes), with environs built as serving/asgi.py builds them.

    .venv/bin/python bench/bearer_cost.py [--calls 300] [--rounds 7]

Three kinds of request, alternating within each round on one blob's lease:

* ``sharedkey``: signed with the account key (HMAC-SHA256 over the canonical request);
* ``bearer``: the same token each time, as a lease holder sends it for the token's life (verified
  once, then remembered for up to a minute: leases/auth/bearer.py);
* ``bearer-cold``: the token verified in full each time (RS256 signature and claims), the cost of
  the first request with a new token.

A second table times the credential checks alone (the admission check and the door's
``credentials``, no write), where the difference between the kinds is not lost in the write's.

The tokens come from the tests' OpenID provider (tests/oidc_provider.py), in its own process. The
ratios are medians of each round's ratio to ``sharedkey``; the machine's load moves every figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen  # noqa: E402
from appbench import ACCOUNT, KEY, environ_from  # noqa: E402

HOST = "127.0.0.1:10111"
PATH = f"/{ACCOUNT}/bench/b"


def bearer_renewal(token: str, lease_id: str) -> bytes:
    return (f"PUT {PATH}?comp=lease HTTP/1.1\r\nHost: {HOST}\r\nUser-Agent: {loadgen.USER_AGENT}\r\n"
            f"Content-Length: 0\r\nx-ms-version: {loadgen.API_VERSION}\r\nx-ms-lease-action: renew\r\n"
            f"x-ms-lease-id: {lease_id}\r\nAuthorization: Bearer {token}\r\n\r\n").encode()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    from tests.oidc_provider import OidcProvider

    with OidcProvider() as provider, tempfile.TemporaryDirectory() as tmp:
        provider.client("bench", claims={"roles": ["Leases.Write"]})
        os.environ.update({"DJANGO_SETTINGS_MODULE": "config.settings", "LEASEHOLD_VAR_DIR": tmp,
                           "LEASEHOLD_DATABASE": str(Path(tmp) / "db.sqlite3"), "LEASEHOLD_DEBUG": "0",
                           "LEASEHOLD_SQLITE_SYNCHRONOUS": "NORMAL", "LEASEHOLD_OIDC_ISSUER": provider.issuer,
                           "LEASEHOLD_OIDC_ROLES": "roles:Leases.Write=contributor"})
        return run(args, provider)


def run(args, provider) -> int:
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from config.wsgi import application as app
    from leases.auth import bearer, principals
    from leases.management.commands.leasehold_setup import DEV_KEY
    from leases.services import account_ensure

    account_ensure(name=ACCOUNT, key1=DEV_KEY)
    signer = loadgen.Signer(ACCOUNT, KEY)
    requests = loadgen.LeaseRequests(signer, HOST, PATH)
    token = provider.token("bench", "https://storage.azure.com/.default")

    from django.core.handlers.wsgi import get_path_info

    from leases.azure.auth import credentials

    def check(raw: bytes) -> str:
        environ = environ_from(raw)
        principals.identify(environ, door="azure", may_look_up=lambda: True)
        credentials(environ, get_path_info(environ), ACCOUNT)
        return "200"

    def call(raw: bytes) -> str:
        environ = environ_from(raw)
        principals.identify(environ, door="azure", may_look_up=lambda: True)
        out = {}

        def start_response(status, headers, exc_info=None):
            out["status"] = status

        b"".join(app(environ, start_response))
        return out["status"]

    for raw in (signer.build("PUT", HOST, f"/{ACCOUNT}/bench", {"restype": "container"}),
                signer.build("PUT", HOST, PATH, headers={"x-ms-blob-type": "BlockBlob"}, body=b"x")):
        assert call(raw).startswith("201")
    lease_id = str(uuid.uuid4())
    assert call(requests.acquire(lease_id, duration=60)).startswith("201")

    def forget() -> None:
        bearer._remembered.clear()

    kinds = {
        "sharedkey": (lambda: requests.renew(lease_id), None),
        "bearer": (lambda: bearer_renewal(token, lease_id), None),
        "bearer-cold": (lambda: bearer_renewal(token, lease_id), forget),
    }
    for title, run_one in (("CPU per renewal (admission check + lean lease path + write)", call),
                           ("CPU of the credential checks alone (admission check + the door's)", check)):
        figures: dict[str, list[float]] = {kind: [] for kind in kinds}
        for _ in range(args.rounds):
            for kind, (build, before) in kinds.items():
                raws = [build() for _ in range(args.calls)]
                assert run_one(raws[0]).startswith("200"), kind
                spent = 0.0
                for raw in raws:
                    if before is not None:
                        before()
                    started = time.process_time()
                    status = run_one(raw)
                    spent += time.process_time() - started
                    assert status.startswith("200"), (kind, status)
                figures[kind].append(spent / args.calls * 1e6)
        print(f"{title}, {args.calls} calls x {args.rounds} rounds")
        for kind, values in figures.items():
            ratios = [v / s for v, s in zip(values, figures["sharedkey"])]
            print(f"  {kind:12} median {statistics.median(values):7.1f} us   "
                  f"x{statistics.median(ratios):.2f} sharedkey (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    print(f"  JWKS fetches by the server: {provider.control('stats')['jwks_fetches']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
