"""Leasehold settings. Everything an operator may change comes from
LEASEHOLD_* environment variables, read through the typed helpers of
leases/env.py (a bad value stops the start, naming the variable) and listed
in one table in README.md ("Configuration"); the defaults give a local
Azure-compatible server on SQLite."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from leases.env import SettingError, env_bool, env_choice, env_float, env_int, env_log_level, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("LEASEHOLD_VAR_DIR") or BASE_DIR / "var")


def _secret_key() -> str:
    """From LEASEHOLD_SECRET_KEY, else generated once and kept in var/
    (SQLite), else the database's (PostgreSQL: leases/shared_secret.py)."""
    given = env_str("LEASEHOLD_SECRET_KEY")
    if given:
        return given
    if env_str("LEASEHOLD_DATABASE", "").startswith(("postgres://", "postgresql://")):
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
DEBUG = env_bool("LEASEHOLD_DEBUG")
ALLOWED_HOSTS = [h.strip() for h in env_str(
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
    target_session_attrs, sslmode, connect_timeout, ... (leases/pg_backend
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
        "ENGINE": "leases.pg_backend",
        "NAME": params["dbname"],
        "CONN_MAX_AGE": 60,
        # Seconds a lease request may wait for the database before 503 ServerBusy:
        # the lock and statement timeouts and the connect timeout derive from it.
        "OPTIONS": {"conninfo": spec, "write_wait": env_float("LEASEHOLD_WRITE_WAIT", 5, at_least=0)},
    }


def _database(spec: str) -> dict:
    """LEASEHOLD_DATABASE is a SQLite file path or a postgres:// URL."""
    if spec.startswith(("postgres://", "postgresql://")):
        return _postgres(spec)
    path = Path(spec.removeprefix("sqlite:///"))
    synchronous = env_choice("LEASEHOLD_SQLITE_SYNCHRONOUS", "FULL", ("FULL", "NORMAL", "EXTRA"))
    # When another process has written, SQLite drops this connection's whole
    # page cache at the next transaction; memory-mapped reads make refilling
    # it cheap (worker processes take turns writing).
    mmap_bytes = env_int("LEASEHOLD_SQLITE_MMAP_MB", 256, at_least=0) * 2**20
    checkpoint_interval = env_float("LEASEHOLD_SQLITE_CHECKPOINT_INTERVAL", 0.1, at_least=0)
    return {
        "ENGINE": "leases.sqlite_backend",
        "NAME": path,
        # Keep each worker's (thread's) connection open. With the default 0
        # every request reconnects and re-runs the PRAGMAs, and closing the
        # last connection checkpoints and deletes the WAL (the cost per
        # request: bench/README.md, "What do the figures in the code's comments rest on?").
        "CONN_MAX_AGE": None,
        "OPTIONS": {
            # Every atomic() takes the write lock up front: a transaction
            # that reads then writes can never fail with "database is locked".
            "transaction_mode": "IMMEDIATE",
            "timeout": env_float("LEASEHOLD_SQLITE_BUSY_TIMEOUT", 30, at_least=0),
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
            "sync_outside_lock": env_bool("LEASEHOLD_SQLITE_SYNC_OUTSIDE_LOCK", True),
            # Seconds a writer waits for the writer lock before it is refused
            # with 503 ServerBusy (leases.sqlite_backend); bounds every busy wait.
            "write_wait": env_float("LEASEHOLD_WRITE_WAIT", 5, at_least=0),
        },
        # One file per test run, so parallel runs on one machine never collide.
        "TEST": {"NAME": env_str("LEASEHOLD_TEST_DATABASE", str(VAR_DIR / f"test-{os.getpid()}.sqlite3"))},
    }


DATABASES = {"default": _database(env_str("LEASEHOLD_DATABASE", str(VAR_DIR / "leasehold.sqlite3")))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("LEASEHOLD_TIME_ZONE", "UTC")
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
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("LEASEHOLD_MAX_BLOB_BYTES", 64 * 1024 * 1024, at_least=0)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # JSON API requests per principal (user, token or account), counted
    # across worker processes in LEASEHOLD_THROTTLE_DATABASE; empty: no limit.
    "DEFAULT_THROTTLE_RATES": {"api": env_str("LEASEHOLD_API_RATE", "1200/minute", allow_empty=True,
                                              pattern=r"[0-9]+/(s|m|h|d)[a-z]*",
                                              expected="requests/period, e.g. 1200/minute or 20/s")},
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

LOG_LEVEL = env_log_level().upper()
LOG_FORMAT = {"text": "line", "json": "json"}[env_choice("LEASEHOLD_LOG_FORMAT", "text", ("text", "json"))]
LOG_TRACEBACKS = env_bool("LEASEHOLD_LOG_TRACEBACKS")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # One line per record, a failure's cause on it (leases/logformat.py).
    "formatters": {"line": {"()": "leases.logformat.OneLineFormatter", "tracebacks": LOG_TRACEBACKS},
                   "json": {"()": "leases.logformat.JsonFormatter", "tracebacks": LOG_TRACEBACKS}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT}},
    # A storage fault's 503 is logged once with its cause, not again by Django.
    "filters": {"skip_logged_faults": {"()": "leases.logformat.SkipLoggedFaults"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # Django logs every 4xx as a warning; refusals (409 LeaseAlreadyPresent,
    # 412 ...) are normal outcomes, recorded in the lease history, and under
    # contention come by the thousand. 5xx are still logged.
    "loggers": {"django.request": {"level": "ERROR", "filters": ["skip_logged_faults"]}},
}

# ------------------------------------------------------------------ Leasehold
# Accounts created or updated at start-up: "name:key[:key2];name2:key".
# The well-known development account is always there unless disabled.
LEASEHOLD_ACCOUNTS = env_str("LEASEHOLD_ACCOUNTS", "")
LEASEHOLD_DEV_ACCOUNT = env_bool("LEASEHOLD_DEV_ACCOUNT", True)
# Requests whose x-ms-date is further than this from the server clock: 403.
LEASEHOLD_CLOCK_SKEW_SECONDS = env_int("LEASEHOLD_CLOCK_SKEW_SECONDS", 900, at_least=0)
# Leases whose holding /metrics shows one by one (leasehold_watched_lease_held):
# "account/container" or "account/container/blob", comma-separated; at most 100.
LEASEHOLD_WATCHED_LEASES = [name.strip().strip("/") for name in env_str("LEASEHOLD_WATCHED_LEASES", "",
                                                                      allow_empty=True).split(",") if name.strip()]
if len(LEASEHOLD_WATCHED_LEASES) > 100 or any(name.count("/") < 1 for name in LEASEHOLD_WATCHED_LEASES):
    raise SettingError("LEASEHOLD_WATCHED_LEASES must be at most 100 comma-separated account/container or "
                       "account/container/blob names, e.g. devstoreaccount1/jobs/nightly")
# JSON API throttle counters: a SQLite file of their own, so counting never
# contends with lease writes for the database's write lock.
LEASEHOLD_THROTTLE_DATABASE = env_str("LEASEHOLD_THROTTLE_DATABASE", str(VAR_DIR / "throttle.sqlite3"))
