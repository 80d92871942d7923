"""What the server serves (serving/server.py names it): the ASGI front
(serving/asgi.py) on Django's WSGI application (config/wsgi.py)."""

from config.wsgi import application as django_application
from leases import timing
from serving.asgi import LeaseholdASGI

# With LEASEHOLD_TIMING_LOG (bench only), inside the bench's timing wrapper (leases/timing.py).
application = timing.installed(LeaseholdASGI(django_application, lean_path=True))
