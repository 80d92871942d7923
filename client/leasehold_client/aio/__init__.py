"""The asyncio forms, on ``azure.storage.blob.aio`` clients (install the
``aio`` extra for aiohttp): AutoRenewLease (``async with``), do_once,
OncePer / once_per, LeaderElection / leader (``async for``)."""

from .._common import LeaseLostError
from .leader import LeaderElection, leader
from .lease import AutoRenewLease
from .once import do_once
from .schedule import OncePer, once_per

__all__ = ["AutoRenewLease", "LeaseLostError", "LeaderElection", "OncePer", "do_once", "leader", "once_per"]
