"""A container's stored access policies (Set Container ACL), a model of its
own module (leases/models/__init__.py re-exports it)."""

from __future__ import annotations

from django.db import models


class StoredAccessPolicy(models.Model):
    """A container's stored access policy (Set Container ACL's signed
    identifier): a service SAS naming it (``si``) takes the start, expiry
    and permissions it leaves out from here, and stops working when the
    policy is removed or changed. At most five per container (Azure's rule)."""

    MAX_PER_CONTAINER = 5

    container = models.ForeignKey("leases.Container", on_delete=models.CASCADE, related_name="access_policies")
    identifier = models.CharField(max_length=64)
    start = models.DateTimeField(null=True, blank=True)
    expiry = models.DateTimeField(null=True, blank=True)
    permission = models.CharField(max_length=32, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["container", "identifier"], name="policy_unique_identifier")]
        ordering = ["container", "id"]

    def __str__(self) -> str:
        return f"{self.container_id}:{self.identifier}"
