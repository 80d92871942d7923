"""Leasehold's settings: every LEASEHOLD_* environment variable, read and checked once, at start,
into one typed object. ``current()`` is that object for this process: the server launcher, its
workers, the export helper and Django's settings module (config/settings.py) all read it, and
nothing else reads the environment. A bad value stops the start with one line naming the variable
(``SettingError``), before anything is served. docs/reference/configuration.md lists every variable;
a test holds the two together. No Django here beyond its exception class: the launcher reads this
before Django is set up."""

from __future__ import annotations

import functools
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from leases.conf import admin_sso as _admin_sso
from leases.conf import oidc as _oidc
from leases.conf.env import SettingError, env_bool, env_choice, env_duration, env_float, env_int, env_log_level, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
# Variables that once meant something and no longer do: set, they stop the
# start (an operator relying on one learns it is gone), unlike unknown ones.
# Successful renewals are kept a day unless LEASEHOLD_RETENTION_RENEWALS says otherwise ("forever"
# keeps them): tenures keep who held what when (docs/decisions/0040-tenures.md has the arithmetic).
RENEWALS_KEPT = "1d"
REMOVED = {"LEASEHOLD_FRONT": "uvicorn is the only HTTP front (docs/decisions/0002)"}


@dataclass(frozen=True, slots=True)
class Settings:
    # where the data is
    var_dir: Path
    database: str  # a SQLite file path or a postgresql:// URL, handed to libpq whole
    test_database: str | None
    throttle_database: str
    # the server
    bind: tuple[str, int]
    workers: int
    worker_healthcheck: int
    instance: str | None
    access_log: bool
    lease_threads: int | None  # None: one on SQLite, four on PostgreSQL
    read_threads: int
    other_threads: int | None  # None: half the lease threads
    upload_threads: int
    # TLS and the proxies in front
    tls_cert: str | None  # PEM files: both given, the server speaks https on its port
    tls_key: str | None
    hsts_seconds: int
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    forwarded_header: str  # which header the trusted proxies set: "x-forwarded-for" or "forwarded"
    # what a client may send, and how fast
    header_timeout: float
    max_header_bytes: int
    max_headers: int
    max_url_bytes: int
    body_idle_timeout: float
    body_min_rate: float
    max_small_body_bytes: int
    max_blob_bytes: int
    waiters_per_principal: int
    api_rate: str  # "" for no limit
    unauthenticated_rate: tuple[float, float]  # per second, burst; (0, 0): no bound
    unauthenticated_rate_total: tuple[float, float]  # the same, all addresses together
    clock_skew_seconds: int
    # waits and pieces of work
    write_wait: float
    stage_pause: float
    long_read_process: bool
    long_read_nice: int
    long_reads: int
    # SQLite
    sqlite_synchronous: str
    sqlite_mmap_mb: int
    sqlite_checkpoint_interval: float
    sqlite_busy_timeout: float
    sqlite_sync_outside_lock: bool
    # PostgreSQL
    pg_prepare: bool  # server-side binding and prepared statements
    # mechanisms a paired benchmark switches off (docs/decisions/)
    lease_inline: bool
    lease_batch: bool
    # history retention
    retention_renewals: timedelta | None
    retention_events: timedelta | None
    retention_batch: int | None
    retention_pause: float
    retention_idle: float
    # accounts, the admin, the site
    secret_key: str | None
    admin_password: str | None
    accounts: str
    dev_account: bool
    watched_leases: tuple[str, ...]
    allowed_hosts: tuple[str, ...]
    admin_hosts: tuple[str, ...]  # "host" or "host:port", lower case; empty: the admin on every host
    oidc: _oidc.Oidc | None  # the issuer of the bearer tokens both doors accept, and its role rules
    admin_sso: _admin_sso.AdminSso | None  # the admin's single sign-on and its group rules
    admin_passwords: str  # local passwords in the admin: on, superusers, off
    time_zone: str
    debug: bool
    # logs
    log_level: str
    log_format: str
    log_tracebacks: bool
    timing_log: str | None

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def answered_hosts(self) -> tuple[str, ...]:
        """Django's ALLOWED_HOSTS: LEASEHOLD_ALLOWED_HOSTS and the names of LEASEHOLD_ADMIN_HOSTS."""
        names = (host if host.endswith("]") else host.rpartition(":")[0] or host for host in self.admin_hosts)
        return tuple(dict.fromkeys((*self.allowed_hosts, *names)))

    @property
    def on_postgres(self) -> bool:
        return self.database.startswith(("postgres://", "postgresql://"))


