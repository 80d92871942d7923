"""Services: every change to containers, blobs and leases goes through here.

Each service opens one short write transaction (BEGIN IMMEDIATE on SQLite, a
row lock on PostgreSQL), loads the row, asks the pure state machine, saves,
and appends the history event in the same transaction. A refused lease
action is recorded too: the refusal event commits, then the error is raised
to the caller. The Azure endpoint, the JSON API, the admin and management
commands all call these functions with keyword-only arguments.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import uuid
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone

from django.db import IntegrityError, transaction
from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX
from django.db.models.sql.subqueries import InsertQuery, UpdateQuery

from . import blob_content, clock, guids, machine, metrics, names
from . import metadata as metadata_rules
from .conditions import Conditions
from .errors import LeaseholdError
from .models import Account, Blob, Container, FencingGeneration, LeaseEvent, new_etag

NO_CONDITIONS = Conditions()


@dataclass(frozen=True)
class ResourceRef:
    """Names a container (``blob`` None) or a blob, by account and names."""

    account: str
    container: str
    blob: str | None = None
    snapshot: str = ""

    def __post_init__(self):
        # No such resource can exist (names are checked when created), and a
        # NUL is a 500 on PostgreSQL, whose text cannot hold one: refuse the
        # name before any query, on every door.
        if any("\x00" in part for part in (self.account, self.container, self.blob or "", self.snapshot)):
            raise LeaseholdError("InvalidResourceName", noun=self.noun)

    @property
    def noun(self) -> str:
        return machine.CONTAINER if self.blob is None else machine.BLOB


@dataclass(frozen=True)
class Actor:
    """Who asks, and from where: copied onto every history event."""

    name: str = ""  # "account:devstoreaccount1", "user:alice", "cli"
    via: str = ""  # azure | api | admin | cli
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    client_request_id: str = ""
    remote_addr: str = ""
    user_agent: str = ""


@dataclass(frozen=True)
class LeaseResult:
    """What a lease action answers: the resource as saved and the outcome."""

    resource: Container | Blob
    outcome: machine.Outcome

    @property
    def lease_id(self) -> uuid.UUID | None:
        return self.outcome.lease_id

    @property
    def lease_time(self) -> int | None:
        return self.outcome.lease_time

    @property
    def generation(self) -> int:
        return self.outcome.record.generation


# ------------------------------------------------------------------ loading

def _load(ref: ResourceRef, *, for_update: bool, content: bool = True) -> Container | Blob:
    """The row named by ``ref``, or 404 ContainerNotFound / BlobNotFound;
    ``content=False`` leaves a blob's body (up to 64 MiB) unread."""
    if ref.blob is None:
        qs = Container.objects.select_related("account")
        if for_update:
            qs = qs.select_for_update(of=("self",))
        obj = qs.filter(account__name=ref.account, name=ref.container).first()
        if obj is None:
            raise LeaseholdError("ContainerNotFound", noun=machine.CONTAINER)
        return obj
    qs = Blob.objects.select_related("container__account")
    if not content:
        qs = qs.defer("content")
    if for_update:
        qs = qs.select_for_update(of=("self",))
    obj = qs.filter(container__account__name=ref.account, container__name=ref.container,
                    name=ref.blob, snapshot=ref.snapshot).first()
    if obj is None:
        _container_must_exist(ref)
        raise LeaseholdError("BlobNotFound")
    return obj


def _container_must_exist(ref: ResourceRef) -> Container:
    container = Container.objects.select_related("account").filter(
        account__name=ref.account, name=ref.container).first()
    if container is None:
        raise LeaseholdError("ContainerNotFound", noun=machine.CONTAINER)
    return container


# ------------------------------------------------------------------ the lease hot path's statements
#
# A lease action is one read, one write and one history insert. Building those
# statements through the QuerySet API every time costs far more CPU than
# running them (about 1,800 Python calls a transaction), so the ORM compiles
# each of them once per database connection -- the very SQL it would send,
# FOR UPDATE OF included on PostgreSQL -- and each call then only binds values
# prepared by the fields themselves (get_db_prep_save), runs the statement on
# the driver's cursor of the current transaction, and converts what it reads
# with the ORM's own converters into a model instance (Model.from_db). Same
# SQL, same types, any backend. The SQL is kept in the driver's own parameter
# style because Django's SQLite cursor rewrites %s into ? with a regular
# expression on every execute, which costs more CPU than SQLite takes to run
# the history INSERT. Rows written this way send no model signals (none are
# connected) and are not in connection.queries; history rows are only ever
# INSERTed, as LeaseEvent.save allows.

_statements: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # connection -> {key: compiled}
_PLACEHOLDER_VALUES = {  # any valid value of the type: compiled statements keep only the SQL
    "CharField": "x", "UUIDField": uuid.UUID(int=1), "IntegerField": 1, "BigIntegerField": 1,
    "PositiveSmallIntegerField": 1, "DateTimeField": datetime(2000, 1, 1, tzinfo=timezone.utc),
}
# Python str/int already are what these fields send to the database.
_PASSTHROUGH_TYPES = ("CharField", "IntegerField", "BigIntegerField", "PositiveSmallIntegerField")


