"""Fencing generations in a table of their own, one row per resource name
(models.FencingGeneration), seeded from what exists: the highest generation
of each name in the lease history and on the containers and blobs."""

import hashlib

from django.db import migrations, models
from django.db.models import Max

BATCH = 1000


def _key(account, container, blob):
    # Same as FencingGeneration.key_for (a migration must not import the model).
    return hashlib.sha256(f"{account}\0{container}\0{blob or ''}".encode()).hexdigest()


def seed(apps, schema_editor):
    alias = schema_editor.connection.alias
    LeaseEvent = apps.get_model("leases", "LeaseEvent")
    Container = apps.get_model("leases", "Container")
    Blob = apps.get_model("leases", "Blob")
    FencingGeneration = apps.get_model("leases", "FencingGeneration")
    highest: dict[tuple, int] = {}

    def see(account, container, blob, generation):
        if generation:
            names = (account, container, blob or "")
            highest[names] = max(highest.get(names, 0), generation)

    events = (LeaseEvent.objects.using(alias).exclude(generation=None)
              .values_list("account", "container", "blob").annotate(g=Max("generation")).order_by())
    for account, container, blob, generation in events.iterator():
        see(account, container, blob, generation)
    for account, container, generation in (Container.objects.using(alias).filter(lease_generation__gt=0)
                                           .values_list("account__name", "name", "lease_generation").iterator()):
        see(account, container, "", generation)
    for account, container, blob, generation in (
            Blob.objects.using(alias).filter(lease_generation__gt=0, snapshot="")
            .values_list("container__account__name", "container__name", "name", "lease_generation").iterator()):
        see(account, container, blob, generation)
    rows = [FencingGeneration(key=_key(*names), account=names[0], container=names[1], blob=names[2], generation=g)
            for names, g in highest.items()]
    FencingGeneration.objects.using(alias).bulk_create(rows, batch_size=BATCH)


class Migration(migrations.Migration):
    # 0001_initial holds every table this reads. 0004 only keeps this branch's
    # migrations one line (Django refuses two leaves); chain as merging requires.
    dependencies = [("leases", "0006_break_lease_permissions")]

    operations = [
        migrations.CreateModel(
            name="FencingGeneration",
            fields=[
                ("key", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("account", models.CharField(max_length=24)),
                ("container", models.CharField(max_length=63)),
                ("blob", models.CharField(blank=True, max_length=1024)),
                ("generation", models.BigIntegerField()),
            ],
        ),
        migrations.RunPython(seed, migrations.RunPython.noop),
    ]
