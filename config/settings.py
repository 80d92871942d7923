"""Django's settings, from Leasehold's (leases/conf/__init__.py: every LEASEHOLD_*
variable, read and checked once; docs/reference/configuration.md lists
them). The defaults give a local Azure-compatible server on SQLite."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from leases import conf
from leases.conf.env import SettingError

LEASEHOLD = conf.current()
BASE_DIR = conf.BASE_DIR
VAR_DIR = LEASEHOLD.var_dir


def _secret_key() -> str:
    """From LEASEHOLD_SECRET_KEY, else generated once and kept in var/
    (SQLite), else the database's (PostgreSQL: leases/operations/shared_secret.py)."""
    if LEASEHOLD.secret_key:
        return LEASEHOLD.secret_key
    if LEASEHOLD.on_postgres:
        # The server (serving/server.py) settles the key every instance of the
        # database shares and hands it to its workers as LEASEHOLD_SECRET_KEY;
        # anything else (a command) signs nothing that must outlive it.
        return secrets.token_urlsafe(50)
    path = VAR_DIR / "secret_key"
    try:
        key = path.read_text().strip()
    except FileNotFoundError:
        return _new_secret_key(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"cannot read the secret key file {path}: {exc}; fix it, or delete it to have a new "
                         "one made (admin sessions end), or set LEASEHOLD_SECRET_KEY") from None
    if not key:
        raise SystemExit(f"the secret key file {path} is empty; delete it to have a new one made (admin "
                         "sessions end), or set LEASEHOLD_SECRET_KEY")
    return key


def _new_secret_key(path: Path) -> str:
    """Written whole and durably before anyone uses it: a temporary file,
    fsync, linked into place (the first process to link wins; the others
    read its key), and the directory fsynced, so a power cut leaves either
    no key file or a whole one."""
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    tmp = path.with_name(f".secret_key.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, key.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:  # another process of this start made it first
        return path.read_text().strip()
    finally:
        os.unlink(tmp)
    directory = os.open(VAR_DIR, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return key


SECRET_KEY = _secret_key()
DEBUG = LEASEHOLD.debug
ALLOWED_HOSTS = list(LEASEHOLD.answered_hosts)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc assets served locally: the docs work without internet
    "leases",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "leases.admin.hosts.AdminHostsMiddleware",  # LEASEHOLD_ADMIN_HOSTS: the admin's side on its hosts alone
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "leases.admin.zone.OperatorTimezoneMiddleware",  # the admin in the operator's browser's time zone
    "leases.admin.writer_busy.WriterBusyMiddleware",  # the writer busy past the wait: a page saying so, not a 500
]
# Azure paths never carry a trailing slash of their own; redirecting would break signed requests.
APPEND_SLASH = False

# Behind https (LEASEHOLD_TLS_CERT, or a proxy that ends TLS: docs/guide/tls.md) the admin's cookies never cross
# plain http; browsers are told to use https only (HSTS). No script reads them (forms and /api/v1/docs/ carry
# the CSRF token in the page); Lax: no other site's or opaque origin's POST carries them (decision 0038).
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = LEASEHOLD.tls or bool(LEASEHOLD.trusted_proxies)
SECURE_HSTS_SECONDS = LEASEHOLD.hsts_seconds
CSRF_COOKIE_HTTPONLY, CSRF_COOKIE_SAMESITE, SESSION_COOKIE_SAMESITE = True, "Lax", "Lax"

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [Path(__file__).resolve().parent / "templates"],  # the top-level templates/, linked (pyproject.toml)
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]


def _postgres(spec: str) -> dict:
    """A libpq URL, handed to the driver whole: several hosts, their ports,
    target_session_attrs, sslmode, connect_timeout, ... (engines/postgres/
    adds the timeouts the URL does not set). One that libpq cannot read
    stops the start with the reason, the URL itself (its password) not shown."""
    try:
        from psycopg import Error
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        raise SettingError("LEASEHOLD_DATABASE is a PostgreSQL URL, but its driver is not installed: "
                           "pip install -e '.[postgres]'") from None
    try:
        params = conninfo_to_dict(spec)
    except Error as exc:
        reason = " ".join(str(exc).split())
        raise SettingError(f"LEASEHOLD_DATABASE is not a PostgreSQL URL libpq can use: {reason}") from None
    if not params.get("dbname"):
        raise SettingError("LEASEHOLD_DATABASE must name the database: postgresql://user@host:5432/DATABASE")
    return {
        "ENGINE": "engines.postgres",
        "NAME": params["dbname"],
        "CONN_MAX_AGE": 60,
        # Seconds a lease request may wait for the database before 503 ServerBusy:
        # the lock and statement timeouts and the connect timeout derive from it.
        "OPTIONS": {"conninfo": spec, "write_wait": LEASEHOLD.write_wait,
                    # Parameters bound by the server, and each statement prepared at its
                    # second use on a connection: PostgreSQL plans it once, not per request.
                    **({"server_side_binding": True, "prepare_threshold": 1} if LEASEHOLD.pg_prepare else {})},
    }