def _compiled(conn, key, compile_):
    cache = _statements.get(conn)
    if cache is None:
        cache = _statements[conn] = {}
    stmt = cache.get(key)
    if stmt is None:
        stmt = cache[key] = compile_(conn)
    return stmt


def _native(sql: str, conn) -> str:
    """``sql`` (Django's %s style) in the parameter style of conn's driver."""
    if conn.vendor == "sqlite":
        return FORMAT_QMARK_REGEX.sub("?", sql).replace("%%", "%")
    return sql  # psycopg takes %s


@contextmanager
def _driver_cursor(conn):
    """A DB-API cursor in conn's current transaction for compiled statements;
    driver errors still come out as django.db exceptions."""
    with conn.wrap_database_errors:
        cursor = conn.connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()


def _preparers(fields) -> list:
    """Per field: None (pass the value as it is) or its get_db_prep_save."""
    return [None if f.get_internal_type() in _PASSTHROUGH_TYPES else f.get_db_prep_save for f in fields]


def _prepared(preparers, values, conn) -> list:
    return [v if p is None or v is None else p(v, conn) for p, v in zip(preparers, values)]


_KEYS = ("\0account", "\0container", "\0blob", "\0snapshot")


def _compile_lease_load(model, conn):
    """SELECT the row (not its content or metadata) with a row lock, by names."""
    if model is Blob:
        qs = Blob.objects.filter(container__account__name=_KEYS[0], container__name=_KEYS[1],
                                 name=_KEYS[2], snapshot=_KEYS[3]).defer("content", "metadata")
    else:
        qs = Container.objects.filter(account__name=_KEYS[0], name=_KEYS[1]).defer("metadata")
    compiler = qs.select_for_update(of=("self",)).order_by()[:1].query.get_compiler(connection=conn)
    sql, params = compiler.as_sql()
    order = tuple(_KEYS.index(p) for p in params)
    columns = [col for col, _, _ in compiler.select]
    converters = [(pos, convs, expr) for pos, (convs, expr) in compiler.get_converters(columns).items()]
    return _native(sql, conn), order, [col.target.attname for col in columns], converters


def _load_for_lease(ref: ResourceRef, conn, cursor) -> Container | Blob:
    """``_load(ref, for_update=True)`` in one compiled statement."""
    model = Container if ref.blob is None else Blob
    sql, order, names, converters = _compiled(conn, ("load", model), lambda c: _compile_lease_load(model, c))
    names_given = (ref.account, ref.container, ref.blob, ref.snapshot)
    cursor.execute(sql, [names_given[i] for i in order])
    row = cursor.fetchone()
    if row is None:
        if model is Container:
            raise LeaseholdError("ContainerNotFound", noun=machine.CONTAINER)
        _container_must_exist(ref)
        raise LeaseholdError("BlobNotFound")
    if converters:
        row = list(row)
        for pos, convs, expr in converters:
            value = row[pos]
            for convert in convs:
                value = convert(value, expr, conn)
            row[pos] = value
    return model.from_db(conn.alias, names, row)


def _compile_update(model, columns, conn):
    """UPDATE <columns> WHERE pk = %s."""
    fields = [model._meta.get_field(name) for name in columns]
    query = UpdateQuery(model)
    query.add_update_values({f.name: _PLACEHOLDER_VALUES[f.get_internal_type()] for f in fields})
    query.add_filter("pk", 0)
    sql, params = query.get_compiler(connection=conn).as_sql()
    if len(params) != len(fields) + 1:
        raise AssertionError(f"unexpected UPDATE shape: {sql}")
    return _native(sql, conn), [f.attname for f in fields], _preparers(fields)


def _compile_event_insert(conn):
    """INSERT INTO lease history: every column but the auto primary key; with
    each column's position, and a row of defaults ready to send."""
    fields = [f for f in LeaseEvent._meta.local_concrete_fields if not f.primary_key]
    dummy = LeaseEvent(**{f.attname: _PLACEHOLDER_VALUES[f.get_internal_type()] for f in fields})
    query = InsertQuery(LeaseEvent)
    query.insert_values(fields, [dummy])
    [(sql, params)] = query.get_compiler(connection=conn).as_sql()
    if len(params) != len(fields):
        raise AssertionError(f"unexpected INSERT shape: {sql}")
    per_row = [f.name for f in fields if f.has_default() and callable(f.default)]
    if per_row:  # the defaults below are computed once, not per event
        raise AssertionError(f"history columns with callable defaults need _event_start to set them: {per_row}")
    preparers = _preparers(fields)
    defaults = _prepared(preparers, [f.get_default() for f in fields], conn)
    return _native(sql, conn), preparers, {f.attname: i for i, f in enumerate(fields)}, defaults


