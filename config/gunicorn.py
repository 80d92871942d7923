"""gunicorn settings for `make run`; every value comes from LEASEHOLD_* env vars."""

import os

bind = os.environ.get("LEASEHOLD_BIND", "127.0.0.1:10000")
workers = int(os.environ.get("LEASEHOLD_WORKERS", "4"))
worker_class = os.environ.get("LEASEHOLD_WORKER_CLASS", "sync")
threads = int(os.environ.get("LEASEHOLD_THREADS", "1"))
timeout = 60
graceful_timeout = 10
# Azure metadata names may contain '_'; gunicorn would otherwise drop
# x-ms-meta-my_key. No trusted proxy headers are read, so no spoofing risk.
header_map = "dangerous"
accesslog = os.environ.get("LEASEHOLD_ACCESS_LOG") or None
loglevel = os.environ.get("LEASEHOLD_LOG_LEVEL", "warning").lower()
wsgi_app = "config.wsgi:application"
