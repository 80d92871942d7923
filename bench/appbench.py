#!/usr/bin/env python3
"""Per-request cost of the Azure lease path inside one process, without HTTP:
the WSGI application is called directly with environs built as serving/asgi.py
builds them. CPU time
per request is far less sensitive to a busy machine than requests/s, so this
is the tool for judging hot-path changes; --profile shows where time goes.

    .venv/bin/python bench/appbench.py [--cycles 2000] [--profile] [--synchronous FULL] [--door api]

``--door api``: the same lease cycle through the JSON API (POST
/api/v1/leases/..., a bearer token of a user with model permissions), as
bench/run.py's api-vs-azure scenario drives it. ``--batch 1 --pair-sql 'CREATE INDEX ...'
--pair-undo 'DROP INDEX ...'``: what a schema change costs a lease request, rounds of each schema
alternating in one process and one database.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import unquote

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import loadgen  # noqa: E402

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def environ_from(raw: bytes) -> dict:
    """The WSGI environ serving/asgi.py builds for one raw HTTP request (as
    served: uvicorn's scope, the path decoded, the raw header pairs kept)."""
    from serving.asgi import _environ

    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    method, target, _ = lines[0].decode().split(" ")
    path, _, query = target.partition("?")
    headers = [(name.strip().lower(), value.strip()) for name, _, value in (line.partition(b":") for line in lines[1:])]
    scope = {"type": "http", "method": method, "path": unquote(path), "raw_path": path.encode(),
             "query_string": query.encode(), "http_version": "1.1", "scheme": "http",
             "server": ("127.0.0.1", 10111), "client": ("127.0.0.1", 40000), "headers": headers}
    return _environ(scope, body, len(body))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-cpu", action="store_true", help="profile by CPU time (default: wall time)")
    ap.add_argument("--sort", default="tottime")
    ap.add_argument("--callers", default=None, help="show callers of functions matching this")
    ap.add_argument("--callees", default=None, help="show what functions matching this call (with --batch)")
    ap.add_argument("--synchronous", default="FULL")
    ap.add_argument("--show-response", action="store_true")
    ap.add_argument("--threads", type=int, default=0, help="N threads calling the app at once for --seconds")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--time-commits", action="store_true", help="time every COMMIT (fsync, checkpoints)")
    ap.add_argument("--switch", type=float, default=None, help="sys.setswitchinterval")
    ap.add_argument("--sql", action="append", default=[],
                    help="SQL to run after migrating, to try another schema (e.g. DROP INDEX ...); repeatable")
    ap.add_argument("--door", default="azure", choices=["azure", "api"],
                    help="the Azure door (SharedKey) or the JSON API (a bearer token)")
    ap.add_argument("--batch", type=int, default=0,
                    help="answer N lease requests at a time as a worker's lease batch does (either door's lean path)")
    ap.add_argument("--pair-sql", action="append", default=[],
                    help="with --batch: rounds alternate between the base schema (as migrated, then --sql) and "
                         "this SQL's (e.g. CREATE INDEX ...), undone by --pair-undo; repeatable")
    ap.add_argument("--pair-undo", action="append", default=[], help="SQL that undoes --pair-sql (DROP INDEX ...)")
    ap.add_argument("--rounds", type=int, default=10, help="with --pair-sql: rounds of each schema")
    ap.add_argument("--frames", action="store_true",
                    help="with --pair-sql: also the WAL frames (pages) a request writes, the WAL started over "
                         "each round (checkpoint thread and autocheckpoints off)")
    args = ap.parse_args()
    if args.switch:
        sys.setswitchinterval(args.switch)

    (REPO / "bench" / "var").mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="appbench-", dir=REPO / "bench" / "var"))
    try:
        return run(args, tmp)
    finally:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, tmp: Path) -> int:
    os.environ.update({"DJANGO_SETTINGS_MODULE": "config.settings", "LEASEHOLD_VAR_DIR": str(tmp),
                       "LEASEHOLD_DATABASE": str(tmp / "db.sqlite3"), "LEASEHOLD_DEBUG": "0",
                       "LEASEHOLD_SQLITE_SYNCHRONOUS": args.synchronous})
    if args.frames:
        os.environ["LEASEHOLD_SQLITE_CHECKPOINT_INTERVAL"] = "0"
    import django
    django.setup()
    from django.core.management import call_command
    call_command("migrate", verbosity=0)
    if args.sql:
        from django.db import connection
        with connection.cursor() as cursor:
            for statement in args.sql:
                cursor.execute(statement)

    from leases.management.commands.leasehold_setup import DEV_KEY
    from leases.services import account_ensure
    account_ensure(name=ACCOUNT, key1=DEV_KEY)
    from config.wsgi import application as app
    signer = loadgen.Signer(ACCOUNT, KEY)
    host = "127.0.0.1:10111"

    def call(raw: bytes):
        out = {}

        def start_response(status, headers, exc_info=None):
            out["status"], out["headers"] = status, headers

        body = b"".join(app(environ_from(raw), start_response))
        return out["status"], dict(out["headers"]), body

    for raw in (signer.build("PUT", host, f"/{ACCOUNT}/bench", {"restype": "container"}),
                signer.build("PUT", host, f"/{ACCOUNT}/bench/b", headers={"x-ms-blob-type": "BlockBlob"},
                             body=b"x")):
        st, _, body = call(raw)
        assert st.startswith("201"), (st, body)
    reqs: loadgen.LeaseRequests | loadgen.ApiLeaseRequests = (
        loadgen.ApiLeaseRequests(api_token(), host, f"/{ACCOUNT}/bench/b") if args.door == "api"
        else loadgen.LeaseRequests(signer, host, f"/{ACCOUNT}/bench/b"))

    def cycle():
        lid = str(uuid.uuid4())
        st1, h, _ = call(reqs.acquire(lid))
        st2, _, _ = call(reqs.renew(lid))
        st3, _, _ = call(reqs.release(lid))
        assert (st1[:3], st2[:3], st3[:3]) == ("201", "200", "200"), (st1, st2, st3)
        return h

    if args.batch:
        return run_batches(args, call, signer, host)
    commit_times: list[float] = []
    if args.time_commits:
        from django.db import connections
        wrapper_class = type(connections["default"])
        raw_commit = wrapper_class._commit

        def timed_commit(self):
            t = time.perf_counter()
            try:
                return raw_commit(self)
            finally:
                commit_times.append(time.perf_counter() - t)
        wrapper_class._commit = timed_commit
    for _ in range(200):
        h = cycle()
    commit_times.clear()
    if args.threads:
        import threading
        for i in range(args.threads):
            st, _, body = call(signer.build("PUT", host, f"/{ACCOUNT}/bench/t{i}",
                                            headers={"x-ms-blob-type": "BlockBlob"}, body=b"x"))
            assert st.startswith("201"), (st, body)
        counts = [0] * args.threads
        stop = time.perf_counter() + args.seconds

        def worker(i):
            r = loadgen.LeaseRequests(signer, host, f"/{ACCOUNT}/bench/t{i}")
            while time.perf_counter() < stop:
                lid = str(uuid.uuid4())
                for raw in (r.acquire(lid), r.renew(lid), r.release(lid)):
                    st, _, _ = call(raw)
                    assert st[:1] == "2", st
                    counts[i] += 1
        c0, t0 = time.process_time(), time.perf_counter()
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        c1, t1 = time.process_time(), time.perf_counter()
        n = sum(counts)
        wal = tmp / "db.sqlite3-wal"
        print(f"{args.threads} threads, one process: {n / (t1 - t0):.0f} req/s, CPU {1e6 * (c1 - c0) / n:.0f} us/request; "
              f"WAL {wal.stat().st_size / 2**20:.1f} MiB")
        if commit_times:
            commit_times.sort()
            k = len(commit_times)
            print(f"commits {k} for {n} requests; commit: p50 {1e3 * commit_times[k // 2]:.3f} ms, p99 {1e3 * commit_times[k * 99 // 100]:.3f} ms, "
                  f"mean {1e3 * sum(commit_times) / k:.3f} ms")
        return 0
    if args.show_response:
        print(h)
    prof = None
    if args.profile:
        import cProfile
        # CPU time, not wall time: a request's waits (the fsync) are not what it costs the server
        prof = cProfile.Profile(time.process_time) if args.profile_cpu else cProfile.Profile()
        prof.enable()
    # batches of 20 cycles; the best batch is what the code costs on a quiet
    # machine, the median what it cost here today
    batches = []
    done = 0
    while done < args.cycles:
        k = min(20, args.cycles - done)
        o0 = os.times()
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(k):
            cycle()
        c1, t1 = time.process_time(), time.perf_counter()
        o1 = os.times()
        batches.append(((c1 - c0) / (3 * k), (t1 - t0) / (3 * k), (o1.user - o0.user) / (3 * k),
                        (o1.system - o0.system) / (3 * k)))
        done += k
    if prof:
        prof.disable()
    n = args.cycles * 3
    cpu = sorted(b[0] for b in batches)
    wall = sorted(b[1] for b in batches)
    print(f"{n} lease requests (synchronous={args.synchronous}): "
          f"CPU per request best {1e6 * cpu[0]:.0f} us, median {1e6 * cpu[len(cpu) // 2]:.0f} us; "
          f"wall best {1e6 * wall[0]:.0f} us, median {1e6 * wall[len(wall) // 2]:.0f} us; "
          f"user/system {1e6 * sum(b[2] for b in batches) / len(batches):.0f}/"
          f"{1e6 * sum(b[3] for b in batches) / len(batches):.0f} us (means)")
    if commit_times:
        commit_times.sort()
        k = len(commit_times)
        print(f"commit (incl. fsync, checkpoints): p50 {1e3 * commit_times[k // 2]:.3f} ms, "
              f"p90 {1e3 * commit_times[k * 9 // 10]:.3f} ms, p99 {1e3 * commit_times[k * 99 // 100]:.3f} ms, "
              f"mean {1e3 * sum(commit_times) / k:.3f} ms")
    if prof:
        import pstats
        pstats.Stats(prof).sort_stats(args.sort).print_stats(35)
        if args.callers:
            pstats.Stats(prof).print_callers(args.callers)
        # (file, line, function) -> (primitive calls, calls, ...): pstats' table, which typeshed leaves out
        table: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        calls = sum(v[1] for v in table.values())
        print(f"python calls per request: {calls / n:.0f}")
        by_file: dict[str, int] = {}
        for (filename, _, _), (_, ncalls, _, _, _) in table.items():
            key = "/".join(filename.split("site-packages/")[-1].split(str(REPO) + "/")[-1].split("/")[:3])
            by_file[key] = by_file.get(key, 0) + ncalls
        print("calls per request by file: " + ", ".join(
            f"{k} {v / n:.0f}" for k, v in sorted(by_file.items(), key=lambda kv: -kv[1])[:25]))
    return 0


