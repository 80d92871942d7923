"""The ledger (leases/operations/ledger.py): the blocks sealed over the history, what retention
removed from them, and the verifications run. Rows are written once and never changed."""

from __future__ import annotations

from django.db import models


class LedgerBlock(models.Model):
    """Events ``first_id`` to ``last_id`` (every one that exists in that range), in two parts each
    chained in id order: successful renewals and the rest (leases/domain/ledger.py). ``block_hash``
    covers the rest of the row but ``newest_at`` (retention's guide) and chains to the previous
    block's. Position 0, the genesis, holds the events written before the ledger."""

    position = models.BigIntegerField(primary_key=True)
    first_id = models.BigIntegerField()
    last_id = models.BigIntegerField(unique=True)
    renewals = models.IntegerField()
    renewals_chain = models.CharField(max_length=64)
    others = models.IntegerField()
    others_chain = models.CharField(max_length=64)
    previous_hash = models.CharField(max_length=64)
    block_hash = models.CharField(max_length=64)
    sealed_at = models.DateTimeField()
    newest_at = models.DateTimeField(null=True, blank=True)  # the newest event's time: when it may be pruned

    class Meta:
        ordering = ["-position"]

    def __str__(self) -> str:
        return f"block {self.position}: events {self.first_id}-{self.last_id}, {self.block_hash[:12]}…"

    @property
    def events(self) -> int:
        return self.renewals + self.others


class LedgerPrune(models.Model):
    """Events retention removed from one part of one block: ids ``first_id`` to ``last_id`` of that
    part, ``count`` of them, the part's chain before them and after them. Verify resumes the chain
    from ``chain_to`` where the events are gone."""

    block = models.BigIntegerField()
    part = models.PositiveSmallIntegerField()  # leases.domain.ledger.RENEWALS or OTHERS
    first_id = models.BigIntegerField()
    last_id = models.BigIntegerField()
    count = models.IntegerField()
    chain_from = models.CharField(max_length=64)
    chain_to = models.CharField(max_length=64)
    pruned_at = models.DateTimeField()

    class Meta:
        ordering = ["block", "part", "first_id"]
        indexes = [models.Index(fields=["part", "last_id"], name="ledger_prune_part_idx")]

    def __str__(self) -> str:
        return f"block {self.block} part {self.part}: {self.count} events {self.first_id}-{self.last_id} pruned"


class LedgerCheck(models.Model):
    """One run of ``leasehold_ledger verify``: what it covered and what it found."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    ok = models.BooleanField()
    blocks = models.BigIntegerField()
    events = models.BigIntegerField()
    unsealed = models.BigIntegerField(default=0)
    digests = models.IntegerField(default=0)
    through_block = models.BigIntegerField(null=True, blank=True)
    problem = models.TextField(blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"verify at {self.finished_at:%Y-%m-%d %H:%M:%S}: {'ok' if self.ok else self.problem}"