def _event_set(values: list, conn, preparers, position, **columns) -> None:
    for name, value in columns.items():
        i = position[name]
        prepare = preparers[i]
        values[i] = value if prepare is None or value is None else prepare(value, conn)


def _event_start(*, ref: ResourceRef, actor: Actor, action: str, now: datetime, reason: str = "",
                 conn) -> list:
    """A history row's values known before the resource is read -- when, what,
    on what, by whom -- prepared for the database, so that the lease hot path
    builds them before it takes the write lock, not while holding it."""
    _, preparers, position, defaults = _compiled(conn, "event", _compile_event_insert)
    values = list(defaults)  # a column added to LeaseEvent later gets its default
    _event_set(values, conn, preparers, position,
               occurred_at=now, action=(action or "")[:16], resource_type=ref.noun, account=ref.account,
               container=ref.container, blob=ref.blob or "", actor=actor.name[:200], via=actor.via,
               reason=reason[:500], request_id=actor.request_id,
               client_request_id=actor.client_request_id[:1024], remote_addr=actor.remote_addr[:64],
               user_agent=actor.user_agent[:512])
    return values


def _event_finish(values: list, *, status: int, error: LeaseholdError | None = None, lease_id=None,
                  proposed_id=None, duration=None, break_period=None, lease_time=None, state_before="",
                  state_after="", generation=None, expires_at=None, cursor=None, conn=None) -> None:
    """Complete a row from ``_event_start`` with the outcome and append it in
    the caller's transaction (on ``cursor`` of ``conn`` if given)."""
    conn = conn or transaction.get_connection()
    sql, preparers, position, _ = _compiled(conn, "event", _compile_event_insert)
    _event_set(values, conn, preparers, position,
               outcome=LeaseEvent.Outcome.REFUSED.value if error else LeaseEvent.Outcome.SUCCESS.value,
               status_code=error.status if error else status, error_code=error.code if error else "",
               lease_id=lease_id, proposed_lease_id=proposed_id, duration=duration, break_period=break_period,
               lease_time=lease_time, expires_at=expires_at, state_before=state_before, state_after=state_after,
               generation=generation)
    if cursor is not None:
        cursor.execute(sql, values)
    else:
        with _driver_cursor(conn) as own:
            own.execute(sql, values)


def _record(*, ref: ResourceRef, actor: Actor, action: str, now: datetime, reason: str = "",
            **outcome) -> None:
    """Append one history event in the caller's transaction."""
    values = _event_start(ref=ref, actor=actor, action=action, now=now, reason=reason,
                          conn=transaction.get_connection())
    _event_finish(values, **outcome)


def _compile_next_generation(conn):
    """Upsert a name's fencing generation: the proposed one (the row's + 1),
    or one more than the name already handed out if that is higher; returns
    the generation stored. Same SQL on SQLite (3.35+) and PostgreSQL."""
    q = conn.ops.quote_name
    table = q(FencingGeneration._meta.db_table)
    gen = q("generation")
    sql = (f"INSERT INTO {table} ({q('key')}, {q('account')}, {q('container')}, {q('blob')}, {gen}) "
           f"VALUES (%s, %s, %s, %s, %s) ON CONFLICT ({q('key')}) DO UPDATE SET {gen} = "
           f"CASE WHEN excluded.{gen} > {table}.{gen} THEN excluded.{gen} ELSE {table}.{gen} + 1 END "
           f"RETURNING {gen}")
    return _native(sql, conn)


def _next_generation(ref: ResourceRef, proposed: int, *, conn, cursor) -> int:
    """The fencing token of a new lease on ``ref``, recorded for its name in
    the lease transaction: one statement, run only when a lease is new (not
    on renew, change, release or break)."""
    sql = _compiled(conn, "next_generation", _compile_next_generation)
    cursor.execute(sql, [FencingGeneration.key_for(ref.account, ref.container, ref.blob), ref.account,
                         ref.container, ref.blob or "", proposed])
    return cursor.fetchone()[0]


def _with_generation(outcome: machine.Outcome, generation: int) -> machine.Outcome:
    if generation == outcome.record.generation:
        return outcome
    return dataclasses.replace(outcome, record=dataclasses.replace(outcome.record, generation=generation))


def _deadline(record: machine.LeaseRecord):
    return record.break_at if record.state == machine.BREAKING else record.expires_at


def _save_lease(obj: Container | Blob, record: machine.LeaseRecord, *extra: str, conn, cursor) -> None:
    """``obj.save(update_fields=[changed lease columns, *extra])`` as one
    compiled UPDATE (one per combination of columns, compiled once); none if
    nothing changed."""
    columns = (*obj.set_lease_record(record), *extra)
    if not columns:
        return
    model = type(obj)
    sql, names, preparers = _compiled(conn, ("update", model, columns), lambda c: _compile_update(model, columns, c))
    cursor.execute(sql, [*_prepared(preparers, [getattr(obj, n) for n in names], conn), obj.pk])


def _guid(value, field_name: str, noun: str) -> uuid.UUID | None:
    return value if isinstance(value, uuid.UUID) or value is None else guids.parse(value, field_name, noun=noun)


