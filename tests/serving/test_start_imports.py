"""What a server process imports to start: on SQLite, not the PostgreSQL driver (DRF's compat would
import it through django.contrib.postgres; config/settings.py keeps it out), and on PostgreSQL DRF
still finds django.contrib.postgres; without an OpenID Connect issuer, neither PyJWT
(leases/auth/bearer.py imports it to verify a token) nor Authlib (leases/admin/sso.py, to sign in).
Each in a fresh interpreter, as a server starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# What a server's master preloads before it forks (serving/server.py), then what each worker imports.
SERVER_START = """
import json, sys
import django
from django.core.handlers.wsgi import WSGIHandler
from django.urls import get_resolver
django.setup(set_prefix=False)
WSGIHandler()
get_resolver().url_patterns
import config.asgi
print(json.dumps(sorted(name for name, module in sys.modules.items() if module is not None)))
"""

NOT_AT_START_ON_SQLITE = ("psycopg", "psycopg_c", "psycopg_binary", "django.contrib.postgres.fields",
                          "django.db.backends.postgresql.psycopg_any", "jwt", "authlib")


def _run(code: str, tmp_path: Path, database: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEHOLD_", "DJANGO_"))}
    env.update(LEASEHOLD_VAR_DIR=str(tmp_path), LEASEHOLD_DATABASE=database, DJANGO_SETTINGS_MODULE="config.settings")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_a_server_on_sqlite_without_sso_starts_without_the_postgresql_driver_or_jwt(tmp_path):
    modules = set(json.loads(_run(SERVER_START, tmp_path, str(tmp_path / "db.sqlite3"))))
    assert "config.asgi" in modules and "leases.api.lean" in modules  # the whole start was imported
    assert sorted(modules.intersection(NOT_AT_START_ON_SQLITE)) == []


def test_on_postgresql_drf_still_finds_its_postgresql_fields(tmp_path):
    # Settings alone need no server: the URL is only parsed.
    code = ("import config.settings, rest_framework.compat as compat; "
            "print(compat.postgres_fields is not None and 'psycopg' in __import__('sys').modules)")
    assert _run(code, tmp_path, "postgresql://leasehold@127.0.0.1:1/leasehold") == "True"
