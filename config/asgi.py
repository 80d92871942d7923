"""What the server serves (serving/server.py names it): the ASGI front (serving/asgi.py) on Django's
WSGI application (config/wsgi.py), handed the doors' lean lease paths and the writer (serving/doors.py):
serving imports no door, storage or engine; ``build`` wires them, for the server and for tests."""

import functools

from config.wsgi import application as django_application
from engines import busy, postgres
from leases.api import lean as api
from leases.azure import fastpath as azure
from leases.operations import timing
from leases.storage import write_queue
from serving.asgi import LeaseholdASGI
from serving.doors import LeanPath, Writer


LEAN_PATHS = (LeanPath(door="azure", takes=azure.takes, checked=azure.checked, refused=azure.refused,
                       version=azure.DEFAULT_VERSION),
              LeanPath(door="api", takes=api.takes, checked=api.checked, takes_waits=False, usable=api.usable))
WRITER = Writer(write_together=functools.partial(azure.write_together, wait_for_rows=False),  # either door's calls
                retry_alone=write_queue.RetryAlone, would_wait=busy.WouldWait, at_once=busy.at_once,
                received_at=busy.received_at, writes_by=postgres.writes_by, server_process=postgres.serving,
                commits_together=write_queue.commits_together, row_locks=postgres.in_use)


def build(app, **options) -> LeaseholdASGI:
    """The front on ``app`` with the doors' lean paths and the writer."""
    return LeaseholdASGI(app, lean_paths=LEAN_PATHS, writer=WRITER, **options)


# The long-read helper (config/long_reads.py) named, not imported: it imports this module, so no circle.
# With LEASEHOLD_TIMING_LOG (bench only), inside the bench's timing wrapper (leases/operations/timing.py).
application = timing.installed(build(django_application, long_read_helper="config.long_reads"))