def _int(value, field_name: str, noun: str) -> int | None:
    return machine.parse_int(value, field_name, noun=noun)


# ------------------------------------------------------------------ lease actions

SUCCESS_STATUS = {"acquire": 201, "renew": 200, "change": 200, "release": 200, "break": 202}


def _lease_action(action: str, *, ref: ResourceRef, actor: Actor, conditions: Conditions,
                  reason: str = "", legacy: bool = False, **raw) -> LeaseResult:
    """One transaction: read the row (locked), decide, write it, append the
    event; a refusal appends its event and commits, then is raised. Checks
    that need no database run before the write lock is taken. ``legacy``:
    the semantics of x-ms-version before 2012-02-12 (machine.py)."""
    noun = ref.noun
    now = clock.now()
    facts: dict = {}  # what the event records, filled in as it becomes known
    refusal = None
    try:
        machine.check_action(action, noun=noun, legacy=legacy)  # before the parameters, as on Azure
        params = {
            "lease_id": _guid(raw.get("lease_id"), "lease_id", noun),
            "proposed_id": _guid(raw.get("proposed_id"), "proposed_lease_id", noun),
            "duration": _int(raw.get("duration"), "duration", noun),
            "break_period": _int(raw.get("break_period"), "break_period", noun),
        }
        facts.update(lease_id=params["lease_id"], proposed_id=params["proposed_id"],
                     duration=params["duration"], break_period=params["break_period"])
        machine.validate(action, noun=noun, legacy=legacy, **params)
        if ref.snapshot:
            raise LeaseholdError("InvalidOperation", noun=noun)
        new_id = uuid.uuid4()
        checked = conditions.dates_only() if noun == machine.CONTAINER else conditions
    except LeaseholdError as err:
        refusal = err
    event = _event_start(ref=ref, actor=actor, action=action, now=now, reason=reason,
                         conn=transaction.get_connection())

    def write(refusal=refusal):
        obj = outcome = None
        conn = transaction.get_connection()
        with _driver_cursor(conn) as cursor:
            if refusal is None:
                try:
                    obj = _load_for_lease(ref, conn, cursor)
                    facts["state_before"] = obj.effective_lease_state(now)
                    facts["generation"] = obj.lease_generation
                    checked.check_write(obj.etag, obj.last_modified, noun=noun)
                    outcome = machine.apply(action, obj.lease_record, now, noun=noun, new_id=new_id,
                                            legacy=legacy, **params)
                    if outcome.record.generation != obj.lease_generation:  # a new lease: a new token
                        outcome = _with_generation(outcome, _next_generation(
                            ref, outcome.record.generation, conn=conn, cursor=cursor))
                except LeaseholdError as err:
                    refusal = err
            if refusal is not None:
                with _recording_refusal(refusal):
                    _event_finish(event, status=refusal.status, error=refusal,
                                  state_after=facts.get("state_before", ""), cursor=cursor, conn=conn, **facts)
                if refusal.code in REFUSAL_DETAIL_CODES and obj is not None:
                    refusal.detail.update(_refusal_detail(obj, now))
            else:
                previous_id = obj.lease_id
                holder = ()
                if action == "acquire" and outcome.state_before != machine.LEASED:  # a new lease
                    obj.lease_acquired_at = now
                    obj.lease_holder = actor.name[:200]
                    obj.lease_holder_address = actor.remote_addr[:64]
                    obj.lease_holder_request_id = actor.client_request_id[:1024]
                    holder = obj.HOLDER_COLUMNS
                _save_lease(obj, outcome.record, *holder, conn=conn, cursor=cursor)
                facts.update(state_after=outcome.state_after, generation=outcome.record.generation,
                             lease_time=outcome.lease_time, expires_at=_deadline(outcome.record),
                             lease_id=params["lease_id"] or outcome.lease_id or previous_id,
                             duration=outcome.record.duration if action != "break" else None)
                _event_finish(event, status=SUCCESS_STATUS[action], cursor=cursor, conn=conn, **facts)
        return obj, outcome, refusal

    obj, outcome, refusal = _write_transaction(write)
    if refusal is not None:
        raise refusal
    return LeaseResult(resource=obj, outcome=outcome)


_lease_action = metrics.timed_lease_action(_lease_action)  # requests by action, door, outcome; latency


def _write_transaction(fn):
    """``with transaction.atomic(): return fn()`` -- except that on SQLite
    the transactions of concurrent threads are committed together (group
    commit, leases.sqlite_backend), unless the caller already is in one."""
    conn = transaction.get_connection()
    group_commit = getattr(conn, "group_commit", None)
    if group_commit is None or conn.in_atomic_block:
        with transaction.atomic():
            return fn()
    return group_commit(fn)


REFUSAL_DETAIL_CODES = {"LeaseAlreadyPresent", "LeaseIsBreakingAndCannotBeAcquired"}