def _database(spec: str) -> dict:
    """LEASEHOLD_DATABASE is a SQLite file path or a postgres:// URL."""
    if spec.startswith(("postgres://", "postgresql://")):
        return _postgres(spec)
    path = Path(spec.removeprefix("sqlite:///"))
    synchronous = LEASEHOLD.sqlite_synchronous
    # When another process has written, SQLite drops this connection's whole page cache at the next
    # transaction; memory-mapped reads make refilling it cheap (worker processes take turns writing).
    mmap_bytes = LEASEHOLD.sqlite_mmap_mb * 2**20
    checkpoint_interval = LEASEHOLD.sqlite_checkpoint_interval
    return {
        "ENGINE": "engines.sqlite",
        "NAME": path,
        # Keep each worker's (thread's) connection open. With the default 0 every request reconnects and
        # re-runs the PRAGMAs, and closing the last connection checkpoints and deletes the WAL
        # (the cost per request: bench/README.md, "What do the figures in the code's comments rest on?").
        "CONN_MAX_AGE": None,
        "OPTIONS": {
            # Every atomic() takes the write lock up front: a transaction
            # that reads then writes can never fail with "database is locked".
            "transaction_mode": "IMMEDIATE",
            "timeout": LEASEHOLD.sqlite_busy_timeout,
            # synchronous=FULL: a committed lease (a 201 on the wire) survives
            # power loss, not only a crash of the process.
            "init_command": (
                "PRAGMA journal_mode=WAL;"
                f"PRAGMA synchronous={synchronous};"
                "PRAGMA cache_size=-20000;"
                f"PRAGMA mmap_size={mmap_bytes};"
                "PRAGMA journal_size_limit=67108864;"
                # Statement journals in memory, not in files under the writer lock (decision 0037).
                "PRAGMA temp_store=MEMORY;"
                # Checkpoints run in a thread of their own (engines.sqlite),
                # not inside a request's commit; this only bounds the WAL if
                # that thread falls behind.
                f"PRAGMA wal_autocheckpoint={10000 if checkpoint_interval else 1000}"
            ),
            # Seconds between background WAL checkpoints; 0: in the commits, as SQLite does.
            "checkpoint_interval": checkpoint_interval,
            # With FULL: fsync the WAL after releasing the writer lock, before
            # the commit returns, instead of inside COMMIT (engines.sqlite).
            "sync_outside_lock": LEASEHOLD.sqlite_sync_outside_lock,
            # Seconds a writer waits for the writer lock before it is refused
            # with 503 ServerBusy (engines.sqlite); bounds every busy wait.
            "write_wait": LEASEHOLD.write_wait,
        },
        # One file per test run, so parallel runs on one machine never collide.
        "TEST": {"NAME": LEASEHOLD.test_database or str(VAR_DIR / f"test-{os.getpid()}.sqlite3")},
    }


DATABASES = {"default": _database(LEASEHOLD.database)}
if not LEASEHOLD.on_postgres:  # DRF's compat imports the PostgreSQL driver through it; no field here needs it
    sys.modules.setdefault("django.contrib.postgres.fields", None)  # type: ignore[arg-type]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = LEASEHOLD.time_zone
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Served by whitenoise from STATIC_ROOT (make run collects) or, failing that,
# straight from the apps, so a checkout without collectstatic still works.
WHITENOISE_USE_FINDERS = True
STORAGES = {"default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
            "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"}}

# Blobs are stored in the database; Put Blob bodies up to this size.
DATA_UPLOAD_MAX_MEMORY_SIZE = LEASEHOLD.max_blob_bytes

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # JSON API requests per principal (user, token or account), counted
    # across worker processes in LEASEHOLD_THROTTLE_DATABASE; empty: no limit.
    "DEFAULT_THROTTLE_RATES": {"api": LEASEHOLD.api_rate},
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Leasehold JSON API",
    "DESCRIPTION": (
        "Leases with Azure Blob semantics over plain JSON: the same services, status codes and "
        "error codes as the Azure endpoint, plus the lease history for auditors."),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "PREPROCESSING_HOOKS": ["leases.api.schema.only_json_api"],
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "leases.api.schema.response_headers"],
    "ENUM_NAME_OVERRIDES": {"LeaseStateEnum": "leases.domain.machine.STATES"},
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOG_LEVEL = LEASEHOLD.log_level.upper()
LOG_FORMAT = {"text": "line", "json": "json"}[LEASEHOLD.log_format]
LOG_TRACEBACKS = LEASEHOLD.log_tracebacks
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # One line per record, a failure's cause on it (leases/operations/logformat.py).
    "formatters": {"line": {"()": "leases.operations.logformat.OneLineFormatter", "tracebacks": LOG_TRACEBACKS},
                   "json": {"()": "leases.operations.logformat.JsonFormatter", "tracebacks": LOG_TRACEBACKS}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    # A storage fault's 503 is logged once with its cause, not again by Django.
    "filters": {"skip_logged_faults": {"()": "leases.operations.logformat.SkipLoggedFaults"},
                "once_per_address": {"()": "leases.operations.logformat.OncePerAddress"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # Django logs every 4xx as a warning; refusals (409 LeaseAlreadyPresent, 412 ...) are normal outcomes,
    # recorded in the lease history, and under contention come by the thousand. 5xx are still logged.
    "loggers": {"django.request": {"level": "ERROR", "filters": ["skip_logged_faults"]},
                # A bad Host header is the client's mistake (400), not the server's:
                # a WARNING, once a minute per client address.
                "django.security.DisallowedHost": {"filters": ["once_per_address"]}},
}

# ------------------------------------------------------------------ Leasehold
# Read by the doors and the admin as Django settings (tests override them).
LEASEHOLD_ACCOUNTS = LEASEHOLD.accounts
LEASEHOLD_DEV_ACCOUNT = LEASEHOLD.dev_account
LEASEHOLD_CLOCK_SKEW_SECONDS = LEASEHOLD.clock_skew_seconds
LEASEHOLD_WATCHED_LEASES = list(LEASEHOLD.watched_leases)
LEASEHOLD_ADMIN_HOSTS = frozenset(LEASEHOLD.admin_hosts)  # leases/admin/hosts.py
LEASEHOLD_OIDC = LEASEHOLD.oidc  # bearer tokens on both doors (leases/auth/bearer.py)
LEASEHOLD_THROTTLE_DATABASE = LEASEHOLD.throttle_database
