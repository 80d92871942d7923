"""Inspect, break or release a lease from the shell, through the same
services as the API and the admin (recorded with actor "cli:<os user>")."""

import getpass
import json
from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError

from leases.domain import clock, fingerprints, machine
from leases import services
from leases.domain.errors import LeaseholdError
from leases.services import Actor, ResourceRef, selectors


def parse_path(path: str) -> ResourceRef:
    """"account/container[/blob]" -> ResourceRef."""
    parts = path.strip("/").split("/", 2)
    if len(parts) < 2 or not all(parts):
        raise CommandError("name a resource as account/container or account/container/blob")
    return ResourceRef(*parts)


class Command(BaseCommand):
    help = "Show, break or release the lease on account/container[/blob]."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["show", "break", "release"])
        parser.add_argument("resource", help="account/container or account/container/blob")
        parser.add_argument("--period", type=int, default=None,
                            help="break period in seconds (0-60); default: at the lease's end")
        parser.add_argument("--reason", default="", help="recorded in the lease history")
        parser.add_argument("--at", default=None, help="show: who held it at this time (ISO 8601), from its "
                                                       "tenures, whatever retention pruned")

    def handle(self, *args, action, resource, period, reason, at=None, **options):
        ref = parse_path(resource)
        if at is not None:
            self.stdout.write(json.dumps(self._held_at(ref, at), indent=2, default=str))
            return
        actor = Actor(name=f"cli:{getpass.getuser()}", via="cli")
        try:
            if action == "break":
                result = services.lease_break(ref=ref, actor=actor, break_period=period, reason=reason)
                self.stdout.write(f"broken in {result.lease_time} s")
            elif action == "release":
                current = self._load(ref)
                services.lease_release(ref=ref, actor=actor, lease_id=current.lease_id, reason=reason)
                self.stdout.write("released")
            else:
                self.stdout.write(json.dumps(self._describe(self._load(ref)), indent=2))
        except LeaseholdError as err:
            raise CommandError(f"{err.status} {err.code}: {err.message}") from None

    @staticmethod
    def _held_at(ref: ResourceRef, at: str) -> dict | None:
        try:
            when = datetime.fromisoformat(at)
        except ValueError:
            raise CommandError(f"--at must be an ISO 8601 time, not {at!r}") from None
        when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
        return selectors.holder_at(account=ref.account, container=ref.container, blob=ref.blob or "", when=when)

    @staticmethod
    def _load(ref: ResourceRef):
        if ref.blob is None:
            return services.container_read(ref=ref, actor=Actor(via="cli"))
        return services.blob_read(ref=ref, actor=Actor(via="cli"), content=False)

    @staticmethod
    def _describe(obj) -> dict:
        now = clock.now()
        state = obj.effective_lease_state(now)
        return {
            "state": state,
            "status": machine.lease_status(state),
            "duration": machine.duration_type(obj.lease_record, state),
            "lease_fingerprint": fingerprints.of(obj.lease_id) or None,  # never the id: a capability
            # 0 for an infinite lease, as this command always answered; None when unlocked.
            "seconds_left": (machine.seconds_left(machine.deadline(obj.lease_record, now), now)
                             if state in machine.LOCKED_STATES else None),
            "generation": obj.lease_generation,
            "holder": obj.lease_holder or None,
            "acquired_at": obj.lease_acquired_at.isoformat() if obj.lease_acquired_at else None,
        }
