"""One "Can break lease" permission per model, with its own codename.

Both models declared ``break_lease``, so ``user.has_perm("leases.break_lease")``
(which names app and codename, not the model) granted breaking containers to
whoever was given breaking blobs. Each old grant, to a user or a group, moves
to the new permission of the same model; then the old permissions go.
"""

from django.db import migrations

RENAMES = {"container": "break_container_lease", "blob": "break_blob_lease"}
NAMES = {"break_container_lease": "Can break container lease", "break_blob_lease": "Can break blob lease",
         "break_lease": "Can break lease"}


def _move(apps, old_of, new_of):
    """For each model, give whoever holds ``old_of(model)`` the permission
    ``new_of(model)`` instead (created here: post_migrate runs too late)."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    Group = apps.get_model("auth", "Group")
    User = apps.get_model(*_user_model(apps))
    for model in RENAMES:
        content_type, _ = ContentType.objects.get_or_create(app_label="leases", model=model)
        old = Permission.objects.filter(content_type=content_type, codename=old_of(model)).first()
        new, _ = Permission.objects.get_or_create(content_type=content_type, codename=new_of(model),
                                                  defaults={"name": NAMES[new_of(model)]})
        if old is None:
            continue
        for group in Group.objects.filter(permissions=old):
            group.permissions.add(new)
        for user in User.objects.filter(user_permissions=old):
            user.user_permissions.add(new)
        old.delete()


def _user_model(apps):
    from django.conf import settings

    return settings.AUTH_USER_MODEL.split(".")


def forwards(apps, schema_editor):
    _move(apps, lambda model: "break_lease", lambda model: RENAMES[model])


def backwards(apps, schema_editor):
    _move(apps, lambda model: RENAMES[model], lambda model: "break_lease")


class Migration(migrations.Migration):
    # After this branch's latest leases migration (a single leaf); the lead
    # re-chains it when merging the branches' migrations.
    dependencies = [
        ("leases", "0005_history_append_only"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="container",
            options={"ordering": ["account__name", "name"],
                     "permissions": [("break_container_lease", "Can break container lease")]},
        ),
        migrations.AlterModelOptions(
            name="blob",
            options={"ordering": ["container__name", "name", "snapshot"],
                     "permissions": [("break_blob_lease", "Can break blob lease")]},
        ),
        migrations.RunPython(forwards, backwards),
    ]