def _refusal_detail(obj, now) -> dict:
    """Why an acquire was refused: the state, when it can next be acquired
    (None: only after a release or break), and the generation."""
    state = obj.effective_lease_state(now)
    if state == machine.BREAKING:
        retry = machine.seconds_left(obj.lease_break_at, now)
    elif obj.lease_duration == machine.INFINITE:
        retry = None
    else:
        retry = machine.seconds_left(obj.lease_expires_at, now)
    return {"lease_state": state, "retry_after": retry, "generation": obj.lease_generation}


def lease_acquire(*, ref: ResourceRef, actor: Actor, duration, proposed_lease_id=None,
                  conditions: Conditions = NO_CONDITIONS) -> LeaseResult:
    return _lease_action("acquire", ref=ref, actor=actor, conditions=conditions,
                         duration=duration, proposed_id=proposed_lease_id)


def lease_renew(*, ref: ResourceRef, actor: Actor, lease_id, conditions: Conditions = NO_CONDITIONS) -> LeaseResult:
    return _lease_action("renew", ref=ref, actor=actor, conditions=conditions, lease_id=lease_id)


def lease_change(*, ref: ResourceRef, actor: Actor, lease_id, proposed_lease_id,
                 conditions: Conditions = NO_CONDITIONS) -> LeaseResult:
    return _lease_action("change", ref=ref, actor=actor, conditions=conditions,
                         lease_id=lease_id, proposed_id=proposed_lease_id)


def lease_release(*, ref: ResourceRef, actor: Actor, lease_id, conditions: Conditions = NO_CONDITIONS,
                  reason: str = "") -> LeaseResult:
    return _lease_action("release", ref=ref, actor=actor, conditions=conditions, lease_id=lease_id, reason=reason)


def lease_break(*, ref: ResourceRef, actor: Actor, break_period=None, conditions: Conditions = NO_CONDITIONS,
                reason: str = "") -> LeaseResult:
    return _lease_action("break", ref=ref, actor=actor, conditions=conditions, break_period=break_period,
                         reason=reason)


def lease_action(action: str | None, *, ref: ResourceRef, actor: Actor, conditions: Conditions = NO_CONDITIONS,
                 lease_id=None, proposed_lease_id=None, duration=None, break_period=None,
                 legacy: bool = False) -> LeaseResult:
    """Dispatch on an action name taken from the wire (may be unknown).
    ``legacy``: the request's x-ms-version is before 2012-02-12."""
    return _lease_action((action or "").lower() or None, ref=ref, actor=actor, conditions=conditions,
                         lease_id=lease_id, proposed_id=proposed_lease_id, duration=duration,
                         break_period=break_period, legacy=legacy)


# ------------------------------------------------------------------ use under a lease

def _check_access(obj, *, ref: ResourceRef, actor: Actor, now: datetime, lease_id, write: bool,
                  operation: str) -> None:
    """Raise the 412 a lease imposes on this read or write; a refusal caused
    by a lease is an event auditors want ("who tried to write while X held
    it"), recorded in the caller's transaction."""
    try:
        machine.check_access(obj.lease_record, now, lease_id=lease_id, write=write, noun=ref.noun)
    except LeaseholdError as err:
        # Inside a write service this is a savepoint of its transaction; for a
        # read, the only write transaction the read opens.
        with _recording_refusal(err), transaction.atomic():
            _record(ref=ref, actor=actor, action=operation, now=now, status=err.status, error=err,
                    lease_id=lease_id, state_before=obj.effective_lease_state(now),
                    state_after=obj.effective_lease_state(now), generation=obj.lease_generation)
        raise _Recorded(err) from None


@contextmanager
def _recording_refusal(err: LeaseholdError):
    """A refusal whose event cannot be written (a full disk, ...) fails
    with the database's error, which the doors answer as a storage fault;
    the note puts the refusal it hid in that log line."""
    try:
        yield
    except Exception as exc:  # the driver's own error on the hot path, Django's elsewhere
        exc.add_note(f"while recording the refusal {err.status} {err.code}, which is not in the history")
        raise


class _Recorded(Exception):
    """A refusal whose event must commit before the error goes out."""

    def __init__(self, error: LeaseholdError):
        self.error = error


def _committing_refusals(fn):
    """Run ``fn`` in one transaction; if it refuses with an event already
    written, commit that event and then raise the refusal."""
    def wrapper(*args, **kwargs):
        refusal = None
        with transaction.atomic():
            try:
                result = fn(*args, **kwargs)
            except _Recorded as rec:
                refusal = rec.error
        if refusal is not None:
            raise refusal
        return result
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _reading(fn):
    """A read takes no write lock; a refusal it records has committed by the
    time the error goes out."""
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _Recorded as rec:
            raise rec.error from None
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _after_blob_write(blob: Blob, *, ref: ResourceRef, actor: Actor, now: datetime) -> list[str]:
    """A blob write ends an expired or broken lease; record that it did."""
    before = blob.effective_lease_state(now)
    record = machine.after_write(blob.lease_record, now, noun=machine.BLOB)
    if record == blob.lease_record:
        return []
    _record(ref=ref, actor=actor, action="ended-by-write", now=now, status=200, lease_id=blob.lease_id,
            state_before=before, state_after=machine.AVAILABLE, generation=blob.lease_generation)
    return list(blob.set_lease_record(record))


