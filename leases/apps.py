from django.apps import AppConfig


class LeasesConfig(AppConfig):
    name = "leases"
    verbose_name = "Leases"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.models.signals import post_migrate

        from .history_triggers import after_migrate

        # A migration that rebuilds the history table drops its append-only
        # triggers (SQLite); every migrate puts them back.
        post_migrate.connect(after_migrate, sender=self, dispatch_uid="leases.history_triggers")
