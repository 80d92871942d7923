"""Django's WSGI application, the one every server of Leasehold runs (serving/ calls it in its
lanes): Django's handler with the Azure door's requests taken through a handler of their own
(leases/azure/handler.py), its 503 answers counted for /metrics."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)

from leases.azure.handler import LeaseholdWSGI  # noqa: E402  (needs settings)

from leases.operations.metrics import counting_unavailable  # noqa: E402

application = counting_unavailable(LeaseholdWSGI())  # 503s counted for /metrics
