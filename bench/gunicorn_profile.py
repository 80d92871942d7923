"""gunicorn settings for profiling a bench run: the production settings
(config/gunicorn.py) plus a CPU-time (per-thread) cProfile of every worker, written to
$LEASEHOLD_PROFILE_DIR/worker-<pid>.prof when the worker exits. Use with
    bench/run.py --leasehold-cmd '.venv/bin/gunicorn -c bench/gunicorn_profile.py'
"""

import os
import runpy
import time

globals().update({k: v for k, v in runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "config",
                                                               "gunicorn.py")).items()
                  if not k.startswith("__")})
_production_post_worker_init = globals().get("post_worker_init")
_production_worker_exit = globals().get("worker_exit")


def post_worker_init(worker):
    """Profile the worker's main thread, and each request thread from its
    first request on (threaded workers run requests in a pool)."""
    import cProfile
    import threading
    if _production_post_worker_init:
        _production_post_worker_init(worker)
    profiles = worker._leasehold_profiles = [cProfile.Profile(time.thread_time)]
    profiles[0].enable()
    local = threading.local()
    app = worker.wsgi

    def profiled(environ, start_response):
        if not getattr(local, "on", False) and threading.current_thread() is not threading.main_thread():
            local.on = True
            prof = cProfile.Profile(time.thread_time)
            profiles.append(prof)
            prof.enable()
        return app(environ, start_response)
    worker.wsgi = profiled


def worker_exit(server, worker):
    out = os.environ.get("LEASEHOLD_PROFILE_DIR", ".")
    for i, prof in enumerate(getattr(worker, "_leasehold_profiles", [])):
        prof.create_stats()
        prof.dump_stats(os.path.join(out, f"worker-{os.getpid()}-{i}.prof"))
    if _production_worker_exit:
        _production_worker_exit(server, worker)
