import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup(set_prefix=False)

from leases.azure.handler import LeaseholdWSGI  # noqa: E402  (needs settings)

application = LeaseholdWSGI()
