"""Helpers for the admin tests (their fixtures are in conftest.py): the
estate's names and its application actor, staff users with chosen
permissions, and a bulk loader for the scale test and the page benchmark
(bench/admin_pages.py imports it too)."""

from __future__ import annotations

import os
import random
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.db import connection, transaction

from leases.domain import machine
from leases.models import Account, Blob, Container, LeaseEvent, new_etag
from leases.services import Actor, ResourceRef

ACCOUNT = "opsstore"
CONTAINER = "orders"


def screenshot(page, name: str) -> None:
    """A full-page screenshot into $LEASEHOLD_SCREENS/name, for a person to
    look at the pages, when that variable is set. The browser tests check
    the layout by measuring it, so ``make test`` saves no pictures."""
    if screens := os.environ.get("LEASEHOLD_SCREENS"):
        path = Path(screens) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=path, full_page=True)


# Debian's chromium-headless-shell (`make debian`): Chromium's engine without the desktop browser's UI
CHROMIUM = "/usr/bin/chromium-headless-shell"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PASSWORD = "correct horse"  # the browser tests' staff users' (set with a quick hasher)


def log_in(page, base: str, username: str, password: str = PASSWORD, then: str = "/admin/") -> None:
    """Sign in to the admin in ``page`` through its login form, as a person
    does, and wait until the admin has led on to ``then``."""
    page.goto(f"{base}/admin/login/?next={then}")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}{then}")


def app() -> Actor:
    """The application holding the estate's leases, one request at a time."""
    return Actor(name="account:opsstore", via="azure", client_request_id="client-req-1", remote_addr="10.1.2.3")


# ------------------------------------------------------------------ users

def _staff(django_user_model, username: str, *perms: str, superuser: bool = False):
    if superuser:
        return django_user_model.objects.create_superuser(username=username, password=None)
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user(username=username, password=None, is_staff=True)
    for perm in perms:
        model, codename = perm.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label="leases",
                                                         content_type__model=model, codename=codename))
    return user


VIEW_ALL = ("container.view_container", "blob.view_blob", "leaseevent.view_leaseevent")


# ------------------------------------------------------------------ resources in every state

@dataclass
class Estate:
    """One account, one container, and a blob per effective lease state."""

    container: Container
    blobs: dict[str, Blob]  # state name (plus "infinite") -> blob

    def ref(self, name: str) -> ResourceRef:
        return ResourceRef(ACCOUNT, CONTAINER, self.blobs[name].name)

    def refresh(self) -> None:
        for blob in self.blobs.values():
            blob.refresh_from_db()
        self.container.refresh_from_db()


# ------------------------------------------------------------------ bulk data at scale

ACTORS = [f"account:store{i:02d}" for i in range(12)] + [f"user:operator{i}" for i in range(8)] + ["cli"]
# (action, outcome, state_before, state_after, status_code, error_code), repeated by weight.
EVENT_SHAPES = (
    [("acquire", "success", "available", "leased", 201, "")] * 28
    + [("renew", "success", "leased", "leased", 200, "")] * 38
    + [("release", "success", "leased", "available", 200, "")] * 14
    + [("break", "success", "leased", "breaking", 202, "")] * 5
    + [("change", "success", "leased", "leased", 200, "")] * 3
    + [("ended-by-write", "success", "broken", "available", 200, "")] * 2
    + [("acquire", "refused", "leased", "leased", 409, "LeaseAlreadyPresent")] * 6
    + [("put-blob", "refused", "leased", "leased", 412, "LeaseIdMissing")] * 3
    + [("break", "refused", "available", "available", 409, "LeaseNotPresentWithLeaseOperation")]
)
LEASE_COLUMNS = ("lease_state", "lease_id", "lease_duration", "lease_expires_at", "lease_break_at",
                 "lease_generation", "lease_acquired_at", "lease_holder", "lease_holder_address",
                 "lease_holder_request_id")
CONTAINER_COLUMNS = ("account_id", "name", "metadata", "public_access", "etag", "last_modified", "created_at",
                     *LEASE_COLUMNS)
BLOB_COLUMNS = ("container_id", "name", "snapshot", "content", "size", "content_type", "content_encoding",
                "content_language", "content_disposition", "cache_control", "content_md5", "metadata", "etag",
                "last_modified", "created_at", *LEASE_COLUMNS)
# A random GUID as Azure request ids look, and a random UUID as a SQLite UUIDField stores it.
# (printf over random(): about half the cost of five hex(randomblob()) calls
# joined, over a million rows; the same random 8-4-4-4-12 hex digits.)
SQL_GUID = ("printf('%%08x-%%04x-%%04x-%%04x-%%012x', random() & 4294967295, random() & 65535,"
            " random() & 65535, random() & 65535, random() & 281474976710655)")
