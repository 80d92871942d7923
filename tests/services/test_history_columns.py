"""Who asked, as the history keeps it (leases/services/history.py actor_columns): each of the actor's
values cut to its column's length, in one place for every door (the doors pass the headers as sent).
On SQLite, which would keep a longer value, and PostgreSQL, which would refuse it."""

from __future__ import annotations

import pytest

from leases import services
from leases.domain.client_headers import USER_AGENT_MAX
from leases.models import LeaseEvent
from leases.services import Actor, ResourceRef

pytestmark = pytest.mark.also_postgres

BLOB = ResourceRef("devstoreaccount1", "columns", "job.lock")


def test_each_actor_value_is_cut_to_its_column(make_blob):
    make_blob(BLOB, Actor(name="setup", via="cli"))
    long = Actor(name="n" * 300, via="azure", client_request_id="c" * 1100, remote_addr="1" * 80,
                 user_agent="u" * (USER_AGENT_MAX + 100))
    services.lease_acquire(ref=BLOB, actor=long, duration=15)
    event = LeaseEvent.objects.filter(blob=BLOB.blob, action="acquire").get()
    assert (event.actor, event.client_request_id, event.remote_addr, event.user_agent) == (
        "n" * 200, "c" * 1024, "1" * 64, "u" * USER_AGENT_MAX)
