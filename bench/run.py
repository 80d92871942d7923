#!/usr/bin/env python3
"""Leasehold vs Azurite, side by side, on loopback.

    .venv/bin/python bench/run.py            # or: make bench
    .venv/bin/python bench/run.py --soak     # memory over 5 minutes, 10,000 blobs

Starts Azurite (installed from npm into bench/node_modules if missing) and
Leasehold (python -m config.serve as `make run`: uvicorn + serving/front.py, production settings, a fresh
file-backed SQLite database, synchronous=FULL), drives both with the same
SharedKey-signed load generator, alternating the servers over several rounds,
and prints per scenario requests/s, p50/p99 per action, errors, hand-overs/s
and the Leasehold/Azurite ratios (medians of the paired rounds' ratios).
Everything is bounded in time and count; both servers are killed at the end.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import flood  # noqa: E402
import hostile  # noqa: E402
import loadgen  # noqa: E402
import servers  # noqa: E402
from loadgen import ACQUIRE, ACTION_NAMES, BREAK, RELEASE, RENEW  # noqa: E402

ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONTAINER = "bench"


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # cycle | holders | contention | hostile | stuck | flood | doors
    clients: int
    burners: int = 0  # CPU-burning processes running through each measured run

    @property
    def title(self) -> str:
        if self.kind == "hostile":
            return (f"{self.name}: 16 holders renew 15-s leases every 5 s under slow clients, slow uploads "
                    f"and (Leasehold) full history exports")
        if self.kind == "flood":
            return (f"{self.name}: a bystander renews one lease back to back while requests without valid "
                    f"credentials flood the lease paths (bench/flood.py)")
        if self.kind == "doors":
            return (f"{self.name}: one Leasehold, {self.clients} clients cycling acquire -> renew -> release on "
                    f"their own blobs through the Azure door, then through the JSON API (a bearer token of a "
                    f"user with model permissions), the doors alternating")
        if self.kind == "stuck":
            return (f"{self.name}: another process holds SQLite's write lock; 4 readers, 4 writers "
                    f"(Leasehold only: Azurite has no database to lock)")
        if self.burners:
            return (f"{self.name}: {self.clients} client(s) cycling acquire -> renew -> release, "
                    f"with {self.burners} CPU-burning processes running")
        if self.kind == "holders":
            return (f"{self.name}: {self.clients} holders, each renewing its 60-s lease on its own blob back "
                    f"to back (acquired once, before the window)")
        if self.kind == "cycle":
            return (f"{self.name}: {self.clients} client(s), each cycling acquire -> renew -> release "
                    f"on its own blob")
        return f"{self.name}: {self.clients} clients fighting for one blob (acquire; winner renews, releases)"


SCENARIOS = {s.name: s for s in (
    Scenario("cycle-1", "cycle", 1),
    Scenario("cycle-16", "cycle", 16),
    Scenario("cycle-64", "cycle", 64),
    Scenario("holders-16", "holders", 16),
    Scenario("contention-16", "contention", 16),
    Scenario("busy-cycle-16", "cycle", 16, burners=2),
    Scenario("hostile", "hostile", 16),
    Scenario("stuck", "stuck", 8),
    Scenario("flood", "flood", 1),
    Scenario("api-vs-azure", "doors", 16),
)}
DOORS = ("azure", "api")
ROBUSTNESS = ("hostile", "stuck", "flood")
EXPECTED = {ACQUIRE: (201,), RENEW: (200,), RELEASE: (200,), BREAK: (202,)}
CONTENDED_ACQUIRE = (201, 409)


@dataclass
class Result:
    server: str
    scenario: str
    rps: float = 0.0
    lat: dict = field(default_factory=dict)  # action -> (p50 ms, p99 ms, count)
    errors: int = 0
    err5xx: int = 0
    failures: int = 0
    handovers: float = 0.0
    double_holders: int = 0
    lost: int = 0
    client_cpu: float = 0.0  # % of one core
    server_cpu: float = 0.0
    server_cpu_ms: float = 0.0  # server CPU seconds per request answered in the window, in ms
    answered: int = 0
    history: int | None = None
    connects: int = 0
    statuses: dict = field(default_factory=dict)


def pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[k]


# ------------------------------------------------------------------ set-up


def setup_server(server: servers.Server, blobs: list[str], threads: int = 16) -> None:
    """The container and the blobs, created with signed requests."""
    signer = loadgen.Signer(ACCOUNT, KEY)
    conn = loadgen.Connection("127.0.0.1", server.port)
    st, _, body = conn.request(signer.build("PUT", server.host, f"/{ACCOUNT}/{CONTAINER}",
                                            {"restype": "container"}))
    conn.close()
    if st not in (201, 409):
        raise SystemExit(f"{server.name}: create container answered {st}: {body[:300]!r}")
    errors: list[str] = []

    def put(part: list[str]) -> None:
        c = loadgen.Connection("127.0.0.1", server.port)
        try:
            for name in part:
                st, _, body = c.request(signer.build(
                    "PUT", server.host, f"/{ACCOUNT}/{CONTAINER}/{name}",
                    headers={"x-ms-blob-type": "BlockBlob"}, body=b"x"))
                if st != 201:
                    errors.append(f"{name}: {st} {body[:200]!r}")
                    return
        finally:
            c.close()

    parts = [blobs[i::threads] for i in range(threads)]
    ts = [threading.Thread(target=put, args=(p,), daemon=True) for p in parts if p]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=600)
    if errors:
        raise SystemExit(f"{server.name}: blob set-up failed: {errors[0]}")


def cycle_blob(i: int) -> str:
    return f"c-{i:04d}"


# ------------------------------------------------------------------ one run


def lease_requests(server: servers.Server, door: str, blob: str, client: int = 0):
    """One blob's lease requests through ``door``: the Azure door (SharedKey)
    or the JSON API (the server's bench token of this client)."""
    if door == "api":
        assert isinstance(server, servers.Leasehold)  # only Leasehold has the JSON API
        token = server.api_tokens[client % len(server.api_tokens)]
        return loadgen.ApiLeaseRequests(token, server.host, f"/{ACCOUNT}/{CONTAINER}/{blob}")
    return loadgen.LeaseRequests(loadgen.Signer(ACCOUNT, KEY), server.host, f"/{ACCOUNT}/{CONTAINER}/{blob}")


def run_one(server: servers.Server, sc: Scenario, warmup: float, duration: float,
            backoff: float = 0.0, door: str = "azure") -> Result:
    signer = loadgen.Signer(ACCOUNT, KEY)
    recs = [loadgen.Recorder() for _ in range(sc.clients)]
    arena = loadgen.Arena()
    leasehold = server if isinstance(server, servers.Leasehold) else None
    history_before = leasehold.history_count() if leasehold is not None else None
    t0 = time.perf_counter()
    stop_at = t0 + warmup + duration
    threads: list[threading.Thread] = []
    target: Callable[..., None]
    args: tuple[object, ...]
    for i in range(sc.clients):
        if sc.kind in ("cycle", "doors"):
            reqs = [lease_requests(server, door, cycle_blob(i), client=i)]
            target, args = loadgen.cycle_worker, ("127.0.0.1", server.port, reqs, stop_at, recs[i])
        elif sc.kind == "holders":
            reqs = [lease_requests(server, door, cycle_blob(i), client=i)]
            target, args = loadgen.holder_worker, ("127.0.0.1", server.port, reqs, stop_at, recs[i])
        else:
            req = loadgen.LeaseRequests(signer, server.host, f"/{ACCOUNT}/{CONTAINER}/hot")
            target, args = loadgen.contention_worker, (i, "127.0.0.1", server.port, req, arena, stop_at,
                                                        recs[i], backoff)
        threads.append(threading.Thread(target=target, args=args, daemon=True))
    for t in threads:
        t.start()
    w0 = t0 + warmup
    time.sleep(max(0.0, w0 - time.perf_counter()))
    pids = server.pids()
    c0, s0, m0 = time.process_time(), servers.cpu_seconds(pids), time.perf_counter()
    time.sleep(max(0.0, stop_at - time.perf_counter()))
    c1, s1, m1 = time.process_time(), servers.cpu_seconds(pids), time.perf_counter()
    for t in threads:
        t.join(timeout=loadgen.SOCKET_TIMEOUT * 4 + 5)
    hung = sum(t.is_alive() for t in threads)

    res = Result(server.name, sc.name)
    window = m1 - m0
    lats: dict[int, list[float]] = {a: [] for a in (ACQUIRE, RENEW, RELEASE, BREAK)}
    count = 0
    for rec in recs:
        res.answered += len(rec.records)
        res.failures += len(rec.failures)
        res.lost += rec.lost
        for t_end, action, status, lat in rec.records:
            res.statuses[status] = res.statuses.get(status, 0) + 1
            ok = status in (CONTENDED_ACQUIRE if sc.kind == "contention" and action == ACQUIRE
                            else EXPECTED[action])
            if not ok:
                res.errors += 1
            if status >= 500:
                res.err5xx += 1
            if m0 <= t_end <= m1:
                count += 1
                lats[action].append(lat)
        res.handovers += sum(1 for t in rec.handovers if m0 <= t <= m1)
    res.errors += res.failures + res.lost + hung
    res.rps = count / window
    res.handovers /= window
    res.double_holders = arena.double_holders
    for action, values in lats.items():
        if values:
            values.sort()
            res.lat[ACTION_NAMES[action]] = (pct(values, 0.5) * 1e3, pct(values, 0.99) * 1e3, len(values))
    every = sorted(v for vs in lats.values() for v in vs)
    res.lat["all"] = (pct(every, 0.5) * 1e3, pct(every, 0.99) * 1e3, len(every))
    res.client_cpu = 100 * (c1 - c0) / window
    res.server_cpu = 100 * (s1 - s0) / window
    res.server_cpu_ms = 1e3 * (s1 - s0) / count if count else float("nan")
    if leasehold is not None and history_before is not None:
        res.history = leasehold.history_count() - history_before
    return res


# ------------------------------------------------------------------ report


def fmt_num(x: float) -> str:
    if x != x:
        return "-"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def med(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def ratio_median(pairs: list[tuple[float, float]]) -> float:
    return med([lh / a for a, lh in pairs if a and a == a and lh == lh])


def _short(name: str) -> str:
    return name.split("-", 1)[1][0].upper() if "-" in name else name[0]


def ratio_columns(names: list[str]) -> list[tuple[str, str]]:
    """(numerator, denominator) pairs: every Leasehold against Azurite (the
    first), and Leasehold against its variant (--compare-env, --compare-tree)."""
    pairs = [(n, names[0]) for n in names[1:]] if names and names[0] == "Azurite" else []
    if "Leasehold" in names and any(n.startswith("Leasehold-") for n in names):
        pairs += [("Leasehold", n) for n in names if n.startswith("Leasehold-")]
    return pairs


def report(scenarios: list[Scenario], results: dict, names: list[str], rounds_done: int) -> str:
    out = []
    pairs = ratio_columns(names)
    for sc in scenarios:
        runs = {n: results.get((n, sc.name), []) for n in names}
        if not any(runs.values()):
            continue
        out.append("")
        out.append(sc.title)
        head = f"  {'':26}" + "".join(f"{n:>18}" for n in names)
        head += "".join(f"{_short(n) + '/' + _short(d):>10}" for n, d in pairs)
        out.append(head)

        def row(label: str, get, fmt=fmt_num, ratio: bool = True) -> None:
            cells = "".join(f"{fmt(med([get(r) for r in runs[n]])):>18}" for n in names)
            for num, den in pairs if ratio else ():
                r = ratio_median([(get(x), get(y)) for x, y in zip(runs[den], runs[num])])
                cells += f"{(f'{r:.2f}' if r == r else '-'):>10}"
            out.append(f"  {label:26}{cells}")

        row("requests/s", lambda r: r.rps)
        if sc.kind == "contention":
            row("hand-overs/s", lambda r: r.handovers)
        actions = ["acquire", "renew", "release", "all"]
        for action in actions:
            row(f"{action} p50 ms", lambda r, a=action: r.lat.get(a, (float("nan"),) * 3)[0])
            row(f"{action} p99 ms", lambda r, a=action: r.lat.get(a, (float("nan"),) * 3)[1])
        total = lambda get: lambda n: str(sum(get(r) for r in runs[n]))  # noqa: E731

        def total_row(label: str, get) -> None:
            out.append(f"  {label:26}" + "".join(f"{total(get)(n):>18}" for n in names))

        total_row("errors (all rounds)", lambda r: r.errors)
        total_row("5xx (all rounds)", lambda r: r.err5xx)
        if sc.kind == "contention":
            total_row("double holders", lambda r: r.double_holders)
        row("client CPU % of a core", lambda r: r.client_cpu, ratio=False)
        row("server CPU % of a core", lambda r: r.server_cpu, ratio=False)
        per_round = "  ".join(f"{n}: " + " ".join(fmt_num(r.rps) for r in runs[n]) for n in names)
        out.append(f"  {'req/s by round':26}{per_round}")
        hist = [(r.history, r.answered) for r in runs.get("Leasehold", [])]
        if hist:
            ok = all(h == a for h, a in hist)
            out.append(f"  {'history events':26}" + ("= answered lease requests in every round"
                                                     if ok else f"MISMATCH {hist}"))
        bad: dict[tuple[str, int], int] = {}
        for n in names:
            for r in runs[n]:
                for st, k in r.statuses.items():
                    if st not in (200, 201, 202, 409):
                        bad[(n, st)] = bad.get((n, st), 0) + k
        if bad:
            out.append(f"  {'unexpected statuses':26}" + ", ".join(f"{n} {st}: {k}" for (n, st), k in bad.items()))
    return "\n".join(out)


# ------------------------------------------------------------------ main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="paired rounds (default 3)")
    ap.add_argument("--seconds", type=float, default=5.0, help="measured seconds per run (default 5)")
    ap.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each run (default 1)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma list of {', '.join(SCENARIOS)}")
    ap.add_argument("--servers", default=None,
                    help="azurite,leasehold (default: both; for --soak, leasehold)")
    ap.add_argument("--port-base", type=int, default=10110, help="Azurite on this port, Leasehold on +1")
    ap.add_argument("--leasehold-env", action="append", default=[], metavar="NAME=VALUE",
                    help="extra environment for Leasehold, e.g. LEASEHOLD_WORKERS=3 (repeatable)")
    ap.add_argument("--leasehold-cmd", default=None, metavar="COMMAND",
                    help="serve Leasehold with another command instead of python -m config.serve, e.g. "
                         "'gunicorn -b {host}:{port} -k gthread -w 2 --threads 8 config.wsgi:application'")
    ap.add_argument("--compare-env", action="append", default=[], metavar="NAME=VALUE",
                    help="also run Leasehold with these settings (repeatable), as 'Leasehold-variant' on port "
                         "base+3, in the same alternating rounds; adds L/V ratio columns")
    ap.add_argument("--compare-tree", default=None, metavar="DIR",
                    help="also run Leasehold from another checkout (e.g. a git worktree of an earlier commit, "
                         "with its own .venv) as 'Leasehold-variant', with any --compare-env settings: the "
                         "code before and after a change in the same alternating rounds")
    ap.add_argument("--synchronous", default="FULL", choices=["FULL", "NORMAL", "EXTRA"])
    ap.add_argument("--contention-backoff-ms", type=float, default=0.0,
                    help="pause after a refused contended acquire (default 0: retry at once)")
    ap.add_argument("--max-minutes", type=float, default=40.0, help="hard bound on the whole run")
    ap.add_argument("--soak", action="store_true", help="memory soak mode instead of the scenarios")
    ap.add_argument("--soak-seconds", type=float, default=300.0)
    ap.add_argument("--soak-blobs", type=int, default=10_000)
    ap.add_argument("--soak-clients", type=int, default=16)
    ap.add_argument("--soak-interval", type=float, default=15.0, help="seconds between RSS samples")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, database)")
    ap.add_argument("--hostile-seconds", type=float, default=30.0, help="holders' run under hostile load")
    ap.add_argument("--hostile-slow", type=int, default=50, help="slow connections (admin, API, Azure paths)")
    ap.add_argument("--hostile-uploads", type=int, default=4, help="slow Put Blobs")
    ap.add_argument("--hostile-upload-mb", type=int, default=64, help="MiB per slow Put Blob")
    ap.add_argument("--hostile-exports", type=int, default=2, help="full CSV exports at once (Leasehold)")
    ap.add_argument("--hostile-events", type=int, default=1_000_000, help="history events to export")
    ap.add_argument("--stuck-seconds", type=float, default=40.0, help="how long the write lock is held")
    ap.add_argument("--write-wait", type=float, default=5.0, help="LEASEHOLD_WRITE_WAIT for the run")
    ap.add_argument("--flood-requests", type=int, default=6000, help="requests without valid credentials")
    ap.add_argument("--flood-connections", type=int, default=1000, help="connections they come over, at once")
    ap.add_argument("--flood-kind", default="token", choices=flood.KINDS,
                    help="bad bearer tokens (JSON API), bad SharedKey signatures or none (Azure), or mixed")
    ap.add_argument("--flood-every", type=float, default=0.02, help="seconds between the bystander's renewals")
    args = ap.parse_args()

    for p in (args.port_base, args.port_base + 1, args.port_base + 2):
        if p == 10000 or not 1024 < p < 65535:
            ap.error("ports must be above 1024 and not 10000")
    if args.servers is None:
        args.servers = "leasehold" if args.soak else "azurite,leasehold"
    wanted = [s.strip().lower() for s in args.servers.split(",") if s.strip()]
    if not set(wanted) <= {"azurite", "leasehold"} or not wanted:
        ap.error("--servers takes azurite and/or leasehold")
    deadline = time.monotonic() + args.max_minutes * 60
    extra_env = {"LEASEHOLD_WRITE_WAIT": str(args.write_wait)}
    extra_env.update(item.split("=", 1) for item in args.leasehold_env)

    servers.BENCH.joinpath("var").mkdir(exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=servers.BENCH / "var"))
    started: list[servers.Server] = []

    def cleanup() -> None:
        for s in started:
            s.stop()
        if not args.keep:
            import shutil
            shutil.rmtree(workdir, ignore_errors=True)

    atexit.register(cleanup)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: sys.exit(130))
    # a watchdog: whatever happens, the bench ends
    watchdog = threading.Timer(args.max_minutes * 60 + 120, lambda: os.kill(os.getpid(), signal.SIGTERM))
    watchdog.daemon = True
    watchdog.start()

    all_servers: list[servers.Server] = []
    if "azurite" in wanted:
        all_servers.append(servers.Azurite(args.port_base, workdir))
    if "leasehold" in wanted:
        all_servers.append(servers.Leasehold(args.port_base + 1, workdir, synchronous=args.synchronous,
                                             extra_env=extra_env, command=args.leasehold_cmd))
        if args.compare_env or args.compare_tree:
            variant = dict(item.split("=", 1) for item in args.compare_env)
            all_servers.append(servers.Leasehold(args.port_base + 3, workdir, synchronous=args.synchronous,
                                                 extra_env=extra_env, variant=variant, tree=args.compare_tree))
    for s in all_servers:
        if isinstance(s, servers.Leasehold):
            servers.log("Leasehold: migrating a fresh SQLite database ...")
            s.prepare()
        s.start()
        started.append(s)
        servers.log(f"{s.name} listening on {s.host} (pid {s.pid})")

    desc = []
    for s in all_servers:
        if isinstance(s, servers.Azurite):
            desc.append(f"Azurite {s.version()} (in memory, one Node process)")
        elif isinstance(s, servers.Leasehold):
            desc.append(f"Leasehold ({s.settings_summary()}, SQLite file, synchronous={args.synchronous}, "
                        f"writer lock{', env ' + ' '.join(args.leasehold_env) if args.leasehold_env else ''})")
    print(f"# {' vs '.join(desc)}")
    print(f"# machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"client: one Python process, raw keep-alive sockets in threads")

    if args.soak:
        return soak(args, all_servers, deadline)

    scenarios = [SCENARIOS[n.strip()] for n in args.scenarios.split(",") if n.strip()]
    max_clients = max((s.clients for s in scenarios if s.kind in ("cycle", "holders", "doors")), default=1)
    if any(sc.kind == "doors" for sc in scenarios):
        for s in all_servers:
            if isinstance(s, servers.Leasehold):
                s.issue_api_tokens(max_clients)
    for s in all_servers:
        setup_server(s, [cycle_blob(i) for i in range(max_clients)] + ["hot"])
    names = [s.name for s in all_servers]
    results: dict[tuple[str, str], list[Result]] = {}
    rounds_done = 0
    per_run = args.warmup + args.seconds + 1
    robust: dict[tuple[str, str], list[dict]] = {}
    print(f"# {args.rounds} rounds x {len(scenarios)} scenarios x {len(all_servers)} servers, "
          f"{args.warmup:g}s warm-up + {args.seconds:g}s measured each, servers alternating")
    sys.stdout.flush()
    for rnd in range(args.rounds):
        if len(all_servers) <= 2:
            order = all_servers if rnd % 2 == 0 else list(reversed(all_servers))
        else:  # each server first, middle and last in turn
            order = all_servers[rnd % len(all_servers):] + all_servers[:rnd % len(all_servers)]
        for sc in scenarios:
            for s in order:
                needs = {"hostile": args.hostile_seconds + 10, "stuck": args.stuck_seconds + 10,
                         "flood": 60}.get(sc.kind, per_run)
                if time.monotonic() + needs > deadline:
                    servers.log("time bound reached; reporting what was measured")
                    break
                if sc.kind == "doors":
                    if not isinstance(s, servers.Leasehold):
                        continue  # Azurite has no JSON API
                    for door in DOORS if rnd % 2 == 0 else reversed(DOORS):
                        r = run_one(s, sc, args.warmup, args.seconds, door=door)
                        results.setdefault((f"{s.name} {door}", sc.name), []).append(r)
                        servers.log(f"round {rnd + 1} {sc.name:14} {s.name} {door:5} {r.rps:8.0f} req/s  "
                                    f"renew p50 {r.lat.get('renew', (float('nan'),))[0]:.2f} "
                                    f"p99 {r.lat.get('renew', (0, float('nan')))[1]:.2f} ms  errors {r.errors}  "
                                    f"server CPU {r.server_cpu_ms:.2f} ms/request")
                    continue
                if sc.kind in ROBUSTNESS:
                    if sc.kind == "stuck" and not isinstance(s, servers.Leasehold):
                        continue
                    if sc.kind == "flood":
                        if not isinstance(s, servers.Leasehold) and args.flood_kind in ("token", "mixed"):
                            continue  # Azurite has no JSON API
                        out = flood.flood(s, total=args.flood_requests, connections=args.flood_connections,
                                          kind=args.flood_kind, every=args.flood_every)
                        robust.setdefault((s.name, sc.name), []).append(out)
                        servers.log(f"round {rnd + 1} {sc.name:14} {s.name:9} "
                                    + "  ".join(f"{k} {fmt_num(v)}" for k, v in out.items()))
                        continue
                    out = (hostile.hostile(s, args.hostile_seconds, slow=args.hostile_slow,
                                           uploads=args.hostile_uploads, upload_mib=args.hostile_upload_mb,
                                           export_n=args.hostile_exports, events=args.hostile_events,
                                           repo=servers.REPO)
                           if sc.kind == "hostile" else hostile.stuck(s, args.stuck_seconds, args.write_wait))
                    robust.setdefault((s.name, sc.name), []).append(out)
                    servers.log(f"round {rnd + 1} {sc.name:14} {s.name:9} "
                                + "  ".join(f"{k} {fmt_num(v)}" for k, v in out.items()))
                    continue
                with hostile.cpu_burners(sc.burners):
                    r = run_one(s, sc, args.warmup, args.seconds, args.contention_backoff_ms / 1000)
                results.setdefault((s.name, sc.name), []).append(r)
                extra = f" hand-overs/s {r.handovers:.0f}" if sc.kind == "contention" else ""
                servers.log(f"round {rnd + 1} {sc.name:14} {s.name:9} {r.rps:8.0f} req/s  "
                            f"p50 {r.lat['all'][0]:.2f} p99 {r.lat['all'][1]:.2f} ms  errors {r.errors}"
                            f"{extra}  client CPU {r.client_cpu:.0f}%  server CPU {r.server_cpu:.0f}%")
        rounds_done += 1
    # pair rounds only where both servers have a result
    print(report([sc for sc in scenarios if sc.kind not in ROBUSTNESS and sc.kind != "doors"], results, names,
                 rounds_done))
    print(doors_report([sc for sc in scenarios if sc.kind == "doors"], results,
                       [s.name for s in all_servers if isinstance(s, servers.Leasehold)]))
    print(robust_report([sc for sc in scenarios if sc.kind in ROBUSTNESS], robust, names))
    print("\n# medians over rounds; L/A = median over rounds of (Leasehold / Azurite) in the same round;"
          "\n# for latencies L/A < 1 means Leasehold is faster")
    print(targets(results))
    return 0


def doors_report(scenarios: list[Scenario], results: dict, names: list[str]) -> str:
    """The JSON API against the Azure door of the same server, per server:
    medians over rounds, and the median of each round's api/azure ratio."""
    out = []
    rows = [("requests/s", lambda r: r.rps), ("server CPU ms/request", lambda r: r.server_cpu_ms),
            ("renew p50 ms", lambda r: r.lat.get("renew", (float("nan"),) * 3)[0]),
            ("renew p99 ms", lambda r: r.lat.get("renew", (float("nan"),) * 3)[1]),
            ("all p50 ms", lambda r: r.lat.get("all", (float("nan"),) * 3)[0]),
            ("all p99 ms", lambda r: r.lat.get("all", (float("nan"),) * 3)[1]),
            ("server CPU % of a core", lambda r: r.server_cpu),
            ("client CPU % of a core", lambda r: r.client_cpu)]  # one process: near 100, the client is the bound
    for sc in scenarios:
        out.append(f"\n{sc.title}")
        for name in names:
            azure, api = results.get((f"{name} azure", sc.name), []), results.get((f"{name} api", sc.name), [])
            if not azure or not api:
                continue
            out.append(f"  {name}:{'':18}{'Azure door':>14}{'JSON API':>14}{'api/azure':>11}")
            for label, get in rows:
                ratio = ratio_median([(get(a), get(j)) for a, j in zip(azure, api)])
                out.append(f"    {label:24}{fmt_num(med([get(r) for r in azure])):>14}"
                           f"{fmt_num(med([get(r) for r in api])):>14}{(f'{ratio:.2f}' if ratio == ratio else '-'):>11}")
            out.append(f"    {'req/s by round':24}azure " + " ".join(fmt_num(r.rps) for r in azure)
                       + "; api " + " ".join(fmt_num(r.rps) for r in api))
            out.append(f"    {'errors (all rounds)':24}azure {sum(r.errors for r in azure)}, "
                       f"api {sum(r.errors for r in api)}")
        if len(names) > 1:  # --compare-tree: each door of this tree against the other's
            base, other = names[0], names[1]
            for door in DOORS:
                mine, theirs = results.get((f"{base} {door}", sc.name), []), results.get((f"{other} {door}", sc.name), [])
                if mine and theirs:
                    rps = ratio_median([(get_t.rps, get_m.rps) for get_t, get_m in zip(theirs, mine)])
                    cpu = ratio_median([(t.server_cpu_ms, m.server_cpu_ms) for t, m in zip(theirs, mine)])
                    out.append(f"  {door} door, {base}/{other}: requests/s {rps:.2f}, CPU/request {cpu:.2f}")
    if out:
        out.append("  aim (issue 36): JSON API >= 0.8x the Azure door's requests/s, <= 1.3x its CPU per request")
    return "\n".join(out)


def robust_report(scenarios: list[Scenario], robust: dict, names: list[str]) -> str:
    """Medians over rounds of what the holders, readers and writers saw."""
    out = []
    for sc in scenarios:
        out.append(f"\n{sc.title}")
        keys: list[str] = []  # every run's keys in their order (a flood's answers differ by server)
        for (n, s), runs in robust.items():
            for run in runs if s == sc.name else ():
                keys += [key for key in run if key not in keys]
        width = max(12, *(len(n) + 2 for n in names))
        out.append(f"  {'':36}" + "".join(f"{n:>{width}}" for n in names))
        for key in keys:
            cells = []
            for n in names:
                runs = robust.get((n, sc.name), [])
                values = [r[key] for r in runs if key in r and r[key] == r[key]]
                cells.append(f"{fmt_num(statistics.median(values)) if values else '-':>{width}}")
            out.append(f"  {key:36}" + "".join(cells))
        for n in names:
            runs = robust.get((n, sc.name), [])
            if runs and sc.kind == "hostile":
                out.append(f"  {n}: lost leases by round {[r['lost'] for r in runs]}, renew p99 ms by round "
                           f"{[round(r['renew p99 ms'], 1) for r in runs]}")
    return "\n".join(out)


def targets(results: dict) -> str:
    """The quiet-machine and busy-machine targets against Azurite (requests/s, p50 and p99 ratios),
    checked against this run."""
    a = lambda sc: results.get(("Azurite", sc), [])  # noqa: E731
    lh = lambda sc: results.get(("Leasehold", sc), [])  # noqa: E731
    ratio = lambda sc, get: ratio_median([(get(x), get(y)) for x, y in zip(a(sc), lh(sc))])  # noqa: E731
    rows = []

    def check(label, value, ok, shown):
        if value == value:  # not NaN
            rows.append(f"  {'met' if ok(value) else 'NOT met':8} {label}: {shown(value)}")

    quiet = float("nan")
    if a("cycle-16") and lh("cycle-16"):
        quiet = ratio("cycle-16", lambda r: r.rps)
        check("cycle-16 requests/s L/A >= 1.2 (aim 1.5)", quiet, lambda v: v >= 1.2, lambda v: f"{v:.2f}")
        check("cycle-16 p99 no worse than Azurite's (L/A <= 1)", ratio("cycle-16", lambda r: r.lat["all"][1]),
              lambda v: v <= 1.0, lambda v: f"{v:.2f}")
    if a("cycle-1") and lh("cycle-1"):
        check("one client p50 L/A <= 1.5", ratio("cycle-1", lambda r: r.lat["all"][0]),
              lambda v: v <= 1.5, lambda v: f"{v:.2f}")
        check("one client p99 L/A <= 1", ratio("cycle-1", lambda r: r.lat["all"][1]),
              lambda v: v <= 1.0, lambda v: f"{v:.2f}")
    if lh("contention-16"):
        if a("contention-16"):
            check("contention-16 hand-overs/s L/A >= 1.2", ratio("contention-16", lambda r: r.handovers),
                  lambda v: v >= 1.2, lambda v: f"{v:.2f}")
        check("contention-16 double holders == 0", sum(r.double_holders for r in lh("contention-16")),
              lambda v: v == 0, str)
        check("contention-16 5xx == 0", sum(r.err5xx for r in lh("contention-16")), lambda v: v == 0, str)
    if a("busy-cycle-16") and lh("busy-cycle-16") and quiet == quiet:
        check("busy cycle-16 ratio >= 0.8 x the quiet ratio", ratio("busy-cycle-16", lambda r: r.rps) / quiet,
              lambda v: v >= 0.8, lambda v: f"{v:.2f}")
    return "\n# targets against Azurite (this run)\n" + "\n".join(rows) if rows else ""


def soak(args, all_servers: list[servers.Server], deadline: float) -> int:
    blobs = [f"s-{i:05d}" for i in range(args.soak_blobs)]
    for s in all_servers:
        servers.log(f"{s.name}: creating {len(blobs)} blobs ...")
        setup_server(s, blobs)
    signer = loadgen.Signer(ACCOUNT, KEY)
    for s in all_servers:
        seconds = min(args.soak_seconds, max(10.0, deadline - time.monotonic() - 30))
        print(f"\n## soak: {s.name}, {args.soak_clients} clients cycling acquire -> renew -> release over "
              f"{len(blobs)} distinct blobs for {seconds:.0f}s; RSS in MiB of every server process, "
              f"and the anonymous part of their total (heap: what a leak grows; the rest is mapped "
              f"database pages, which grow with the database)")
        pids = s.pids()
        labels = [f"{p} {'main' if p == s.pid else 'worker'}" for p in pids]
        print(f"  {'t s':>5} {'req/s':>7}  " + "  ".join(f"{lab:>14}" for lab in labels)
              + f"  {'total':>8}  {'anon':>8}")
        recs = [loadgen.Recorder() for _ in range(args.soak_clients)]
        t0 = time.perf_counter()
        stop_at = t0 + seconds
        threads = []
        for i in range(args.soak_clients):
            reqs = [loadgen.LeaseRequests(signer, s.host, f"/{ACCOUNT}/{CONTAINER}/{b}")
                    for b in blobs[i::args.soak_clients]]
            threads.append(threading.Thread(target=loadgen.cycle_worker, daemon=True,
                                            args=("127.0.0.1", s.port, reqs, stop_at, recs[i])))
        for t in threads:
            t.start()
        samples = []
        last_n, last_t = 0, t0
        next_t = t0
        while True:
            now = time.perf_counter()
            n = sum(len(r.records) for r in recs)
            rss = [servers.rss_mib(p) for p in pids]
            anon = sum(servers.anon_mib(p) for p in pids)
            rate = (n - last_n) / (now - last_t) if now > last_t else 0.0
            last_n, last_t = n, now
            samples.append((now - t0, rss, anon))
            print(f"  {now - t0:5.0f} {rate:7.0f}  " + "  ".join(f"{x:14.1f}" for x in rss)
                  + f"  {sum(rss):8.1f}  {anon:8.1f}", flush=True)
            if now >= stop_at:
                break
            next_t += args.soak_interval
            time.sleep(max(0.0, min(next_t, stop_at) - time.perf_counter()))
        for t in threads:
            t.join(timeout=loadgen.SOCKET_TIMEOUT * 4 + 5)
        errors = sum(len(r.failures) for r in recs) + sum(
            1 for r in recs for (_, a, st, _) in r.records if st not in EXPECTED[a])
        total = sum(len(r.records) for r in recs)
        # growth after the first third (every blob has been touched by then; caches are warm)
        base_i = next((i for i, (t, _, _) in enumerate(samples) if t >= max(60.0, seconds / 3)), 0)
        (t_first, first, anon_first), (_, last, anon_last) = samples[base_i], samples[-1]
        print(f"  requests {total:,}, errors {errors}; RSS growth from t={t_first:.0f}s to the end: "
              + ", ".join(f"{lab} {b - a:+.1f} MiB" for lab, a, b in zip(labels, first, last))
              + f"; total {sum(last) - sum(first):+.1f} MiB, of it anonymous {anon_last - anon_first:+.1f} MiB")
        if isinstance(s, servers.Leasehold):
            print(f"  history events in the database: {s.history_count():,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
