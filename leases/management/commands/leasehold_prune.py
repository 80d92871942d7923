"""manage.py leasehold_prune: delete the lease history past the retention
policy now, in the same small batches the server's pruner uses (as
clearsessions does for sessions). The policy is LEASEHOLD_RETENTION_*
(leases/operations/retention.py); options override it for this run. It waits while a
server's pruner is at work on the database (one at a time: leases/operations/duties.py)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from leases.domain import clock
from leases.models import HistoryHorizon
from leases.operations import duties, ledger_prune, retention
from leases.conf.env import parse_duration


class Command(BaseCommand):
    help = "Delete lease history older than the retention policy (LEASEHOLD_RETENTION_*), in small batches."

    def add_arguments(self, parser):
        parser.add_argument("--renewals", help="keep successful renewals this long (e.g. 7d, 12h); "
                                               "default LEASEHOLD_RETENTION_RENEWALS")
        parser.add_argument("--events", help="keep every other event this long (e.g. 400d); "
                                             "default LEASEHOLD_RETENTION_EVENTS")
        parser.add_argument("--batch", type=int, help="rows per transaction (default LEASEHOLD_RETENTION_BATCH; "
                                                      "100 on SQLite, 2000 on PostgreSQL)")
        parser.add_argument("--no-pause", action="store_true", help="do not rest between batches "
                                                                    "(for a server that is not running)")

    def handle(self, *args, renewals=None, events=None, batch=None, no_pause=False, **options):
        try:
            policy = retention.policy()
            changes = {}
            if renewals is not None:
                changes["renewals"] = parse_duration(renewals, "--renewals")
            if events is not None:
                changes["events"] = parse_duration(events, "--events")
            if batch is not None:
                if batch < 1:
                    raise ValueError("--batch must be at least 1")
                changes["batch"] = batch
        except ValueError as err:
            raise CommandError(str(err)) from None
        policy = retention.Policy(**{**policy.__dict__, **changes})
        if not policy.prunes:
            self.stdout.write("The retention policy keeps every event (set LEASEHOLD_RETENTION_RENEWALS and/or "
                              "LEASEHOLD_RETENTION_EVENTS, or pass --renewals/--events); nothing pruned.")
            return
        with held_duty_lock(self.stdout):
            now = clock.now()
            try:
                deleted = retention.prune(policy, now=now, pace=not no_pause)
            except ledger_prune.LedgerRefusesPrune as err:
                raise CommandError(str(err)) from None
        kinds = {HistoryHorizon.RENEWALS: "successful renewals", HistoryHorizon.OTHERS: "other events"}
        before = "; ".join(f"{kinds[kind]} before {to:%Y-%m-%d %H:%M:%S} UTC"
                           for kind, to in sorted(policy.horizons(now).items(), reverse=True))
        self.stdout.write(f"Pruned {deleted} lease events; {before} may now be deleted.")


class held_duty_lock:
    """The database's duty lock for a command, waiting (and saying so) while another process holds it."""

    def __init__(self, out):
        self.lock, self.out = duties.DutyLock(), out

    def __enter__(self):
        if not self.lock.acquire():
            self.out.write("Another process is pruning this database; waiting for it to finish.")
            self.lock.acquire(wait=float("inf"))

    def __exit__(self, *exc):
        self.lock.release()
