"""Leasehold settings. Everything an operator may change comes from
environment variables documented in README.md; the defaults give a local
Azure-compatible server on SQLite."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("LEASEHOLD_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in ("1", "true", "yes", "on")


def _secret_key() -> str:
    """From LEASEHOLD_SECRET_KEY, else generated once and kept in var/."""
    if os.environ.get("LEASEHOLD_SECRET_KEY"):
        return os.environ["LEASEHOLD_SECRET_KEY"]
    path = VAR_DIR / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(50)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key)
        return key


SECRET_KEY = _secret_key()
DEBUG = env_bool("LEASEHOLD_DEBUG")
ALLOWED_HOSTS = [h.strip() for h in os.environ.get(
    "LEASEHOLD_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",") if h.strip()]

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
    # Swagger UI and Redoc assets served locally: the docs work without internet.
    "drf_spectacular_sidecar",
    "leases",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "leases.admin.zone.OperatorTimezoneMiddleware",  # the admin in the operator's browser's time zone
    "leases.admin.busy.WriterBusyMiddleware",  # the writer busy past the wait: a page saying so, not a 500
]
# Azure paths never carry a trailing slash of their own; redirecting would
# break signed requests.
APPEND_SLASH = False

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [BASE_DIR / "templates"],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]


def _database(spec: str) -> dict:
    """LEASEHOLD_DATABASE is a SQLite file path or a postgres:// URL."""
    if spec.startswith(("postgres://", "postgresql://")):
        url = urlsplit(spec)
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": url.path.lstrip("/"),
            "USER": unquote(url.username or ""),
            "PASSWORD": unquote(url.password or ""),
            "HOST": url.hostname or "",
            "PORT": str(url.port or ""),
            "CONN_MAX_AGE": 60,
        }
    path = Path(spec.removeprefix("sqlite:///"))
    synchronous = os.environ.get("LEASEHOLD_SQLITE_SYNCHRONOUS", "FULL").upper()
    if synchronous not in ("FULL", "NORMAL", "EXTRA"):
        raise ValueError("LEASEHOLD_SQLITE_SYNCHRONOUS must be FULL, NORMAL or EXTRA")
    # When another process has written, SQLite drops this connection's whole
    # page cache at the next transaction; memory-mapped reads make refilling
    # it cheap (worker processes take turns writing).
    mmap_bytes = int(os.environ.get("LEASEHOLD_SQLITE_MMAP_MB", "256")) * 2**20
    checkpoint_interval = float(os.environ.get("LEASEHOLD_SQLITE_CHECKPOINT_INTERVAL", "0.1"))
    return {
        "ENGINE": "leases.sqlite_backend",
        "NAME": path,
        # Keep each worker's (thread's) connection open. With the default 0
        # every request reconnects and re-runs the PRAGMAs, and closing the
        # last connection checkpoints and deletes the WAL: ~6 ms a request.
        "CONN_MAX_AGE": None,
        "OPTIONS": {
            # Every atomic() takes the write lock up front: a transaction
            # that reads then writes can never fail with "database is locked".
            "transaction_mode": "IMMEDIATE",
            "timeout": float(os.environ.get("LEASEHOLD_SQLITE_BUSY_TIMEOUT", "30")),
            # synchronous=FULL: a committed lease (a 201 on the wire) survives
            # power loss, not only a crash of the process.
            "init_command": (
                "PRAGMA journal_mode=WAL;"
                f"PRAGMA synchronous={synchronous};"
                "PRAGMA cache_size=-20000;"
                f"PRAGMA mmap_size={mmap_bytes};"
                "PRAGMA journal_size_limit=67108864;"
                # Checkpoints run in a thread of their own (leases.sqlite_backend),
                # not inside a request's commit; this only bounds the WAL if
                # that thread falls behind.
                f"PRAGMA wal_autocheckpoint={10000 if checkpoint_interval else 1000}"
            ),
            # Seconds between background WAL checkpoints; 0: in the commits, as SQLite does.
            "checkpoint_interval": checkpoint_interval,
            # With FULL: fsync the WAL after releasing the writer lock, before
            # the commit returns, instead of inside COMMIT (leases.sqlite_backend).
            "sync_outside_lock": os.environ.get("LEASEHOLD_SQLITE_SYNC_OUTSIDE_LOCK", "1") != "0",
            # Seconds a writer waits for the writer lock before it is refused
            # with 503 ServerBusy (leases.sqlite_backend); bounds every busy wait.
            "write_wait": float(os.environ.get("LEASEHOLD_WRITE_WAIT", "5")),
        },
        # One file per test run, so parallel runs on one machine never collide.
        "TEST": {"NAME": os.environ.get("LEASEHOLD_TEST_DATABASE", str(VAR_DIR / f"test-{os.getpid()}.sqlite3"))},
    }


DATABASES = {"default": _database(os.environ.get("LEASEHOLD_DATABASE", str(VAR_DIR / "leasehold.sqlite3")))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("LEASEHOLD_TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Served by whitenoise from STATIC_ROOT (make run collects) or, failing that,
# straight from the apps, so a checkout without collectstatic still works.
WHITENOISE_USE_FINDERS = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# Blobs are stored in the database; Put Blob bodies up to this size.
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("LEASEHOLD_MAX_BLOB_BYTES", str(64 * 1024 * 1024)))

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # JSON API requests per principal (user, token or account), counted
    # across worker processes in LEASEHOLD_THROTTLE_DATABASE; empty: no limit.
    "DEFAULT_THROTTLE_RATES": {"api": os.environ.get("LEASEHOLD_API_RATE", "1200/minute")},
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
    "ENUM_NAME_OVERRIDES": {"LeaseStateEnum": "leases.machine.STATES"},
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOG_LEVEL = os.environ.get("LEASEHOLD_LOG_LEVEL", "warning").upper()
if LOG_LEVEL not in ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG"):
    raise ValueError("LEASEHOLD_LOG_LEVEL must be one of critical, error, warning, info, debug")
LOG_FORMAT = {"text": "line", "json": "json"}.get(os.environ.get("LEASEHOLD_LOG_FORMAT", "text").lower())
if LOG_FORMAT is None:
    raise ValueError("LEASEHOLD_LOG_FORMAT must be text or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # One line per record, a failure's cause on it (leases/logformat.py).
    "formatters": {"line": {"()": "leases.logformat.OneLineFormatter"},
                   "json": {"()": "leases.logformat.JsonFormatter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # Django logs every 4xx as a warning; refusals (409 LeaseAlreadyPresent,
    # 412 ...) are normal outcomes, recorded in the lease history, and under
    # contention come by the thousand. 5xx are still logged.
    "loggers": {"django.request": {"level": "ERROR"}},
}

# ------------------------------------------------------------------ Leasehold
# Accounts created or updated at start-up: "name:key[:key2];name2:key".
# The well-known development account is always there unless disabled.
LEASEHOLD_ACCOUNTS = os.environ.get("LEASEHOLD_ACCOUNTS", "")
LEASEHOLD_DEV_ACCOUNT = env_bool("LEASEHOLD_DEV_ACCOUNT", True)
# Requests whose x-ms-date is further than this from the server clock: 403.
LEASEHOLD_CLOCK_SKEW_SECONDS = int(os.environ.get("LEASEHOLD_CLOCK_SKEW_SECONDS", "900"))
# JSON API throttle counters: a SQLite file of their own, so counting never
# contends with lease writes for the database's write lock.
LEASEHOLD_THROTTLE_DATABASE = os.environ.get("LEASEHOLD_THROTTLE_DATABASE", str(VAR_DIR / "throttle.sqlite3"))
