"""One secret key for every instance of a PostgreSQL database, so that an admin login (a session
signed with the key) made on one instance works on all of them: the server settles the key at start
(serving/server.py), before its workers start, either made by the first instance and kept in the
database (leases_sharedsecret, one row written once) when ``LEASEHOLD_SECRET_KEY`` is unset, or that
variable's key, of which the database keeps only the fingerprint so that an instance with another
key is refused at start. docs/guide/postgresql.md tells how to change the key; on SQLite the key
stays in ``var/secret_key`` or ``LEASEHOLD_SECRET_KEY`` (config/settings.py)."""

from __future__ import annotations

import hashlib
import secrets

from django.db import connection
from django.utils import timezone

from engines import postgres
from leases.models import SharedSecret

REFUSED = "Leasehold will not start: "
HOW_TO_CHANGE = ("to change the key on purpose, stop every instance, run DELETE FROM leases_sharedsecret, "
                 "and start them with the new key")


class DifferentKey(Exception):
    """This instance's key is not the one the database's other instances use."""


def fingerprint(key: str) -> str:
    return hashlib.sha256(b"leasehold secret key\0" + key.encode()).hexdigest()


def settle(configured: str | None) -> str:
    """The key this instance must use (``configured``: LEASEHOLD_SECRET_KEY,
    or None); DifferentKey if it may not serve with it."""
    made = configured or secrets.token_urlsafe(50)
    SharedSecret.objects.bulk_create([SharedSecret(pk=1, key="" if configured else made,
                                                   fingerprint=fingerprint(made), created_at=timezone.now())],
                                     ignore_conflicts=True)  # the first instance's row stays
    row = SharedSecret.objects.get(pk=1)
    if configured is None:
        if not row.key:
            raise DifferentKey("the other instances of this database use LEASEHOLD_SECRET_KEY (the database keeps "
                               "only its fingerprint): set the same LEASEHOLD_SECRET_KEY here")
        return row.key
    if row.fingerprint != fingerprint(configured):
        held = "a key of its own" if row.key else "another LEASEHOLD_SECRET_KEY"
        raise DifferentKey(f"LEASEHOLD_SECRET_KEY is not the key the other instances of this database use ({held},"
                           f" fingerprint {row.fingerprint[:12]}): set the same key on every instance; "
                           f"{HOW_TO_CHANGE}")
    return configured


def for_workers(configured: str | None) -> str | None:
    """At the server's start: on PostgreSQL the settled key (SystemExit with
    one line if refused); on SQLite None (the settings' own key stands)."""
    if not postgres.in_use(connection):
        return None
    try:
        return settle(configured)
    except DifferentKey as err:
        raise SystemExit(REFUSED + str(err)) from None
    finally:
        connection.close()  # the server's workers make their own
