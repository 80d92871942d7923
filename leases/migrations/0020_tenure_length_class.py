""""Held at T" as index ranges (issue 49, decision 0040 follow-up): each settled tenure's length class k
(it held its resource at most 4**k seconds; null while open or when longer than 4**14 s), set by the
UPDATE that ends it, and an index on (length_class, began_at). Tenures settled before this migration
are classed here from their times, with a millisecond's margin: a class may come out one too high
(still right, one range wider), never too low. The tenures' triggers refuse changes to settled tenures,
so they are dropped for the update and made again."""

import importlib

from django.db import migrations, models

TENURES = importlib.import_module("leases.migrations.0015_tenures")
LONG_CLASS = 15  # leases.models.tenure.LONG_CLASS when this was written


def _seconds(vendor: str) -> str:
    if vendor == "sqlite":
        return "(julianday(ended_at) - julianday(began_at)) * 86400.0"
    return "EXTRACT(EPOCH FROM (ended_at - began_at))"


def backfill(apps, schema_editor):
    seconds = _seconds(schema_editor.connection.vendor)
    ladder = " ".join(f"WHEN {seconds} <= {4 ** k - 0.001} THEN {k}" for k in range(LONG_CLASS))
    TENURES.drop_triggers(schema_editor)
    schema_editor.execute(f"UPDATE leases_tenure SET length_class = CASE {ladder} ELSE NULL END "
                          "WHERE ended_at IS NOT NULL")
    TENURES.create_triggers(schema_editor)


class Migration(migrations.Migration):

    dependencies = [
        ('leases', '0019_user_delegation_keys'),
    ]

    operations = [
        migrations.AddField(
            model_name='tenure',
            name='length_class',
            field=models.PositiveSmallIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=False),
        migrations.AddIndex(
            model_name='tenure',
            index=models.Index(fields=['length_class', 'began_at'], name='tenure_length_idx'),
        ),
    ]
