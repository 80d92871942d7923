"""One secret key per PostgreSQL database (leases/operations/shared_secret.py): made
once by the first instance, read by the others; a configured key is kept
as a fingerprint, and an instance with another key is refused."""

from __future__ import annotations

import pytest

from leases.models import SharedSecret
from leases.operations.shared_secret import DifferentKey, settle

pytestmark = pytest.mark.also_postgres


def test_the_first_instance_makes_the_key_and_the_others_read_it(db):
    key = settle(None)
    assert len(key) >= 50 and settle(None) == key
    assert settle(key) == key  # the same key, configured: fine
    with pytest.raises(DifferentKey, match="is not the key the other instances of this database use"):
        settle("another key")


def test_a_configured_key_is_kept_only_as_its_fingerprint(db):
    assert settle("configured key") == "configured key"
    row = SharedSecret.objects.get()
    assert row.key == "" and "configured" not in row.fingerprint
    with pytest.raises(DifferentKey, match="set the same LEASEHOLD_SECRET_KEY here"):
        settle(None)
    with pytest.raises(DifferentKey, match="another LEASEHOLD_SECRET_KEY"):
        settle("another key")