def _guid_header(value, noun: str) -> uuid.UUID | None:
    return _guid(value, "lease_id", noun)


def _now_etag(obj, now: datetime) -> list[str]:
    obj.etag = new_etag()
    obj.last_modified = now.replace(microsecond=0)
    return ["etag", "last_modified"]


# -- containers

CONTAINER_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


def validate_container_name(name: str) -> None:
    if name.startswith("$") and name in ("$root", "$logs", "$web"):
        return
    if not 3 <= len(name) <= 63:
        raise LeaseholdError("OutOfRangeInput", noun=machine.CONTAINER)
    if (set(name) - CONTAINER_NAME_CHARS or name[0] == "-" or name[-1] == "-" or "--" in name):
        raise LeaseholdError("InvalidResourceName", noun=machine.CONTAINER)


def validate_blob_name(name: str) -> None:
    names.validate_blob_name(name)


def container_create(*, account: str, name: str, metadata: dict | None = None, public_access: str = "",
                     actor: Actor | None = None) -> Container:
    validate_container_name(name)
    metadata = metadata_rules.validate(metadata)
    now = clock.now().replace(microsecond=0)
    acct = Account.objects.filter(name=account).first()
    if acct is None:
        raise LeaseholdError("ResourceNotFound")
    try:
        with transaction.atomic():
            return Container.objects.create(account=acct, name=name, metadata=metadata or {},
                                            public_access=public_access, etag=new_etag(),
                                            last_modified=now, created_at=now,
                                            lease_generation=FencingGeneration.last(account, name))
    except IntegrityError:
        raise LeaseholdError("ContainerAlreadyExists", noun=machine.CONTAINER) from None


@_committing_refusals
def container_delete(*, ref: ResourceRef, actor: Actor, lease_id=None,
                     conditions: Conditions = NO_CONDITIONS) -> None:
    now = clock.now()
    lease_id = _guid_header(lease_id, machine.CONTAINER)
    obj = _load(ref, for_update=True)
    conditions.dates_only().check_write(obj.etag, obj.last_modified, noun=machine.CONTAINER)
    _check_access(obj, ref=ref, actor=actor, now=now, lease_id=lease_id, write=True, operation="delete-container")
    # Blob leases do not protect a container: its blobs go with it.
    versions = set(Blob.objects.filter(container=obj, content_version__isnull=False)
                   .values_list("content_version", flat=True))
    obj.delete()
    blob_content.release_unreferenced(versions, now=now)


@_reading
def container_read(*, ref: ResourceRef, actor: Actor, lease_id=None) -> Container:
    """Get Container Properties/Metadata: an optional lease id must match."""
    obj = _load(ref, for_update=False)
    if lease_id is not None:
        _check_access(obj, ref=ref, actor=actor, now=clock.now(),
                      lease_id=_guid_header(lease_id, machine.CONTAINER), write=False,
                      operation="read-container")
    return obj


@_committing_refusals
def container_set_metadata(*, ref: ResourceRef, actor: Actor, metadata: dict, lease_id=None,
                           conditions: Conditions = NO_CONDITIONS) -> Container:
    metadata = metadata_rules.validate(metadata)
    now = clock.now()
    lease_id = _guid_header(lease_id, machine.CONTAINER)
    obj = _load(ref, for_update=True)
    Conditions(if_modified_since=conditions.if_modified_since).check_write(
        obj.etag, obj.last_modified, noun=machine.CONTAINER)
    # A container lease does not guard container writes; an id, if given, must match.
    _check_access(obj, ref=ref, actor=actor, now=now, lease_id=lease_id, write=False, operation="set-metadata")
    obj.metadata = metadata
    obj.save(update_fields=["metadata", *_now_etag(obj, now)])
    return obj


# -- blobs

def blob_put(*, ref: ResourceRef, actor: Actor, content: bytes, content_type: str = "",
             metadata: dict | None = None, properties: dict | None = None, lease_id=None,
             conditions: Conditions = NO_CONDITIONS) -> Blob:
    """Put Blob: create or overwrite. The lease is checked before the
    conditions, so an If-None-Match: * upload onto a leased blob is 412
    LeaseIdMissing as on Azure, not 409. Content over one chunk is first
    staged in pieces, each its own short write transaction, then made
    visible by one short transaction (leases.blob_content); an upload the
    blob's state refuses stages nothing, or has its pieces discarded."""
    validate_blob_name(ref.blob)
    metadata = metadata_rules.validate(metadata)
    lease_id = _guid_header(lease_id, machine.BLOB)
    md5 = base64.b64encode(hashlib.md5(content).digest()).decode()  # before, not under, the writer lock
    args = dict(ref=ref, actor=actor, content=content, md5=md5, content_type=content_type, metadata=metadata,
                properties=properties, lease_id=lease_id, conditions=conditions)
    staged = None
    try:
        if not blob_content.inline(len(content)) and not _put_refused_now(ref, lease_id, conditions):
            staged = blob_content.stage(content)
        try:
            blob = _blob_put_swap(**args, staged=staged)
        except _NeedsStaging:  # allowed after all: the state changed since the look
            staged = blob_content.stage(content)
            blob = _blob_put_swap(**args, staged=staged)
    except BaseException:
        if staged is not None:
            blob_content.discard(staged)
        raise
    blob_content.collect_after_request(written=len(content))
    return blob


