"""The database's account of lease time (leases.models.LeaseClock): its
high-water mark and the clock steps seen. Its one row is written when first
needed (leases.clockwatch)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [("leases", "0009_cluster_duties")]

    operations = [
        migrations.CreateModel(
            name="LeaseClock",
            fields=[
                ("id", models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False)),
                ("high_water", models.DateTimeField(blank=True, null=True)),
                ("steps", models.BigIntegerField(default=0)),
                ("last_step_at", models.DateTimeField(blank=True, null=True)),
                ("last_step_seconds", models.FloatField(blank=True, null=True)),
            ],
        ),
    ]
