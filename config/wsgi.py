import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)

from leases.azure.handler import LeaseholdWSGI  # noqa: E402  (needs settings)

from leases.metrics import counting_unavailable  # noqa: E402

application = counting_unavailable(LeaseholdWSGI())  # 503s counted for /metrics

# History retention (leases/retention.py): a background pruner in one server
# process, if LEASEHOLD_RETENTION_* asks for pruning; none by default.
from leases.retention import start_pruner  # noqa: E402

start_pruner()
