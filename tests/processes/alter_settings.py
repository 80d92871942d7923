"""config.settings plus alter_app, whose migration alters a lease table."""

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.processes.alter_app"]
