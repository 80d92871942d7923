"""Tenures (leases.models.Tenure): one row per lease lifetime, kept current by the lease writes
(leases/services/tenures.py). Built here from the history that exists, replayed per resource by the
same rule, and from the resource rows (a lease held whose acquire was pruned; the deadline of one
held whose renewals were). Guarded by triggers as the history is (0005): a settled tenure, and a
tenure's fixed columns, never change; fingerprints are only appended to; only retention deletes,
and only tenures that ended before the retention horizon. docs/decisions/0040-tenures.md."""

from django.db import migrations, models



# ------------------------------------------------------------------ the database's guard

REFUSED_CHANGE = "tenures are kept: a settled tenure and the fixed columns of an open one never change"
REFUSED_DELETE = "tenures are kept: only settled tenures that ended before the retention horizon may be deleted"
FIXED = ("id", "resource_type", "account", "container", "blob", "generation", "lease_fingerprint", "holder",
         "holder_address", "client_request_id", "via", "began_by", "began_at")
TRIGGERS = {"sqlite": ("leases_tenure_no_update", "leases_tenure_no_delete", "leases_tenure_no_replace"),
            "postgresql": ("leases_tenure_no_update", "leases_tenure_no_delete", "leases_tenure_no_truncate")}


def _changed(new: str, old: str, differ: str) -> str:
    """SQL true when a settled tenure changes, or a fixed column or the fingerprints (append only) do."""
    fixed = " OR ".join(f"{new}.{c} {differ} {old}.{c}" for c in FIXED)
    return (f"{old}.ended_at IS NOT NULL OR {fixed} "
            f"OR substr({new}.fingerprints, 1, length({old}.fingerprints)) {differ} {old}.fingerprints "
            f"OR ({old}.breaking_since IS NOT NULL AND {new}.breaking_since {differ} {old}.breaking_since)")


_DELETABLE = ("OLD.ended_at IS NOT NULL AND EXISTS (SELECT 1 FROM leases_historyhorizon "
              "WHERE id = 1 AND OLD.ended_at < delete_before)")

SQLITE_UP = [
    f"""CREATE TRIGGER leases_tenure_no_update BEFORE UPDATE ON leases_tenure
    WHEN {_changed('NEW', 'OLD', 'IS NOT')}
    BEGIN SELECT RAISE(ABORT, '{REFUSED_CHANGE}'); END""",
    f"""CREATE TRIGGER leases_tenure_no_delete BEFORE DELETE ON leases_tenure
    WHEN NOT ({_DELETABLE})
    BEGIN SELECT RAISE(ABORT, '{REFUSED_DELETE}'); END""",
    f"""CREATE TRIGGER leases_tenure_no_replace BEFORE INSERT ON leases_tenure
    WHEN EXISTS (SELECT 1 FROM leases_tenure WHERE id = NEW.id)
    BEGIN SELECT RAISE(ABORT, '{REFUSED_CHANGE}'); END""",
]
PG_UP = [
    f"""CREATE OR REPLACE FUNCTION leases_tenure_guard_update() RETURNS trigger AS $$
    BEGIN
      IF {_changed('NEW', 'OLD', 'IS DISTINCT FROM')} THEN RAISE EXCEPTION '{REFUSED_CHANGE}'; END IF;
      RETURN NEW;
    END; $$ LANGUAGE plpgsql""",
    f"""CREATE OR REPLACE FUNCTION leases_tenure_guard_delete() RETURNS trigger AS $$
    BEGIN
      IF NOT ({_DELETABLE}) THEN RAISE EXCEPTION '{REFUSED_DELETE}'; END IF;
      RETURN OLD;
    END; $$ LANGUAGE plpgsql""",
    f"""CREATE OR REPLACE FUNCTION leases_tenure_refuse() RETURNS trigger AS $$
    BEGIN RAISE EXCEPTION '{REFUSED_DELETE}'; END; $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER leases_tenure_no_update BEFORE UPDATE ON leases_tenure
    FOR EACH ROW EXECUTE FUNCTION leases_tenure_guard_update()""",
    """CREATE TRIGGER leases_tenure_no_delete BEFORE DELETE ON leases_tenure
    FOR EACH ROW EXECUTE FUNCTION leases_tenure_guard_delete()""",
    """CREATE TRIGGER leases_tenure_no_truncate BEFORE TRUNCATE ON leases_tenure
    FOR EACH STATEMENT EXECUTE FUNCTION leases_tenure_refuse()""",
]


