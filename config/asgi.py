"""What the server serves (serving/server.py names it): the ASGI front
(serving/asgi.py) on Django's WSGI application (config/wsgi.py)."""

from config.wsgi import application as django_application
from serving.asgi import LeaseholdASGI

application = LeaseholdASGI(django_application, lean_path=True)