SQL_UUID = "lower(hex(randomblob(16)))"
# Each event: a shape, an actor and a blob drawn at random, at evenly spaced times.
EVENTS_SQL = f"""
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < %s),
draw AS MATERIALIZED (
    SELECT i, abs(random()) %% %s AS shape, abs(random()) %% %s AS actor, %s + abs(random()) %% %s AS blob FROM n)
INSERT INTO leases_leaseevent (
    occurred_at, action, outcome, state_before, state_after, status_code, error_code, resource_type,
    account, container, blob, lease_fingerprint, generation, actor, via, reason, request_id, client_request_id,
    remote_addr, user_agent)
SELECT strftime('%%Y-%%m-%%d %%H:%%M:%%f', %s, '+' || (draw.i * %s) || ' seconds'),
    s.action, s.outcome, s.state_before, s.state_after, s.status_code, s.error_code, 'blob',
    a.name, c.name, b.name, lower(hex(randomblob(6))), draw.i %% 49 + 1, actor.name, 'azure', '', {SQL_GUID},
    CASE draw.i %% 2 WHEN 1 THEN {SQL_GUID} ELSE '' END,
    '10.0.' || (draw.i %% 251) || '.' || (draw.i %% 241 + 1), 'azsdk-python-storage-blob/12.19'
FROM draw
JOIN temp.scale_shape s ON s.k = draw.shape
JOIN temp.scale_actor actor ON actor.k = draw.actor
JOIN leases_blob b ON b.id = draw.blob
JOIN leases_container c ON c.id = b.container_id
JOIN leases_account a ON a.id = c.account_id
"""