class _NeedsStaging(Exception):
    """The swap found a large upload allowed whose content was not staged."""


def _put_refused_now(ref: ResourceRef, lease_id, conditions: Conditions) -> bool:
    """Whether Put Blob's checks refuse it now, read without any lock: then
    its content is not staged (the swap's transaction checks again, and
    records the refusal)."""
    now = clock.now()
    blob = (Blob.objects.defer("content", "metadata")
            .filter(container__account__name=ref.account, container__name=ref.container, name=ref.blob,
                    snapshot="").first())
    try:
        if blob is None:
            if conditions.if_match is not None:
                return True
            conditions.check_write(None, None)
            _container_must_exist(ref)
            return False
        machine.check_access(blob.lease_record, now, lease_id=lease_id, write=True, noun=machine.BLOB)
        if conditions.if_none_match == ["*"] and conditions.if_match is None:
            return True
        conditions.check_write(blob.etag, blob.last_modified)
    except LeaseholdError:
        return True
    return False


@_committing_refusals
def _blob_put_swap(*, ref: ResourceRef, actor: Actor, content: bytes, md5: str, content_type: str,
                   metadata: dict, properties: dict | None, lease_id, conditions: Conditions, staged) -> Blob:
    """Put Blob's one transaction: load the blob row locked, check the lease
    and conditions, write the content (inline) or point at the ``staged``
    version, append the history event."""
    now = clock.now()
    container = _container_must_exist(ref)
    blob = _blob_for_write(container, ref)
    props = {k: v for k, v in (properties or {}).items() if v is not None}
    large = not blob_content.inline(len(content))
    fields = {"content": b"" if large else content, "content_version": staged, "size": len(content),
              "content_md5": md5,
              "content_type": content_type or "application/octet-stream", "metadata": metadata or {},
              "content_encoding": props.get("content_encoding", ""),
              "content_language": props.get("content_language", ""),
              "content_disposition": props.get("content_disposition", ""),
              "cache_control": props.get("cache_control", "")}
    if blob is None:
        if conditions.if_match is not None:  # nothing to match
            raise LeaseholdError("ConditionNotMet")
        conditions.check_write(None, None)
        if large and staged is None:
            raise _NeedsStaging
        generation = _last_generation(ref)
        stamp = now.replace(microsecond=0)
        try:
            with transaction.atomic():  # a savepoint: a concurrent create of the name may get there first
                created = Blob.objects.create(container=container, name=ref.blob, etag=new_etag(),
                                              last_modified=stamp, created_at=stamp, lease_generation=generation,
                                              **fields)
            if staged is not None:
                blob_content.make_live(staged)
            return created
        except IntegrityError:
            # Another server instance created the name since the read above
            # (PostgreSQL; SQLite's write lock excludes that). Its row has
            # committed, so a new read sees it: as on Azure, the later write
            # wins, and this one goes on as an overwrite.
            blob = _blob_for_write(container, ref)
            if blob is None:  # the container went instead
                _container_must_exist(ref)
                raise
    _check_access(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, write=True, operation="put-blob")
    if conditions.if_none_match == ["*"] and conditions.if_match is None:
        raise LeaseholdError("BlobAlreadyExists")
    conditions.check_write(blob.etag, blob.last_modified)
    if large and staged is None:
        raise _NeedsStaging
    replaced = blob.content_version
    for name, value in fields.items():
        setattr(blob, name, value)
    changed = _after_blob_write(blob, ref=ref, actor=actor, now=now)
    blob.save(update_fields=[*fields, *_now_etag(blob, now), *changed])
    if staged is not None:
        blob_content.make_live(staged)
    blob_content.release_unreferenced([replaced], now=now)
    return blob


def _blob_for_write(container: Container, ref: ResourceRef) -> Blob | None:
    """The base blob, row-locked (PostgreSQL; SQLite's write transaction
    already excludes other writers) so that lease columns saved from this read
    cannot overwrite a lease granted meanwhile; its old content is not read."""
    return (Blob.objects.select_for_update().defer("content")
            .filter(container=container, name=ref.blob, snapshot="").first())


def _last_generation(ref: ResourceRef) -> int:
    """A re-created blob continues its name's fencing-token sequence, so a
    token is never handed out twice for the same name."""
    return FencingGeneration.last(ref.account, ref.container, ref.blob)


