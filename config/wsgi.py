import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)

from leases.azure.handler import LeaseholdWSGI  # noqa: E402  (needs settings)

from leases.operations.metrics import counting_unavailable  # noqa: E402

application = counting_unavailable(LeaseholdWSGI())  # 503s counted for /metrics