def load_scale_data(*, accounts: int = 4, containers: int = 100, blobs: int = 100_000,
                    events: int = 1_000_000, now: datetime, seed: int = 7) -> None:
    """Insert a realistic estate into SQLite, in one transaction.

    Containers and blobs go in with raw ``executemany``, their lease columns
    spread over every effective state at ``now``. The events are made by
    SQLite itself (INSERT ... SELECT over a counter): a million rows built in
    Python cost more than the whole rest of the scale test. They name those
    blobs at random (SQLite's random(): not repeatable) and cover the 30 days
    before ``now`` in time order, as production appends them."""
    assert connection.vendor == "sqlite", "the scale data is made with SQLite's SQL"
    gen = _Generator(random.Random(seed), now)
    with transaction.atomic(), connection.cursor() as cur, _bulk_load_cache(cur):
        acct_names = [f"store{i:02d}" for i in range(accounts)]
        _insert(cur, "leases_account", ("name", "key1", "key2", "created_at"),
                [(name, "a2V5", "", gen.stamp) for name in acct_names])
        acct_ids = dict(Account.objects.filter(name__in=acct_names).values_list("name", "id"))
        cont_names = [(acct_names[i % accounts], f"bucket-{i:04d}") for i in range(containers)]
        _insert(cur, "leases_container", CONTAINER_COLUMNS,
                [(acct_ids[a], n, "{}", "", new_etag(), gen.stamp, gen.stamp, *gen.lease()) for a, n in cont_names])
        cont_ids = {(a, n): pk for a, n, pk in Container.objects.filter(
            account__name__in=acct_names).values_list("account__name", "name", "id")}
        cur.execute("SELECT COALESCE(MAX(id), 0) FROM leases_blob")
        before = cur.fetchone()[0]
        rows = []
        for i in range(blobs):
            account, container = cont_names[i * containers // blobs]
            name = f"{('logs', 'orders', 'images', 'backups')[i % 4]}/2025/{i % 12 + 1:02d}/obj-{i:07d}.bin"
            rows.append((cont_ids[(account, container)], name, "", b"", i * 7919 % 10 ** 7,
                         "application/octet-stream", "", "", "", "", "", "{}", new_etag(),
                         gen.when(gen.base - timedelta(seconds=i % 10 ** 6)), gen.stamp, *gen.lease()))
        _insert(cur, "leases_blob", BLOB_COLUMNS, rows)

        cur.execute("CREATE TEMP TABLE scale_shape (k INTEGER PRIMARY KEY, action, outcome, state_before,"
                    " state_after, status_code, error_code)")
        _insert(cur, "temp.scale_shape", ("k", "action", "outcome", "state_before", "state_after", "status_code",
                                          "error_code"), [(k, *shape) for k, shape in enumerate(EVENT_SHAPES)])
        cur.execute("CREATE TEMP TABLE scale_actor (k INTEGER PRIMARY KEY, name)")
        _insert(cur, "temp.scale_actor", ("k", "name"), list(enumerate(ACTORS)))
        cur.execute("SELECT MIN(id), MAX(id) FROM leases_blob WHERE id > %s", [before])
        first_blob, last_blob = cur.fetchone()  # one executemany: consecutive ids
        with _indexes_built_afterwards(cur, "leases_leaseevent"):
            cur.execute(EVENTS_SQL, [events, len(EVENT_SHAPES), len(ACTORS), first_blob, last_blob - first_blob + 1,
                                     gen.when(gen.base - timedelta(days=30)), 30 * 86400 / max(events, 1)])
        cur.execute("DROP TABLE temp.scale_shape")
        cur.execute("DROP TABLE temp.scale_actor")


def _insert(cur, table: str, columns: tuple[str, ...], rows) -> None:
    sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
    cur.executemany(sql, rows)


class _Generator:
    """Container and blob column values as SQLite stores them: naive UTC
    text for datetimes, 32 hex digits for UUIDs (what Django's adapters
    produce, without their per-call cost)."""

    def __init__(self, rnd: random.Random, now: datetime):
        self.rnd = rnd
        self.base = now.astimezone(UTC).replace(tzinfo=None)
        self.stamp = self.when(self.base.replace(microsecond=0))

    @staticmethod
    def when(naive_utc: datetime | None) -> str | None:
        return naive_utc.isoformat(" ") if naive_utc is not None else None

    def lease(self) -> tuple:
        """LEASE_COLUMNS for one resource: 70 % never leased, the rest spread
        over leased (fixed and infinite), expired, breaking and broken."""
        rnd, base = self.rnd, self.base
        roll = rnd.random()
        if roll < 0.70:
            return (machine.AVAILABLE, None, None, None, None, 0, None, "", "", "")
        duration: int | None
        state, duration, expires, break_at = machine.LEASED, 60, None, None
        if roll < 0.80:
            expires = base + timedelta(seconds=rnd.uniform(0.5, 60))
        elif roll < 0.83:
            duration = machine.INFINITE
        elif roll < 0.90:
            duration, expires = 30, base - timedelta(seconds=rnd.uniform(1, 86400))
        elif roll < 0.93:
            state, duration, break_at = machine.BREAKING, None, base + timedelta(seconds=rnd.uniform(0.5, 60))
        else:
            state, duration = machine.BROKEN, None
        return (state, rnd.randbytes(16).hex(), duration, self.when(expires), self.when(break_at),
                rnd.randrange(1, 50), self.when(base - timedelta(seconds=rnd.randrange(60, 3600))), rnd.choice(ACTORS),
                f"10.0.{rnd.randrange(256)}.{rnd.randrange(1, 255)}", str(uuid.UUID(bytes=rnd.randbytes(16))))


@contextmanager
def _bulk_load_cache(cur):
    """Let SQLite keep the load's dirty pages and index sorts in memory until
    commit (or the test's rollback) instead of spilling them to disk."""
    cur.execute("PRAGMA cache_size")
    cache_size = cur.fetchone()[0]
    cur.execute("PRAGMA cache_size=-2000000")
    try:
        yield
    finally:
        cur.execute(f"PRAGMA cache_size={cache_size}")


@contextmanager
def _indexes_built_afterwards(cur, table: str):
    """Drop ``table``'s indexes for the load and re-create them from their
    own DDL: one sort per index instead of a million random B-tree inserts
    each. Inside the caller's transaction, so a rollback restores them too."""
    cur.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = %s AND sql IS NOT NULL",
                [table])
    indexes = cur.fetchall()
    for name, _ in indexes:
        cur.execute(f'DROP INDEX "{name}"')
    yield
    for _, ddl in indexes:
        cur.execute(ddl)


# Words found in every loaded blob's name, and in every event's container (bucket-NNNN).
BLOB_WORDS = "2025 /2025/ obj- .bin /obj- bin obj 2025/ /20 25/ b o j n . - / 0 2 5".split()
EVENT_WORDS = "bucket ucket cket ket et t buck uck ck k b u c e bu uc ke et- t- -".split()


