"""gunicorn settings for `make run`; every value comes from LEASEHOLD_* env vars."""

import os

bind = os.environ.get("LEASEHOLD_BIND", "127.0.0.1:10000")
# Chosen by measurement (bench/README.md, bench/run.py): threaded workers
# keep client connections alive (lease holders renew every few seconds; sync
# workers close every connection, so each request pays a TCP set-up), and
# the threads of a worker share commits (group commit,
# leases/sqlite_backend). Two processes use both cores of a small machine;
# more only add writer-lock hand-overs between processes.
workers = int(os.environ.get("LEASEHOLD_WORKERS", "2"))
worker_class = os.environ.get("LEASEHOLD_WORKER_CLASS", "gthread")
threads = int(os.environ.get("LEASEHOLD_THREADS", "8"))
# Idle keep-alive connections are held this long (gunicorn's default is 2 s,
# shorter than a renewal interval).
keepalive = int(os.environ.get("LEASEHOLD_KEEPALIVE", "15"))
timeout = 60
graceful_timeout = 10
# Azure metadata names may contain '_'; gunicorn would otherwise drop
# x-ms-meta-my_key. No trusted proxy headers are read, so no spoofing risk.
header_map = "dangerous"
accesslog = os.environ.get("LEASEHOLD_ACCESS_LOG") or None
loglevel = os.environ.get("LEASEHOLD_LOG_LEVEL", "warning").lower()
wsgi_app = "config.wsgi:application"