def api_token() -> str:
    """A bearer token of a user (not a superuser) with the model permissions
    lease actions need, as bench/servers.py issues one."""
    from django.contrib.auth.models import Permission, User

    from leases.models.tokens import ApiToken

    user, _ = User.objects.get_or_create(username="bench-api")
    user.user_permissions.add(*Permission.objects.filter(
        codename__in=["change_blob", "break_blob_lease", "view_blob"]))
    return ApiToken.issue(user=user, name=f"bench-{uuid.uuid4().hex[:8]}")[1]


def run_batches(args, call, signer, host) -> int:
    """--batch N: N blobs acquired, renewed and released together, each step
    one batch of N requests written together (one transaction, one fsync),
    as a worker's lease batch answers them: the door's lean path's checks,
    the write queue's write_now, the answers (``--door api``: the JSON API's
    lean path, leases/api/lean.py). --batch 1 is a lone request."""
    from leases.api import lean as api_lean
    from leases.azure import lean as azure_lean
    from leases.storage import queue_intake

    blobs = [f"/{ACCOUNT}/bench/batch{i}" for i in range(args.batch)]
    for path in blobs:
        st, _, body = call(signer.build("PUT", host, path, headers={"x-ms-blob-type": "BlockBlob"}, body=b"x"))
        assert st.startswith("201"), (st, body)
    token = api_token() if args.door == "api" else ""
    makers: list[Any] = [loadgen.ApiLeaseRequests(token, host, path) if args.door == "api"
                         else loadgen.LeaseRequests(signer, host, path) for path in blobs]

    def step(build) -> None:
        requests = []
        for maker in makers:
            environ = environ_from(build(maker))
            environ["leasehold.received_at"] = time.monotonic()
            if args.door == "api":
                target: Any = api_lean.takes(environ, environ["wsgi.input"].getvalue())
            else:
                target = azure_lean.takes(environ)
            assert target is not None, environ  # a plain lease request: the lean path's
            requests.append((environ, target))
        calls: list[Any] = api_lean.checked(requests) if args.door == "api" else azure_lean.checked(requests)
        queue_intake.write_now(calls)
        for call_ in calls:
            response = call_.answer()
            assert response.status_code in (200, 201), response.content

    def cycle() -> None:
        ids = [str(uuid.uuid4()) for _ in makers]
        it = iter(ids)
        step(lambda m: m.acquire(next(it)))
        it = iter(ids)
        step(lambda m: m.renew(next(it)))
        it = iter(ids)
        step(lambda m: m.release(next(it)))

    for _ in range(20):
        cycle()
    if args.pair_sql:
        return paired_rounds(args, cycle)
    prof = None
    if args.profile:
        import cProfile
        prof = cProfile.Profile(time.process_time) if args.profile_cpu else cProfile.Profile()
        prof.enable()
    rounds = max(1, args.cycles // args.batch)
    cpu = []
    for _ in range(rounds):
        c0 = time.process_time()
        cycle()
        cpu.append((time.process_time() - c0) / (3 * args.batch))
    if prof:
        prof.disable()
    cpu.sort()
    print(f"{rounds * 3 * args.batch} lease requests in batches of {args.batch}: CPU per request "
          f"best {1e6 * cpu[0]:.0f} us, median {1e6 * cpu[len(cpu) // 2]:.0f} us (building the environs included)")
    if prof:
        import pstats
        pstats.Stats(prof).sort_stats(args.sort).print_stats(40)
        if args.callees:
            pstats.Stats(prof).print_callees(args.callees)
        table: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        print(f"python calls per request: {sum(v[1] for v in table.values()) / (rounds * 3 * args.batch):.0f}")
    return 0


def paired_rounds(args, cycle) -> int:
    """--pair-sql: ``args.rounds`` rounds of each schema in one process and one database, alternating
    (ABBA: each pair starts with the other schema than the one before), each round ``--cycles``
    lease requests; CPU a request, median of each round's cycles, and the median of the pairs' ratios."""
    from django.db import connection

    def schema(statements) -> None:
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)

    per_round = max(1, args.cycles // args.batch)
    figures: dict[str, list[float]] = {"base": [], "paired": []}
    frames: dict[str, list[float]] = {"base": [], "paired": []}
    wal = Path(f"{connection.settings_dict['NAME']}-wal")
    if args.frames:
        schema(["PRAGMA wal_autocheckpoint = 0"])
    for r in range(args.rounds):
        for name in (("base", "paired") if r % 2 == 0 else ("paired", "base")):
            schema(args.pair_sql if name == "paired" else args.pair_undo)
            if args.frames:
                schema(["PRAGMA wal_checkpoint(TRUNCATE)"])
            cpu = []
            for _ in range(per_round):
                c0 = time.process_time()
                cycle()
                cpu.append((time.process_time() - c0) / (3 * args.batch))
            figures[name].append(sorted(cpu)[len(cpu) // 2])
            if args.frames:  # a frame is a page and its 24-byte header
                page = connection.cursor().execute("PRAGMA page_size").fetchone()[0]
                frames[name].append(wal.stat().st_size / (page + 24) / (3 * per_round * args.batch))
        schema(args.pair_undo)
        print(f"round {r + 1}: base {1e6 * figures['base'][-1]:.0f} us, paired "
              f"{1e6 * figures['paired'][-1]:.0f} us a request (load {os.getloadavg()[0]:.1f})" + (
                  f"; WAL frames a request: base {frames['base'][-1]:.2f}, paired {frames['paired'][-1]:.2f}"
                  if args.frames else ""), flush=True)
    ratios = sorted(p / b for p, b in zip(figures["paired"], figures["base"]))
    medians = {name: sorted(values)[len(values) // 2] for name, values in figures.items()}
    print(f"CPU a request, median of {args.rounds} rounds: base {1e6 * medians['base']:.0f} us, "
          f"paired {1e6 * medians['paired']:.0f} us; paired / base, median of the rounds' ratios "
          f"{ratios[len(ratios) // 2]:.3f} (from {ratios[0]:.3f} to {ratios[-1]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