def drop_triggers(schema_editor):
    vendor = schema_editor.connection.vendor
    for name in TRIGGERS.get(vendor, ()):
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON leases_tenure" if vendor == "postgresql" else ""))


def create_triggers(schema_editor):
    """Idempotent (leases/models/history_triggers.py re-runs it after every migrate)."""
    drop_triggers(schema_editor)
    vendor = schema_editor.connection.vendor
    for sql in SQLITE_UP if vendor == "sqlite" else PG_UP if vendor == "postgresql" else ():
        schema_editor.execute(sql)


# ------------------------------------------------------------------ tenures of the history kept so far

HOLDING_ACTIONS = ("acquire", "renew", "change", "release", "break", "ended-by-write", "ended-by-delete")
LOCKED = ("leased", "breaking")
ENDS = {"release": "released", "break": "broken", "ended-by-delete": "ended-by-delete"}


class _Replay:
    """The services' rule (leases/services/tenures.py), applied to the events of one resource in order."""

    def __init__(self, model, key):
        self.model, self.key, self.done, self.open = model, key, [], None

    def settle(self, ended_at, end, ended_by, settled_by):
        if self.open is not None:
            self.open.ended_at, self.open.end = ended_at, end
            self.open.ended_by, self.open.settled_by = ended_by, settled_by
            self.done.append(self.open)
            self.open = None

    def event(self, e):
        sb, sa, at = e["state_before"], e["state_after"], e["occurred_at"]
        if sb in LOCKED and sa in LOCKED:
            if self.open is not None:
                if e["action"] == "change" and e["proposed_lease_fingerprint"]:
                    self.open.fingerprints += f" {e['proposed_lease_fingerprint']}@{at.isoformat()}"
                if sa == "breaking" and self.open.breaking_since is None:
                    self.open.breaking_since = at
                self.open.deadline = e["expires_at"]
            return
        if sb in ("expired", "broken") and self.open is not None:
            ended = self.open.deadline or at
            self.settle(min(ended, at), sb, "", e["action"])
        if sb in LOCKED:
            self.settle(at, ENDS.get(e["action"], "released"), e["actor"], e["action"])
        elif sa in LOCKED:
            self.settle(at, "expired", "", e["action"])  # a history with gaps (pruned): it ended unseen
            fp = e["lease_fingerprint"] or ""
            account, container, blob = self.key
            self.open = self.model(
                resource_type="blob" if blob else "container", account=account, container=container, blob=blob,
                generation=e["generation"] or 0, lease_fingerprint=fp, fingerprints=fp, holder=e["actor"],
                holder_address=e["remote_addr"], client_request_id=e["client_request_id"], via=e["via"],
                began_by=e["action"], began_at=at, deadline=e["expires_at"])


def _row_deadline(row):
    return row.lease_break_at if row.lease_state == "breaking" else row.lease_expires_at


def _current(apps, key, replay):
    """The resource's row as it is: an open tenure takes its deadline (renewals may have been
    pruned); a lease it holds that the kept history does not show begins a tenure at its acquire."""
    account, container, blob = key
    if blob:
        row = apps.get_model("leases", "Blob").objects.filter(
            container__account__name=account, container__name=container, name=blob, snapshot="").first()
    else:
        row = apps.get_model("leases", "Container").objects.filter(account__name=account, name=container).first()
    if row is None or row.lease_state not in LOCKED:
        return
    if replay.open is not None and replay.open.generation == row.lease_generation:
        replay.open.deadline = _row_deadline(row)
    elif replay.open is None and row.lease_id is not None:
        from leases.domain import fingerprints
        fp = fingerprints.of(row.lease_id)
        replay.open = replay.model(
            resource_type="blob" if blob else "container", account=account, container=container, blob=blob,
            generation=row.lease_generation, lease_fingerprint=fp, fingerprints=fp, holder=row.lease_holder,
            holder_address=row.lease_holder_address, client_request_id=row.lease_holder_request_id,
            via="", began_by="acquire", began_at=row.lease_acquired_at or row.last_modified,
            deadline=_row_deadline(row))


