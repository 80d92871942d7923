"""verify's second half: each tenure held to the hashed events that made it (decision 0041, "Tenures
proved by their events"). Once the events are proved, a tenure is proved by them: its begin is the
acquire (or the renew that resumed an expired lease) at its began_at, whose holder, address, client
request id, door, generation and fingerprint it copies; an end a request made (release, break, a
delete or write) is that event at its ended_at, by its ended_by; an end at a deadline (expired, broken)
was recorded by a later write that found it so; each fingerprint a change gave is that change; its
length class bounds its length. And every event that began a lease has its tenure. An event that
retention removed cannot prove anything: a tenure whose event is older than the oldest one kept of
its kind is counted as not provable, not as changed. Raises ``Mismatch`` naming the first tenure
that does not match."""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from leases.domain import machine
from leases.models import LeaseEvent, Tenure
from leases.models.tenure import length_class

CHUNK = 20_000
LOCKED = "(" + ", ".join(f"'{s}'" for s in sorted(machine.LOCKED_STATES)) + ")"  # SQL: constants
ENDS = {"release": "released", "break": "broken", "ended-by-delete": "ended-by-delete"}
_T = Tenure._meta.db_table
_E = LeaseEvent._meta.db_table
RENEWAL = "e.action = 'renew' AND e.outcome = 'success'"
SAME = "e.account = t.account AND e.container = t.container AND e.blob = t.blob"
# The begin event's columns that the tenure copies, as (tenure column, event column, length kept).
COPIED = (("generation", "generation", None), ("lease_fingerprint", "lease_fingerprint", None),
          ("holder", "actor", 200), ("holder_address", "remote_addr", 64),
          ("client_request_id", "client_request_id", 1024), ("via", "via", None))


class Mismatch(Exception):
    """The first thing that does not match (verify's exit 1): an event, a block or a tenure."""


def check(report) -> None:
    """Every tenure against the (already proved) events; counts into ``report.tenures`` and
    ``report.tenures_unproven``."""
    kept = _oldest_kept()
    after = 0
    while True:
        rows = _begins(after)
        for t in rows:
            report.tenures += 1
            proved = _check_one(t, kept)
            report.tenures_unproven += 0 if proved else 1
        if len(rows) < CHUNK:
            break
        after = rows[-1]["id"]
    _every_begin_has_its_tenure(kept)


def _oldest_kept() -> dict[bool, datetime | None]:
    """The time of the oldest event kept of each kind (True: successful renewals): anything older
    may have been removed by retention (or before the ledger existed)."""
    found = {}
    for renewal in (True, False):
        where = RENEWAL if renewal else f"NOT ({RENEWAL})"
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT e.occurred_at FROM {_E} e WHERE {where} ORDER BY e.id LIMIT 1")
            row = cursor.fetchone()
        found[renewal] = _aware(row[0]) if row else None
    return found


def _aware(value):
    if value is not None and isinstance(value, datetime) and value.tzinfo is None:
        from datetime import UTC
        return value.replace(tzinfo=UTC)
    return value


def _pruned(kept: dict, renewal: bool, when: datetime) -> bool:
    oldest = kept[renewal]
    return oldest is None or when < oldest


def _begins(after: int) -> list[dict]:
    """A chunk of tenures in id order, each with its begin event's columns (None: no such event) and
    whether the event that ended it by a request, or the later one that found it ended, is there."""
    columns = ["id", "resource_type", "account", "container", "blob", "fingerprints", "began_by", "began_at",
               "ended_at", "end", "ended_by", "settled_by", "length_class", *(c for c, _, _ in COPIED)]
    event_columns = ["id", *(c for _, c, _ in COPIED)]
    same = SAME.replace("e.", "x.")
    by_request = (f"CASE WHEN t.ended_by <> '' THEN (SELECT 1 FROM {_E} x WHERE {same} AND x.occurred_at = t.ended_at "
                  "AND x.action = t.settled_by AND SUBSTR(x.actor, 1, 200) = t.ended_by AND x.outcome = 'success' "
                  f"AND x.state_before IN {LOCKED} LIMIT 1) END")
    found_later = (f"CASE WHEN t.ended_by = '' AND t.ended_at IS NOT NULL THEN (SELECT 1 FROM {_E} x WHERE {same} "
                   "AND x.occurred_at >= t.ended_at AND x.action = t.settled_by AND x.state_before = t.\"end\" "
                   "AND x.outcome = 'success' LIMIT 1) END")
    sql = (f"SELECT {', '.join('t.' + _q(c) for c in columns)}, {by_request}, {found_later}, "
           f"{', '.join('e.' + c for c in event_columns)} "
           f"FROM {_T} t LEFT JOIN {_E} e ON {SAME} AND e.occurred_at = t.began_at AND e.action = t.began_by "
           f"AND e.outcome = 'success' AND e.state_after IN {LOCKED} WHERE t.id > %s ORDER BY t.id, e.id LIMIT %s")
    with connection.cursor() as cursor:
        cursor.execute(sql, [after, CHUNK])
        rows = cursor.fetchall()
    found: dict[int, dict] = {}
    for row in rows:
        t = dict(zip(columns, row[:len(columns)]))
        t["ended_by_its_event"], t["found_later"] = row[len(columns)], row[len(columns) + 1]
        event = dict(zip(event_columns, row[len(columns) + 2:]))
        found.setdefault(t["id"], {**t, "events": []})
        if event["id"] is not None:
            found[t["id"]]["events"].append(event)
    return list(found.values())


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _name(t: dict) -> str:
    path = "/".join(p for p in (t["account"], t["container"], t["blob"]) if p)
    return f"tenure {t['id']} ({path}, began {_aware(t['began_at']).isoformat()})"


