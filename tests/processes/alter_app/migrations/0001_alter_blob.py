from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("leases", "0009_cluster_duties")]
    operations = [migrations.RunSQL("ALTER TABLE leases_blob ADD COLUMN probe integer",
                                    "ALTER TABLE leases_blob DROP COLUMN probe")]
