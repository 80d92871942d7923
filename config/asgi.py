"""What the server serves (serving/server.py names it): the ASGI front
(serving/asgi.py) on Django's WSGI application (config/wsgi.py)."""

from config.wsgi import application as django_application
from leases.operations import timing
from serving.asgi import LeaseholdASGI

# The long-read helper process runs config/long_reads.py, which imports this
# module: named here (a command line's module), not imported, so no circle.
# With LEASEHOLD_TIMING_LOG (bench only), inside the bench's timing wrapper (leases/operations/timing.py).
application = timing.installed(LeaseholdASGI(django_application, lean_path=True, long_read_helper="config.long_reads"))
