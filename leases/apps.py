"""The ``leases`` Django app, and what it wires when Django's apps are ready: the history's
append-only triggers put back after every ``migrate``, and the database engines' reports (writer
lock waits, fsyncs, bench timings) routed to the metrics and the timing log, since the engines
import nothing of Leasehold."""

from django.apps import AppConfig


class LeasesConfig(AppConfig):
    name = "leases"
    verbose_name = "Leases"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from django.db.models.signals import post_migrate

        from leases.models.history_triggers import after_migrate

        # A migration that rebuilds the history table drops its append-only
        # triggers (SQLite); every migrate puts them back.
        post_migrate.connect(after_migrate, sender=self, dispatch_uid="leases.models.history_triggers")
        # What the database engines report: /metrics' histograms, the bench's timings.
        from engines import hooks

        from leases.operations import metrics, timing

        hooks.observe_writer_lock_wait = metrics.observe_writer_lock_wait
        hooks.observe_fsync = metrics.observe_fsync
        if timing.ENABLED:
            hooks.mark, hooks.record = timing.mark, timing.write