@_reading
def blob_read(*, ref: ResourceRef, actor: Actor, lease_id=None, content: bool = True) -> Blob:
    """Get Blob / Get Blob Properties: an optional lease id must match.
    ``content=False`` when only properties are answered."""
    obj = _load(ref, for_update=False, content=content)
    if lease_id is not None:
        _check_access(obj, ref=ref, actor=actor, now=clock.now(), lease_id=_guid_header(lease_id, machine.BLOB),
                      write=False, operation="read-blob")
    return obj


@_committing_refusals
def blob_set_metadata(*, ref: ResourceRef, actor: Actor, metadata: dict, lease_id=None,
                      conditions: Conditions = NO_CONDITIONS) -> Blob:
    metadata = metadata_rules.validate(metadata)
    now = clock.now()
    lease_id = _guid_header(lease_id, machine.BLOB)
    if ref.snapshot:
        raise LeaseholdError("InvalidQueryParameterValue", field="snapshot", value=ref.snapshot)
    blob = _load(ref, for_update=True)
    conditions.check_write(blob.etag, blob.last_modified)
    _check_access(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, write=True, operation="set-metadata")
    blob.metadata = metadata
    changed = _after_blob_write(blob, ref=ref, actor=actor, now=now)
    blob.save(update_fields=["metadata", *_now_etag(blob, now), *changed])
    return blob


@_committing_refusals
def blob_delete(*, ref: ResourceRef, actor: Actor, lease_id=None, delete_snapshots: str | None = None,
                conditions: Conditions = NO_CONDITIONS) -> None:
    now = clock.now()
    lease_id = _guid_header(lease_id, machine.BLOB)
    if delete_snapshots not in (None, "include", "only"):
        raise LeaseholdError("InvalidHeaderValue", field="delete_snapshots", value=delete_snapshots)
    blob = _load(ref, for_update=True, content=False)
    conditions.check_write(blob.etag, blob.last_modified)
    if ref.snapshot:  # a snapshot carries no lease of its own
        blob.delete()
        blob_content.release_unreferenced([blob.content_version], now=now)
        return
    snapshots = Blob.objects.filter(container_id=blob.container_id, name=blob.name).exclude(snapshot="")
    if delete_snapshots is None and snapshots.exists():
        raise LeaseholdError("SnapshotsPresent")
    _check_access(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, write=True, operation="delete-blob")
    versions = {blob.content_version, *snapshots.values_list("content_version", flat=True)}
    snapshots.delete()
    if delete_snapshots != "only":
        blob.delete()
    blob_content.release_unreferenced(versions, now=now)


@_committing_refusals
def blob_snapshot(*, ref: ResourceRef, actor: Actor, metadata: dict | None = None, lease_id=None,
                  conditions: Conditions = NO_CONDITIONS) -> Blob:
    metadata = None if metadata is None else metadata_rules.validate(metadata)
    now = clock.now()
    lease_id = _guid_header(lease_id, machine.BLOB)
    blob = _load(ref, for_update=True)
    conditions.check_write(blob.etag, blob.last_modified)
    if lease_id is not None:
        _check_access(blob, ref=ref, actor=actor, now=now, lease_id=lease_id, write=False, operation="snapshot")
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}0Z"
    # A large content's chunks are shared, not copied: a version never changes.
    snap = Blob(container_id=blob.container_id, name=blob.name, snapshot=stamp, content=blob.content,
                content_version=blob.content_version, size=blob.size, content_type=blob.content_type, content_encoding=blob.content_encoding,
                content_language=blob.content_language, content_disposition=blob.content_disposition,
                cache_control=blob.cache_control, content_md5=blob.content_md5,
                metadata=blob.metadata if metadata is None else metadata,
                etag=blob.etag, last_modified=blob.last_modified, created_at=blob.created_at)
    snap.save(force_insert=True)
    snap.container = blob.container
    return snap


# ------------------------------------------------------------------ accounts

def history_tamper_refused(*, actor: Actor, attempt: str, status: int, target: str = "") -> None:
    """Record a refused attempt to change or delete lease history (a DELETE
    on the events API, a POST to an event's admin page): the database would
    refuse it anyway, and auditors want to know someone tried."""
    with transaction.atomic():
        LeaseEvent.objects.create(
            occurred_at=clock.now(), action=attempt[:16], outcome=LeaseEvent.Outcome.REFUSED,
            resource_type="history", account="", container="", blob="", status_code=status,
            error_code="HistoryIsAppendOnly", actor=actor.name[:200], via=actor.via, reason=target[:500],
            request_id=actor.request_id, client_request_id=actor.client_request_id[:1024],
            remote_addr=actor.remote_addr[:64], user_agent=actor.user_agent[:512])


def account_ensure(*, name: str, key1: str, key2: str = "") -> Account:
    base64.b64decode(key1, validate=True)  # refuse a key that cannot sign
    account, _ = Account.objects.update_or_create(name=name, defaults={"key1": key1, "key2": key2})
    return account
