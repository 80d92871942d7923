"""Client helpers on Azure blob leases, for Leasehold, Azurite and Azure.

- ``AutoRenewLease``: a lease held (and renewed) for as long as a block runs;
- ``do_once``: run an initialisation once across all instances;
- ``OncePer`` / ``once_per``: a job that runs once per period across instances;
- ``LeaderElection`` / ``leader``: leader election with fencing generations;
- ``fence`` / ``fenced``: the user's own database refuses a stale holder's write.

The asyncio forms (on ``azure.storage.blob.aio``) are in ``leasehold_client.aio``.
Time comes from an injectable ``clock`` (``leasehold_client.clock``).
"""

from ._common import LeaseLostError
from .clock import ManualClock, SystemClock
from .fencing import CannotFence, NotInTransaction, StaleLease, fence, fenced
from .lease import AutoRenewLease
from .leader import LeaderElection, leader
from .once import do_once
from .schedule import OncePer, once_per

__all__ = ["AutoRenewLease", "CannotFence", "LeaseLostError", "LeaderElection", "ManualClock", "OncePer",
           "NotInTransaction", "StaleLease", "SystemClock", "do_once", "fence", "fenced", "leader", "once_per"]