def _check_one(t: dict, kept: dict) -> bool:
    """True if every part of it was held to an event; False if retention left nothing to hold its
    begin to. Raises Mismatch."""
    proved = _check_begin(t, kept)
    if t["ended_at"] is not None:
        _check_end(t, kept)
        least = length_class(_aware(t["ended_at"]) - _aware(t["began_at"]))
        if t["length_class"] is not None and (least is None or t["length_class"] < least):
            raise Mismatch(f"{_name(t)}: its length class {t['length_class']} is less than its length needs "
                           f"({least}): held_at would not find it (the tenure was changed)")
    for entry in t["fingerprints"].split()[1:]:
        fp, _, since = entry.partition("@")
        try:
            when = _aware(datetime.fromisoformat(since))
        except ValueError:
            raise Mismatch(f"{_name(t)}: its fingerprints hold {entry!r}, not fp@time (the tenure was changed)") from None
        at = connection.ops.adapt_datetimefield_value(when)
        if not _exists("e.action = 'change' AND e.outcome = 'success' AND e.proposed_lease_fingerprint = %s "
                       "AND e.occurred_at = %s", t, [fp, at]) and not _pruned(kept, False, when):
            raise Mismatch(f"{_name(t)}: no change event gave it the fingerprint {fp} at {since} "
                           "(the tenure was changed)")
    return proved


def _check_begin(t: dict, kept: dict) -> bool:
    if not t["events"]:
        if _pruned(kept, t["began_by"] == "renew", _aware(t["began_at"])):
            return False
        raise Mismatch(f"{_name(t)}: no successful {t['began_by']} on its resource at that time began it "
                       "(the tenure was inserted, or its begin changed)")
    for event in t["events"]:
        wrong = [c for c, e, n in COPIED if t[c] != _copied(event[e], n, t[c])]
        if not wrong:
            return True
    raise Mismatch(f"{_name(t)}: its {', '.join(wrong)} differ from the {t['began_by']} event {event['id']} "
                   "that began it (the tenure was changed)")


def _copied(value, length: int | None, like):
    """The event's value as the tenure keeps it: cut to its column, None as "" in a text column."""
    if value is None:
        return "" if isinstance(like, str) else None
    return value[:length] if length and isinstance(value, str) else value


def _check_end(t: dict, kept: dict) -> None:
    ended_at = _aware(t["ended_at"])
    if t["ended_by"]:  # a request ended it: that event, at that moment, by that actor
        if t["end"] != ENDS.get(t["settled_by"], "released") or not t["ended_by_its_event"]:
            if _pruned(kept, t["settled_by"] == "renew", ended_at):
                return
            raise Mismatch(f"{_name(t)}: it says {t['end']} at {ended_at.isoformat()} by {t['ended_by']} "
                           f"({t['settled_by']}), and no such event ended it (the tenure was changed)")
        return
    # It ended at its deadline; a later write found it so and recorded it.
    if t["end"] not in (machine.EXPIRED, machine.BROKEN) or not t["found_later"]:
        if _pruned(kept, t["settled_by"] == "renew", ended_at):
            return
        raise Mismatch(f"{_name(t)}: it says {t['end']} at {ended_at.isoformat()}, and no later "
                       f"{t['settled_by']} found it {t['end']} (the tenure was changed)")


def _exists(where: str, t: dict, params: list) -> bool:
    """An event of the tenure's resource for which ``where`` holds (``t``: the tenure's row)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {_T} t JOIN {_E} e ON {SAME} WHERE t.id = %s AND {where} LIMIT 1",
                       [t["id"], *params])
        return cursor.fetchone() is not None


def _every_begin_has_its_tenure(kept: dict) -> None:
    """Each successful event that began a lease's hold (not holding before, holding after) has the
    tenure it began: a tenure deleted in SQL is named by the event that began it."""
    after = 0
    while True:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT e.id, e.occurred_at, e.action, e.account, e.container, e.blob, "
                f"(SELECT 1 FROM {_T} t WHERE {SAME} AND t.began_at = e.occurred_at LIMIT 1) "
                f"FROM {_E} e WHERE e.id > %s AND e.id <= %s AND e.outcome = 'success' "
                f"AND e.state_before NOT IN {LOCKED} AND e.state_after IN {LOCKED} ORDER BY e.id",
                [after, after + CHUNK * 5])
            rows = cursor.fetchall()
            cursor.execute(f"SELECT MAX(id) FROM {_E}")
            newest = cursor.fetchone()[0] or 0
        for id_, at, action, account, container, blob, has in rows:
            if not has:
                path = "/".join(p for p in (account, container, blob) if p)
                raise Mismatch(f"event {id_} ({action} of {path} at {_aware(at).isoformat()}) began a lease, "
                               "and no tenure began with it (the tenure was deleted, or its begin changed)")
        after += CHUNK * 5
        if after >= newest:
            return
