"""A real OpenID provider for the tests, in its own process: discovery, JWKS, a token endpoint
(client credentials for services, authorization code with PKCE for people) and an authorization endpoint,
signing with joserfc (Authlib's JOSE) (the server verifies with PyJWT: no library checks its own output).
Keys rotate when a test asks (``rotate``); the JWKS fetches are counted (``stats``), so a test
can bound how often the server fetched them.

``OidcProvider()`` starts it on a free port and stops it (a context manager); the tests talk to
it over HTTP only. Run alone: ``python tests/oidc_provider.py [PORT]`` prints its issuer URL.

Control endpoints (tests only, under ``/_control/``, JSON bodies): ``client`` registers a client
(id, secret, claims added to its tokens), ``user`` a person for the authorization code flow,
``approve`` the user the authorization endpoint signs in next (an automatic approval, as a test
chooses), ``rotate`` makes a new signing key (``drop``: unpublish the old ones), ``mint`` signs any claims
(``unpublished``: with a key the JWKS never shows), ``stats`` counts the JWKS fetches."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import requests

TOKEN_SECONDS = 600


class Keys:
    """The signing keys: the newest signs; every published one is in the JWKS."""

    def __init__(self, alg: str = "RS256"):
        self.lock = threading.Lock()
        self.published: list = []
        self.alg = alg
        self.rotate()
        self.unpublished = self._new("RS256")

    @staticmethod
    def _new(alg: str):
        from joserfc.jwk import ECKey, RSAKey

        parameters: Any = {"kid": secrets.token_hex(8), "alg": alg, "use": "sig"}
        if alg == "ES256":
            return ECKey.generate_key("P-256", parameters=parameters)
        return RSAKey.generate_key(2048, parameters=parameters)

    def rotate(self, *, drop: bool = False, alg: str | None = None) -> str:
        key = self._new(alg or self.alg)
        with self.lock:
            self.published = [key] if drop else [key, *self.published]
        return key.as_dict()["kid"]

    def jwks(self) -> dict:
        with self.lock:
            return {"keys": [key.as_dict(private=False) for key in self.published]}

    def sign(self, claims: dict, *, unpublished: bool = False, kid: str | None = None) -> str:
        from joserfc import jwt

        key = self.unpublished if unpublished else self.published[0]
        header = {"alg": key.alg, "typ": "JWT", "kid": kid or key.kid}
        return jwt.encode(header, claims, key, algorithms=[key.alg])


class Provider:
    def __init__(self, issuer: str):
        self.issuer = issuer
        self.keys = Keys()
        self.clients: dict[str, dict] = {}
        self.users: dict[str, dict] = {}
        self.codes: dict[str, dict] = {}
        self.jwks_fetches = 0
        self.tokens_issued = 0
        self.pkce_exchanges = 0
        self.approve = ""  # the user the authorization endpoint signs in (approves) when no login_hint names one

    def discovery(self) -> dict:
        return {"issuer": self.issuer, "jwks_uri": f"{self.issuer}/jwks",
                "token_endpoint": f"{self.issuer}/token", "authorization_endpoint": f"{self.issuer}/authorize",
                "userinfo_endpoint": f"{self.issuer}/userinfo",
                "response_types_supported": ["code"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256", "ES256"],
                "grant_types_supported": ["client_credentials", "authorization_code"],
                "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"]}

    def claims(self, client_id: str, audience: str, extra: dict) -> dict:
        now = int(time.time())
        return {"iss": self.issuer, "aud": audience, "iat": now, "nbf": now, "exp": now + TOKEN_SECONDS,
                "jti": secrets.token_hex(8), "azp": client_id, **extra}

    def token(self, form: dict, authorization: str) -> tuple[int, dict]:
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if authorization.startswith("Basic "):
            client_id, _, secret = base64.b64decode(authorization[6:]).decode().partition(":")
        client = self.clients.get(client_id)
        if client is None or not secrets.compare_digest(client["secret"], secret):
            return 401, {"error": "invalid_client"}
        grant = form.get("grant_type")
        if grant == "client_credentials":
            scope = form.get("scope", "").split()
            audience = scope[0].removesuffix("/.default") if scope else client.get("audience", "")
            extra = {"sub": client.get("sub", client_id), **client.get("claims", {})}
            self.tokens_issued += 1
            return 200, {"access_token": self.keys.sign(self.claims(client_id, audience, extra)),
                         "token_type": "Bearer", "expires_in": TOKEN_SECONDS}
        if grant == "authorization_code":
            found = self.codes.pop(form.get("code", ""), None)
            if found is None or found["client_id"] != client_id or found["redirect_uri"] != form.get("redirect_uri"):
                return 400, {"error": "invalid_grant"}
            if found.get("code_challenge"):  # PKCE (RFC 7636), S256 only
                verifier = form.get("code_verifier", "").encode()
                made = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=").decode()
                if found.get("code_challenge_method") != "S256" or made != found["code_challenge"]:
                    return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
                self.pkce_exchanges += 1
            user = self.users[found["user"]]
            extra = {"sub": found["user"], **user}
            if found.get("nonce"):
                extra["nonce"] = found["nonce"]
            self.tokens_issued += 1
            return 200, {"access_token": self.keys.sign(self.claims(client_id, client.get("audience", ""), extra)),
                         "id_token": self.keys.sign(self.claims(client_id, client_id, extra)),
                         "token_type": "Bearer", "expires_in": TOKEN_SECONDS}
        return 400, {"error": "unsupported_grant_type"}

    def authorize(self, query: dict) -> str:
        """The redirect after an automatic sign-in as ``login_hint`` (the only user, if one)."""
        user = query.get("login_hint") or self.approve or next(iter(self.users), "")
        if user not in self.users or query.get("client_id") not in self.clients:
            raise KeyError(user)
        code = secrets.token_urlsafe(16)
        self.codes[code] = {"client_id": query["client_id"], "redirect_uri": query.get("redirect_uri"),
                            "user": user, "nonce": query.get("nonce"), "code_challenge": query.get("code_challenge"),
                            "code_challenge_method": query.get("code_challenge_method")}
        return f"{query.get('redirect_uri')}?{urlencode({'code': code, 'state': query.get('state', '')})}"

    def control(self, action: str, body: dict) -> dict:
        if action == "client":
            self.clients[body["client_id"]] = body
            return {}
        if action == "user":
            self.users[body.pop("sub")] = body
            return {}
        if action == "rotate":
            return {"kid": self.keys.rotate(drop=bool(body.get("drop")), alg=body.get("alg"))}
        if action == "mint":
            claims = self.claims(body.get("client_id", "minted"), body.get("aud", ""), body.get("claims", {}))
            claims.update(body.get("override", {}))
            claims = {k: v for k, v in claims.items() if v is not None}
            return {"token": self.keys.sign(claims, unpublished=bool(body.get("unpublished")), kid=body.get("kid"))}
        if action == "approve":
            self.approve = body.get("sub", "")
            return {}
        if action == "stats":
            return {"jwks_fetches": self.jwks_fetches, "tokens_issued": self.tokens_issued,
                    "pkce_exchanges": self.pkce_exchanges}
        raise KeyError(action)


def handler_for(provider: Provider):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # quiet: the tests read answers, not logs
            pass

        def _send(self, status: int, body: dict | None = None, headers: dict | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            url = urlparse(self.path)
            if url.path == "/.well-known/openid-configuration":
                return self._send(200, provider.discovery())
            if url.path == "/jwks":
                provider.jwks_fetches += 1
                return self._send(200, provider.keys.jwks())
            if url.path == "/authorize":
                try:
                    target = provider.authorize({k: v[0] for k, v in parse_qs(url.query).items()})
                except KeyError:
                    return self._send(400, {"error": "access_denied"})
                return self._send(302, None, {"Location": target})
            return self._send(404, {"error": "not_found"})

        def do_POST(self):
            url = urlparse(self.path)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if url.path == "/token":
                form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
                status, body = provider.token(form, self.headers.get("Authorization", ""))
                return self._send(status, body)
            if url.path.startswith("/_control/"):
                try:
                    return self._send(200, provider.control(url.path[len("/_control/"):], json.loads(raw or b"{}")))
                except (KeyError, ValueError) as exc:
                    return self._send(400, {"error": repr(exc)})
            return self._send(404, {"error": "not_found"})

    return Handler


def serve(port: int = 0) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(Provider("")))
    issuer = f"http://127.0.0.1:{server.server_address[1]}"
    server.RequestHandlerClass = handler_for(Provider(issuer))
    print(issuer, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


class OidcProvider:
    """The provider in a process of its own, on a free port, for the length of a ``with``."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.issuer = ""

    def __enter__(self) -> OidcProvider:
        self.proc = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE, start_new_session=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.proc.stdout is not None
        self.issuer = self.proc.stdout.readline().decode().strip()
        if not self.issuer.startswith("http://"):
            self.stop()
            raise RuntimeError("the OpenID provider did not start")
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def control(self, action: str, **body) -> dict:
        answer = requests.post(f"{self.issuer}/_control/{action}", json=body, timeout=10)
        answer.raise_for_status()
        return answer.json()

    def client(self, client_id: str, *, secret: str = "s3cret", **fields) -> None:
        self.control("client", client_id=client_id, secret=secret, **fields)

    def token(self, client_id: str, scope: str, *, secret: str = "s3cret") -> str:
        answer = requests.post(f"{self.issuer}/token", data={
            "grant_type": "client_credentials", "client_id": client_id, "client_secret": secret, "scope": scope},
            timeout=10)
        answer.raise_for_status()
        return answer.json()["access_token"]

    def mint(self, aud: str, claims: dict, **options) -> str:
        return self.control("mint", aud=aud, claims=claims, **options)["token"]


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
