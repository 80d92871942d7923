"""Storage faults: what went wrong with the database, told apart from bugs. A full disk, a read-only
or failing volume, a corrupt page, a missing table or a database that stays locked is not a bug in
the request: the client should retry later, and the operator needs the cause in one log line. Each
door's exception handler asks ``classify(exc)``; a Fault says which answer to give (``error()``:
Azure's 503 ``ServerBusy``) and what to log (``cause``). Anything not recognised here stays a bug
(500 ``InternalError`` and its traceback). Recognised from SQLite's messages (its result codes are
not exposed by the sqlite3 module before Python 3.11's ``sqlite_errorname``, which Django's wrapping
keeps on the cause), PostgreSQL's SQLSTATEs and OS errnos."""

from __future__ import annotations

import errno
from dataclasses import dataclass

from leases.domain.errors import LeaseholdError

BUSY, DISK_FULL, READ_ONLY, IO_ERROR, CORRUPT, SCHEMA, UNAVAILABLE, NO_PRIMARY = (
    "busy", "disk full", "read-only storage", "storage I/O error", "corrupt database", "schema out of date",
    "database unavailable", "no primary (database failover or outage)")

# What the operator should do, after the cause in the log line.
ADVICE = {
    BUSY: "another writer held the database too long",
    DISK_FULL: "free space on the database's volume",
    READ_ONLY: "make the database file, its directory and volume writable",
    IO_ERROR: "check the database's volume",
    CORRUPT: "restore the database from a backup (sqlite3 .recover may save the rest)",
    SCHEMA: "run `python manage.py migrate`",
    UNAVAILABLE: "check that the database server is running and reachable",
    NO_PRIMARY: ("no writable PostgreSQL primary answers (a standby, a host down or hung): this server uses "
                 "whichever host of LEASEHOLD_DATABASE answers as primary as soon as one does (list every host, "
                 "with target_session_attrs=read-write); promote a standby if none will"),
}

# Messages the client sees: Azure's code, no internals.
MESSAGES = {
    BUSY: "The server is currently unable to receive requests. Please retry your request.",
}
STORAGE_MESSAGE = "The server cannot use its storage at the moment. Please retry your request later."

# (substring of SQLite's message, kind); first match wins.
SQLITE_MESSAGES = (
    ("database is locked", BUSY),
    ("database table is locked", BUSY),
    # SQLITE_PROTOCOL: a connection lost the race for WAL's shared-memory
    # locks for seconds on end (a server far past what it can take); retry.
    ("locking protocol", BUSY),
    ("database or disk is full", DISK_FULL),
    ("readonly database", READ_ONLY),
    ("read-only", READ_ONLY),
    ("database disk image is malformed", CORRUPT),
    ("file is not a database", CORRUPT),
    ("no such table", SCHEMA),
    ("no such column", SCHEMA),
    ("has no column named", SCHEMA),
    ("unable to open database file", UNAVAILABLE),
    ("disk i/o error", IO_ERROR),
)

# PostgreSQL SQLSTATE (exact, then class of two characters) -> kind.
# A standby's refusal to write (25006), a server shutting down or starting
# (57P01-57P03) and a lost or refused connection (08, or the client's own
# error: no answer) all mean no primary answers: a failover, or an outage.
PG_STATES = {
    "53100": DISK_FULL, "25006": NO_PRIMARY, "XX001": CORRUPT, "XX002": CORRUPT,
    "42P01": SCHEMA, "42703": SCHEMA, "55P03": BUSY, "40P01": BUSY, "40001": BUSY, "57014": BUSY,
    "57P01": NO_PRIMARY, "57P02": NO_PRIMARY, "57P03": NO_PRIMARY, "58030": IO_ERROR,
}
PG_CLASSES = {"08": NO_PRIMARY, "53": BUSY}

ERRNOS = {errno.ENOSPC: DISK_FULL, errno.EDQUOT: DISK_FULL, errno.EFBIG: DISK_FULL, errno.EROFS: READ_ONLY,
          errno.EACCES: READ_ONLY, errno.EIO: IO_ERROR}


@dataclass(frozen=True)
class Fault:
    kind: str
    detail: str  # the database's or OS's own words
    notes: tuple[str, ...] = ()  # what was being done (exception notes)

    @property
    def status(self) -> int:
        return 503

    @property
    def code(self) -> str:
        return "ServerBusy"

    @property
    def retry_after(self) -> int:
        """Seconds a client should wait before retrying (the Retry-After header)."""
        return 1

    @property
    def cause(self) -> str:
        """One log line: kind, the database's words, context, what to do."""
        context = "".join(f"; {n}" for n in self.notes)
        return f"{self.kind}: {self.detail}{context} -- {ADVICE[self.kind]}"

    def error(self) -> LeaseholdError:
        err = LeaseholdError(self.code, message=MESSAGES.get(self.kind, STORAGE_MESSAGE),
                             detail={"retry_after": self.retry_after})
        err.status = self.status  # LeaseholdError's table may not know ServerBusy; the status is ours
        return err


def _chain(exc: BaseException):
    seen = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _kind_of(exc: BaseException) -> str | None:
    sqlstate = getattr(exc, "sqlstate", None)  # psycopg
    if isinstance(sqlstate, str) and sqlstate:
        return PG_STATES.get(sqlstate) or PG_CLASSES.get(sqlstate[:2])
    if isinstance(exc, _psycopg_operational()):
        return NO_PRIMARY  # raised by the client: no connection, connection lost, no answer
    if isinstance(exc, OSError) and exc.errno in ERRNOS:
        return ERRNOS[exc.errno]
    if type(exc).__module__ in ("sqlite3", "django.db.utils") or type(exc).__name__ in (
            "OperationalError", "DatabaseError", "IntegrityError", "InternalError"):
        text = str(exc).lower()
        return next((kind for needle, kind in SQLITE_MESSAGES if needle in text), None)
    return None


def _psycopg_operational() -> tuple:
    import sys

    psycopg = sys.modules.get("psycopg")  # loaded if PostgreSQL is in use
    return (psycopg.OperationalError,) if psycopg is not None else ()


def classify(exc: BaseException) -> Fault | None:
    """The storage fault behind ``exc`` (itself or anything it was raised
    from), or None: then it is a bug."""
    chain = list(_chain(exc))
    notes = tuple(dict.fromkeys(note for link in chain for note in getattr(link, "__notes__", ())))
    # PostgreSQL's own error (its SQLSTATE) before Django's wrapper of it, whose words read like SQLite's.
    chain.sort(key=lambda link: not (getattr(link, "sqlstate", None) or isinstance(link, _psycopg_operational())))
    for link in chain:
        kind = _kind_of(link)
        if kind is not None:
            detail = " ".join(str(link).split()) or type(link).__name__
            return Fault(kind, detail, notes)
    return None


def is_busy(exc: BaseException) -> bool:
    """A writer that waited too long for the database (SQLite's "database is
    locked", PostgreSQL's lock timeouts): for a bounded writer wait."""
    fault = classify(exc)
    return fault is not None and fault.kind == BUSY