def _bind(environ: Mapping[str, str]) -> tuple[str, int]:
    text = env_str("LEASEHOLD_BIND", "127.0.0.1:10000", environ=environ)
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise SettingError(f"LEASEHOLD_BIND must be HOST:PORT, e.g. 127.0.0.1:10000, not {text!r}")
    return host.strip("[]"), int(port)


def _watched(environ: Mapping[str, str]) -> tuple[str, ...]:
    names = tuple(name.strip().strip("/") for name in env_str(
        "LEASEHOLD_WATCHED_LEASES", "", allow_empty=True, environ=environ).split(",") if name.strip())
    if len(names) > 100 or any(name.count("/") < 1 for name in names):
        raise SettingError("LEASEHOLD_WATCHED_LEASES must be at most 100 comma-separated account/container or "
                           "account/container/blob names, e.g. devstoreaccount1/jobs/nightly")
    return names


_HOST = r"(?:[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?"


def _admin_hosts(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The hosts (``host`` or ``host:port``) the admin and the JSON API are served on alone."""
    text = env_str("LEASEHOLD_ADMIN_HOSTS", "", allow_empty=True, environ=environ)
    hosts = tuple(part.strip().lower() for part in text.split(",") if part.strip())
    if any(not re.fullmatch(_HOST, host) for host in hosts):
        raise SettingError("LEASEHOLD_ADMIN_HOSTS must be comma-separated host names, each with a port if "
                           f"needed, e.g. admin.example.com or 127.0.0.1:10001 (no scheme, no path), not {text!r}")
    return hosts


def _tls_file(name: str, environ: Mapping[str, str]) -> str | None:
    """A PEM file's path; LEASEHOLD_TLS_CERT and LEASEHOLD_TLS_KEY come together."""
    path = env_str(name, environ=environ)
    other = "LEASEHOLD_TLS_KEY" if name == "LEASEHOLD_TLS_CERT" else "LEASEHOLD_TLS_CERT"
    if bool(path) != bool(env_str(other, environ=environ)):
        raise SettingError(f"{name} and {other} go together: set both (PEM files) for https, or neither")
    if path and not os.access(path, os.R_OK):
        raise SettingError(f"{name}={path!r}: no readable file there")
    return path


def _trusted_proxies(environ: Mapping[str, str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    text = env_str("LEASEHOLD_TRUSTED_PROXIES", "", allow_empty=True, environ=environ)
    try:
        return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in text.split(",") if part.strip())
    except ValueError:
        raise SettingError("LEASEHOLD_TRUSTED_PROXIES must be comma-separated addresses or networks, e.g. "
                           f"127.0.0.1,10.0.0.0/8, not {text!r}") from None
PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _rate(name: str, default: str, environ: Mapping[str, str]) -> tuple[float, float]:
    """``N/period`` as (refill per second, burst N); empty: (0, 0), no bound."""
    text = env_str(name, default, allow_empty=True, pattern=r"[0-9]+/(s|m|h|d)[a-z]*",
                   expected="requests/period, e.g. 50/second", environ=environ)
    if not text:
        return 0.0, 0.0
    count, _, period = text.partition("/")
    return int(count) / PERIODS[period[0]], float(int(count))


def _optional_int(name: str, environ: Mapping[str, str]) -> int | None:
    return env_int(name, 0, at_least=1, environ=environ) or None


def _admin_sso_settings(environ: Mapping[str, str]) -> _admin_sso.AdminSso | None:
    def text(name: str, default: str = "") -> str:
        return env_str(name, default, allow_empty=True, environ=environ)

    return _admin_sso.admin_sso(
        text("LEASEHOLD_ADMIN_SSO_ISSUER"), text("LEASEHOLD_ADMIN_SSO_CLIENT_ID"),
        text("LEASEHOLD_ADMIN_SSO_CLIENT_SECRET"), text("LEASEHOLD_ADMIN_SSO_NAME", "single sign-on"),
        text("LEASEHOLD_ADMIN_SSO_GROUPS"), text("LEASEHOLD_ADMIN_SSO_SCOPES", "openid profile email"),
        env_choice("LEASEHOLD_ADMIN_PASSWORDS", "on", _admin_sso.PASSWORDS, environ=environ))


def _oidc_settings(environ: Mapping[str, str]) -> _oidc.Oidc | None:
    """The issuer and its rules; None if LEASEHOLD_OIDC_ISSUER is unset (every variable is read, and
    checked, either way)."""
    issuer = env_str("LEASEHOLD_OIDC_ISSUER", "", allow_empty=True, environ=environ)
    audiences = tuple(part.strip() for part in env_str(
        "LEASEHOLD_OIDC_AUDIENCE", _oidc.DEFAULT_AUDIENCE, environ=environ).split(",") if part.strip())
    found = _oidc.rules(env_str("LEASEHOLD_OIDC_ROLES", "", allow_empty=True, environ=environ))
    leeway = env_int("LEASEHOLD_OIDC_LEEWAY", 30, at_least=0, environ=environ)
    text = env_str("LEASEHOLD_OIDC_JWKS_REFETCH", "3/minute", pattern=r"[0-9]+/(s|m|h|d)[a-z]*",
                   expected="fetches/period, e.g. 3/minute", environ=environ)
    count, _, period = text.partition("/")
    if int(count) < 1:
        raise SettingError("LEASEHOLD_OIDC_JWKS_REFETCH must allow at least one fetch, e.g. 3/minute")
    if not issuer:
        return None
    return _oidc.Oidc(issuer=_oidc.issuer_url(issuer), audiences=audiences or tuple(_oidc.DEFAULT_AUDIENCE.split(",")), rules=found,
                leeway=leeway, refetch=(int(count) / PERIODS[period[0]], float(int(count))))


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Every variable from ``environ`` (default: the process's), checked."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    for name, why in REMOVED.items():
        if name in env and env[name] != "":
            raise SettingError(f"{name} was removed: {why}; unset it")
    var_dir = Path(env_str("LEASEHOLD_VAR_DIR", environ=env) or BASE_DIR / "var")
    return Settings(
        var_dir=var_dir,
        database=env_str("LEASEHOLD_DATABASE", str(var_dir / "leasehold.sqlite3"), environ=env),
        test_database=env_str("LEASEHOLD_TEST_DATABASE", environ=env),
        throttle_database=env_str("LEASEHOLD_THROTTLE_DATABASE", str(var_dir / "throttle.sqlite3"), environ=env),
        bind=_bind(env),
        workers=env_int("LEASEHOLD_WORKERS", 2, at_least=1, environ=env),
        worker_healthcheck=env_int("LEASEHOLD_WORKER_HEALTHCHECK", 30, at_least=1, environ=env),
        instance=env_str("LEASEHOLD_INSTANCE", environ=env),
        access_log=env_bool("LEASEHOLD_ACCESS_LOG", environ=env),
        lease_threads=_optional_int("LEASEHOLD_THREADS", env),
        read_threads=env_int("LEASEHOLD_READ_THREADS", 1, at_least=1, environ=env),
        other_threads=_optional_int("LEASEHOLD_OTHER_THREADS", env),
        upload_threads=env_int("LEASEHOLD_UPLOAD_THREADS", 1, at_least=1, environ=env),
        tls_cert=_tls_file("LEASEHOLD_TLS_CERT", env),
        tls_key=_tls_file("LEASEHOLD_TLS_KEY", env),
        hsts_seconds=env_int("LEASEHOLD_HSTS_SECONDS", 31536000, at_least=0, environ=env),
        trusted_proxies=_trusted_proxies(env),
        forwarded_header=env_choice("LEASEHOLD_FORWARDED_HEADER", "x-forwarded-for", ("x-forwarded-for", "forwarded"),
                                    environ=env),
        header_timeout=env_float("LEASEHOLD_HEADER_TIMEOUT", 10, above=0, environ=env),
        max_header_bytes=env_int("LEASEHOLD_MAX_HEADER_BYTES", 65536, at_least=1024, environ=env),
        max_headers=env_int("LEASEHOLD_MAX_HEADERS", 1000, at_least=16, environ=env),
        max_url_bytes=env_int("LEASEHOLD_MAX_URL_BYTES", 32768, at_least=256, environ=env),
        body_idle_timeout=env_float("LEASEHOLD_BODY_IDLE_TIMEOUT", 10, above=0, environ=env),
        body_min_rate=env_float("LEASEHOLD_BODY_MIN_RATE", 16384, above=0, environ=env),
        max_small_body_bytes=env_int("LEASEHOLD_MAX_SMALL_BODY_BYTES", 65536, at_least=1024, environ=env),
        max_blob_bytes=env_int("LEASEHOLD_MAX_BLOB_BYTES", 64 * 1024 * 1024, at_least=0, environ=env),
        waiters_per_principal=env_int("LEASEHOLD_WAITERS_PER_PRINCIPAL", 1000, at_least=0, environ=env),
        api_rate=env_str("LEASEHOLD_API_RATE", "30000/minute", allow_empty=True, pattern=r"[0-9]+/(s|m|h|d)[a-z]*",
                         expected="requests/period, e.g. 1200/minute or 20/s", environ=env),
        unauthenticated_rate=_rate("LEASEHOLD_UNAUTHENTICATED_RATE", "50/second", env),
        unauthenticated_rate_total=_rate("LEASEHOLD_UNAUTHENTICATED_RATE_TOTAL", "200/second", env),
        clock_skew_seconds=env_int("LEASEHOLD_CLOCK_SKEW_SECONDS", 900, at_least=0, environ=env),
        write_wait=env_float("LEASEHOLD_WRITE_WAIT", 5, at_least=0, environ=env),
        stage_pause=env_float("LEASEHOLD_STAGE_PAUSE", 0.5, at_least=0, environ=env),
        long_read_process=env_bool("LEASEHOLD_LONG_READ_PROCESS", True, environ=env),
        long_read_nice=env_int("LEASEHOLD_LONG_READ_NICE", 10, at_least=0, environ=env),
        long_reads=env_int("LEASEHOLD_LONG_READS", 2, at_least=1, environ=env),
        sqlite_synchronous=env_choice("LEASEHOLD_SQLITE_SYNCHRONOUS", "FULL", ("FULL", "NORMAL", "EXTRA"),
                                      environ=env),
        sqlite_mmap_mb=env_int("LEASEHOLD_SQLITE_MMAP_MB", 256, at_least=0, environ=env),
        sqlite_checkpoint_interval=env_float("LEASEHOLD_SQLITE_CHECKPOINT_INTERVAL", 0.1, at_least=0, environ=env),
        sqlite_busy_timeout=env_float("LEASEHOLD_SQLITE_BUSY_TIMEOUT", 30, at_least=0, environ=env),
        sqlite_sync_outside_lock=env_bool("LEASEHOLD_SQLITE_SYNC_OUTSIDE_LOCK", True, environ=env),
        pg_prepare=env_bool("LEASEHOLD_PG_PREPARE", True, environ=env),
        lease_inline=env_bool("LEASEHOLD_LEASE_INLINE", True, environ=env),
        lease_batch=env_bool("LEASEHOLD_LEASE_BATCH", True, environ=env),
        retention_renewals=env_duration("LEASEHOLD_RETENTION_RENEWALS", environ=env, default=RENEWALS_KEPT),
        retention_events=env_duration("LEASEHOLD_RETENTION_EVENTS", environ=env),
        retention_batch=_optional_int("LEASEHOLD_RETENTION_BATCH", env),
        retention_pause=env_float("LEASEHOLD_RETENTION_PAUSE", 0.01, at_least=0, environ=env),
        retention_idle=env_float("LEASEHOLD_RETENTION_IDLE", 10, above=0, environ=env),
        secret_key=env_str("LEASEHOLD_SECRET_KEY", environ=env),
        admin_password=env_str("LEASEHOLD_ADMIN_PASSWORD", environ=env),
        accounts=env_str("LEASEHOLD_ACCOUNTS", "", environ=env),
        dev_account=env_bool("LEASEHOLD_DEV_ACCOUNT", True, environ=env),
        watched_leases=_watched(env),
        allowed_hosts=tuple(h.strip() for h in env_str(
            "LEASEHOLD_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]", environ=env).split(",") if h.strip()),
        admin_hosts=_admin_hosts(env),
        oidc=_oidc_settings(env),
        admin_sso=_admin_sso_settings(env),
        admin_passwords=env_choice("LEASEHOLD_ADMIN_PASSWORDS", "on", _admin_sso.PASSWORDS, environ=env),
        time_zone=env_str("LEASEHOLD_TIME_ZONE", "UTC", environ=env),
        debug=env_bool("LEASEHOLD_DEBUG", environ=env),
        log_level=env_log_level(env),
        log_format=env_choice("LEASEHOLD_LOG_FORMAT", "text", ("text", "json"), environ=env),
        log_tracebacks=env_bool("LEASEHOLD_LOG_TRACEBACKS", environ=env),
        timing_log=env_str("LEASEHOLD_TIMING_LOG", environ=env),
    )


@functools.cache
def current() -> Settings:
    """This process's settings, read from its environment the first time."""
    return load()


def reload() -> Settings:
    """Read the environment again (tests that change it, in-process)."""
    current.cache_clear()
    return current()


def variables() -> list[str]:
    """Every variable ``load`` reads, in its order (the docs' table is checked against it)."""
    seen: list[str] = []

    class Recorder(dict):
        def get(self, name, default=None):
            if name not in seen:
                seen.append(name)
            return default

    load(Recorder())
    return seen


def or_exit() -> Settings:
    """``current()``, a bad value ending the process with its message alone
    (no traceback): for the launcher, its workers and helpers."""
    try:
        return current()
    except SettingError as err:
        raise SystemExit(str(err)) from None


__all__ = ["Settings", "SettingError", "load", "current", "reload", "variables", "or_exit"]
