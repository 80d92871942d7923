"""manage.py leasehold_blob_gc: remove the stored content nothing needs any
more, now, in the same bounded transactions the server uses after each Put
Blob (leases/storage/blob_content.py): versions no blob or snapshot names (after a
grace for downloads under way) and the staged pieces of uploads that died.
One process at a time per database, as the server's pruner (leases/operations/duties.py)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from leases.storage import blob_content

from leases.management.commands.leasehold_prune import held_duty_lock


class Command(BaseCommand):
    help = ("Delete blob content no blob names any more (replaced or deleted more than "
            f"{blob_content.RELEASED_GRACE} ago) and staged content of dead uploads (older than "
            f"{blob_content.STAGED_TTL}), {blob_content.DELETE_BATCH} chunks per transaction.")

    def handle(self, *args, **options):
        with held_duty_lock(self.stdout):
            done = blob_content.prune()
        self.stdout.write(f"Released {done['orphans_released']} unreferenced content versions; "
                          f"deleted {done['chunks_deleted']} chunks.")