def build(apps, schema_editor):
    Tenure = apps.get_model("leases", "Tenure")
    LeaseEvent = apps.get_model("leases", "LeaseEvent")
    events = (LeaseEvent.objects.filter(outcome="success", action__in=HOLDING_ACTIONS)
              .order_by("blob", "container", "account", "occurred_at", "id")
              .values("account", "container", "blob", "action", "state_before", "state_after", "occurred_at",
                      "expires_at", "generation", "lease_fingerprint", "proposed_lease_fingerprint", "actor",
                      "remote_addr", "client_request_id", "via"))
    replay, pending = None, []
    seen = set()

    def finish(replay):
        _current(apps, replay.key, replay)
        pending.extend(replay.done + ([replay.open] if replay.open is not None else []))
        if len(pending) >= 2000:
            Tenure.objects.bulk_create(pending)
            pending.clear()

    for e in events.iterator(chunk_size=5000):
        key = (e["account"], e["container"], e["blob"])
        if replay is None or replay.key != key:
            if replay is not None:
                finish(replay)
            replay = _Replay(Tenure, key)
            seen.add(key)
        replay.event(e)
    if replay is not None:
        finish(replay)
    for model, names in ((apps.get_model("leases", "Container"), ("account__name", "name")),
                         (apps.get_model("leases", "Blob"), ("container__account__name", "container__name", "name"))):
        held = model.objects.filter(lease_state__in=LOCKED).values_list(*names)
        for names_ in held.iterator():
            key = (*names_, "") if len(names_) == 2 else tuple(names_)
            if key not in seen:
                finish(_Replay(Tenure, key))
    Tenure.objects.bulk_create(pending)
    # Sorted by resource, a tenure's id says nothing of time; the lists order by began_at.


def forwards(apps, schema_editor):
    build(apps, schema_editor)
    create_triggers(schema_editor)


def backwards(apps, schema_editor):
    drop_triggers(schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ('leases', '0014_fewer_index_writes'),
    ]

    operations = [
        migrations.CreateModel(
            name='Tenure',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('resource_type', models.CharField(max_length=9)),
                ('account', models.CharField(max_length=24)),
                ('container', models.CharField(max_length=63)),
                ('blob', models.CharField(blank=True, max_length=1024)),
                ('generation', models.BigIntegerField()),
                ('lease_fingerprint', models.CharField(max_length=12)),
                ('fingerprints', models.TextField()),
                ('holder', models.CharField(blank=True, max_length=200)),
                ('holder_address', models.CharField(blank=True, max_length=64)),
                ('client_request_id', models.CharField(blank=True, max_length=1024)),
                ('via', models.CharField(blank=True, max_length=8)),
                ('began_by', models.CharField(max_length=16)),
                ('began_at', models.DateTimeField()),
                ('deadline', models.DateTimeField(blank=True, null=True)),
                ('breaking_since', models.DateTimeField(blank=True, null=True)),
                ('ended_at', models.DateTimeField(blank=True, null=True)),
                ('end', models.CharField(blank=True, choices=[('released', 'Released'), ('broken', 'Broken'), ('expired', 'Expired'), ('ended-by-delete', 'Ended By Delete')], max_length=16)),
                ('ended_by', models.CharField(blank=True, max_length=200)),
                ('settled_by', models.CharField(blank=True, max_length=16)),
            ],
            options={
                'ordering': ['-began_at', '-id'],
                'indexes': [models.Index(fields=['blob', 'container', 'account', 'began_at'], name='tenure_resource_idx'), models.Index(fields=['account', 'began_at'], name='tenure_account_idx'), models.Index(fields=['lease_fingerprint'], name='tenure_lease_fp_idx')],
            },
        ),
        migrations.RunPython(forwards, backwards),
    ]