def scale_pages() -> list[tuple[str, str]]:
    """The admin pages the scale test and the benchmark time, with sample
    ids read from the loaded data."""
    from leases.admin.resources import BlobAdmin

    blob = Blob.objects.filter(lease_state=machine.LEASED).order_by("pk").only("pk", "lease_id").first()
    container = Container.objects.order_by("pk").first()
    event = LeaseEvent.objects.order_by("pk").only("request_id", "blob", "lease_fingerprint", "occurred_at").first()
    by_expiry = BlobAdmin.list_display.index("time_left") + 1  # after the action checkbox column
    day = event.occurred_at
    return [
        ("blobs", "/admin/leases/blob/"),
        ("blobs, page 100", "/admin/leases/blob/?p=100"),
        *[(f"blobs, {state}", f"/admin/leases/blob/?state={state}") for state in machine.STATES],
        ("blobs, infinite", "/admin/leases/blob/?duration=infinite"),
        ("blobs, account", f"/admin/leases/blob/?account={container.account_id}"),
        ("blobs, container", f"/admin/leases/blob/?container={container.pk}"),
        ("blobs, by expiry", f"/admin/leases/blob/?o={by_expiry}"),
        ("blobs, leased by expiry", f"/admin/leases/blob/?state=leased&o={by_expiry}"),
        ("blobs, search name", "/admin/leases/blob/?q=orders/2025/02/"),
        ("blobs, substring", "/admin/leases/blob/?q=02/OBJ-0001"),  # any case, mid-name
        ("blobs, substring, no match", "/admin/leases/blob/?q=zz-no-such-name"),
        ("blobs, holder", f"/admin/leases/blob/?holder={ACTORS[3]}"),
        ("blobs, leased + holder", f"/admin/leases/blob/?state=leased&holder={ACTORS[3]}"),
        ("blobs, unknown state", "/admin/leases/blob/?state=bogus"),
        ("holders", "/admin/leases/blob/holders/"),
        ("holder break confirmation", f"/admin/leases/blob/holders/break/?holder={ACTORS[3]}"),
        ("blobs, search lease id", f"/admin/leases/blob/?q={blob.lease_id}"),
        ("blob page", f"/admin/leases/blob/{blob.pk}/change/"),
        ("blob break confirmation", f"/admin/leases/blob/{blob.pk}/break/"),
        ("containers", "/admin/leases/container/"),
        ("containers, leased", "/admin/leases/container/?state=leased"),
        ("history", "/admin/leases/leaseevent/"),
        ("history, page 100", "/admin/leases/leaseevent/?p=100"),
        ("history, breaks", "/admin/leases/leaseevent/?action=break"),
        ("history, refused", "/admin/leases/leaseevent/?outcome=refused"),
        ("history, actor", f"/admin/leases/leaseevent/?actor={ACTORS[3]}"),
        ("history, account", f"/admin/leases/leaseevent/?account={container.account.name}"),
        ("history, container", f"/admin/leases/leaseevent/?container={container.name}"),
        ("history, one day", (f"/admin/leases/leaseevent/?occurred_at__year={day.year}"
                             f"&occurred_at__month={day.month}&occurred_at__day={day.day}")),
        ("history, search request id", f"/admin/leases/leaseevent/?q={event.request_id}"),
        ("history, search blob", f"/admin/leases/leaseevent/?q={event.blob}"),
        ("history, search fingerprint", f"/admin/leases/leaseevent/?q={event.lease_fingerprint}"),
        ("history, substring", "/admin/leases/leaseevent/?q=BUCKET-0042"),
        ("history, substring, no match", "/admin/leases/leaseevent/?q=zz-no-such-thing"),
        ("history, substring + breaks", "/admin/leases/leaseevent/?action=break&q=operator3"),
        ("history, substring, one day", (f"/admin/leases/leaseevent/?q=ucket-0042&occurred_at__year={day.year}"
                                        f"&occurred_at__month={day.month}&occurred_at__day={day.day}")),
        # The slowest searches the bound allows (leases/admin/queries.py): 20 different words, all but the
        # last matching every row, the last as long as the rest of the 1,200 characters allow.
        ("blobs, 20 words, no match", "/admin/leases/blob/?q=" + "+".join([*BLOB_WORDS[:19], "obj-" + "9" * 1100])),
        ("history, 20 words, no match",
         "/admin/leases/leaseevent/?q=" + "+".join([*EVENT_WORDS[:19], "zz" + "9" * 1100])),
        ("history, 20 words", "/admin/leases/leaseevent/?q=" + "+".join(EVENT_WORDS)),
        ("history CSV, one day's breaks", (f"/admin/leases/leaseevent/export.csv?action=break&occurred_at__year="
                                          f"{day.year}&occurred_at__month={day.month}&occurred_at__day={day.day}")),
        ("dashboard", "/admin/leases/leaseevent/dashboard/?embed=1"),
        ("index", "/admin/"),
    ]
