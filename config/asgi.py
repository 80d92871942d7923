"""What the server serves (serving/server.py names it): the ASGI front (serving/asgi.py) on Django's
WSGI application (config/wsgi.py), handed the doors' lean lease paths and the database's bounds
(serving/doors.py): serving imports no door, storage or engine; ``build`` wires them."""

from config.wsgi import application as django_application
from engines import postgres
from leases.api import lean as api, refusals as api_refusals
from leases.azure import lean as azure, refusals as azure_refusals
from leases.domain import waiting
from leases.operations import timing
from leases.storage import queue_intake, transactions
from serving.asgi import LeaseholdASGI
from serving.doors import LeanDoor


class Database:  # the database's bounds on a server process's work (serving/doors.py)
    serving, locks_rows = staticmethod(postgres.serving), staticmethod(postgres.in_use)
    bounded, close = staticmethod(transactions.waits_from), staticmethod(queue_intake.close_all)


DOORS = (LeanDoor("azure", azure.takes, azure.answer_queued, azure_refusals.refusal, waiting.asked_by_header),
         LeanDoor("api", api.takes, api.answer_queued, api_refusals.refusal, waiting.asked_in_json,
                  takes_waits=False, usable=api.usable))
DATABASE = Database()


def build(app, **options) -> LeaseholdASGI:
    """The front on ``app`` with the doors' lean paths and the database's bounds."""
    return LeaseholdASGI(app, doors=DOORS, database=DATABASE, **options)


# The long-read helper named, not imported (it imports this module); timed with LEASEHOLD_TIMING_LOG (bench).
application = timing.installed(build(django_application, long_read_helper="config.long_reads"))
