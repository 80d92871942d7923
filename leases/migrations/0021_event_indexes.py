"""The history's indexes for the auditors' reads at 10,000,000 events (decision 0040, 2026-11-30):
``event_actor_idx`` gains the id and the action after the time, so the admin's pair of sidebar filters
(an actor and an action) is answered from the index alone, and an actor's events stay in the list's
order (time, then id) for every read that used it before; and ``event_via_idx``, the events of every
door but the Azure door's (the JSON API's, the admin's, the CLI's), so that a filter on one of those
doors finds its events by index while the Azure door's lease writes write no entry in it.

As migration 0014's, on PostgreSQL the indexes are dropped and built CONCURRENTLY (a plain CREATE
INDEX would hold every lease write for as long as it reads the whole history), so this migration is
not atomic and runs again from the top. Between the actor index's drop and its build, a read by actor
has no index (right, slower)."""

import importlib

from django.db import migrations, models

BESIDE_WRITES = importlib.import_module("leases.migrations.0014_fewer_index_writes")


class Migration(migrations.Migration):

    atomic = False

    dependencies = [
        ("leases", "0020_tenure_length_class"),
    ]

    operations = [
        BESIDE_WRITES.RemoveIndexBesideWrites(model_name="leaseevent", name="event_actor_idx"),
        BESIDE_WRITES.AddIndexBesideWrites(
            model_name="leaseevent",
            index=models.Index(fields=["actor", "occurred_at", "id", "action"], name="event_actor_idx")),
        BESIDE_WRITES.AddIndexBesideWrites(
            model_name="leaseevent",
            index=models.Index(fields=["via", "id"], condition=~models.Q(via="azure"), name="event_via_idx")),
    ]
