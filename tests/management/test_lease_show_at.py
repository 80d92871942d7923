"""`leasehold_lease show R --at T`: who held R at T, from its tenures, also after retention pruned
the renewals (issue 49's reproduction through the shell)."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from leases.models import LeaseEvent

pytestmark = pytest.mark.also_postgres


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_show_at_a_time_after_pruning(service, clock):
    t0 = clock.freeze()
    lease = service.create_container("ops").upload_blob("job", b"x").acquire_lease(lease_duration=15)
    for _ in range(4):
        clock.advance(5)
        lease.renew()
    clock.advance(10)
    run("leasehold_prune", "--renewals", "2s", "--no-pause")
    assert not LeaseEvent.objects.filter(action="renew").exists()
    at = (t0 + timedelta(seconds=17)).isoformat()
    held = json.loads(run("leasehold_lease", "show", "devstoreaccount1/ops/job", "--at", at))
    assert (held["holder"], held["state"], held["generation"]) == ("account:devstoreaccount1", "leased", 1)
    assert lease.id not in json.dumps(held)
    later = (t0 + timedelta(seconds=36)).isoformat()
    assert json.loads(run("leasehold_lease", "show", "devstoreaccount1/ops/job", "--at", later)) is None
    with pytest.raises(CommandError, match="ISO 8601"):
        run("leasehold_lease", "show", "devstoreaccount1/ops/job", "--at", "noon")
