"""Where the renewals' time went inside the server: reads the
logs a server writes with ``LEASEHOLD_TIMING_LOG=<prefix>`` (leases/operations/timing.py)
and prints, for the renewals of bench/hostile.py's holders, the median, p99
and max of each step, and the steps of the slowest renewals; then the event
loop's lateness and the WAL checkpointer's holds of the writer lock.

    .venv/bin/python bench/timing_report.py PREFIX [--slowest 8]
"""

from __future__ import annotations

import argparse
import glob
import json

STEPS = [("called", "body", "body received"), ("body", "submitted", "to lane"),
         ("submitted", "thread", "lane queue + GIL"), ("thread", "lock_wait", "Django before write"),
         ("lock_wait", "begun", "writer lock"), ("begun", "committing", "SQL"),
         ("committing", "committed", "COMMIT"), ("committed", "synced", "fsync"),
         ("synced", "returned", "Django after"), ("returned", "resumed", "back to loop"),
         ("resumed", "sent", "send"), ("called", "sent", "TOTAL")]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))] if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prefix")
    ap.add_argument("--slowest", type=int, default=8)
    ap.add_argument("--match", default="/holder-", help="renewals on paths containing this")
    args = ap.parse_args()
    renewals, late, holds, others = [], [], [], []
    for name in glob.glob(args.prefix + ".*"):
        with open(name) as fh:
            for line in fh:
                rec = json.loads(line)
                if "loop_late" in rec:
                    late.append(rec)
                elif "checkpoint_held" in rec:
                    holds.append(rec)
                elif rec.get("lane") in ("lease", "lease-batch", "lease-inline") and args.match in rec["path"]:
                    renewals.append(rec)  # the holders' lease requests: renewals (and one acquire, one release)
                else:
                    others.append(rec)
    renewals = [r for r in renewals if "sent" in r]
    print(f"{len(renewals)} lease requests of the holders (nearly all renewals)")
    print(f"{'step':24} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for a, b, label in STEPS:
        d = [(r[b] - r[a]) * 1e3 for r in renewals if a in r and b in r]
        if d:
            print(f"{label:24} {pct(d, .5):8.2f} {pct(d, .99):8.2f} {max(d):8.2f}")
    print("slowest:")
    for r in sorted(renewals, key=lambda r: r["sent"] - r["called"], reverse=True)[:args.slowest]:
        print("  " + ", ".join(f"{label} {(r[b] - r[a]) * 1e3:.1f}" for a, b, label in STEPS
                               if a in r and b in r and (r[b] - r[a]) >= 0.001 or label == "TOTAL"))
        # what else was in the lanes and the loop around then
        t0, t1 = r["called"], r["sent"]
        lates = [x["loop_late"] * 1e3 for x in late if t0 <= x["at"] <= t1 + 0.05]
        held = [(x["checkpoint_held"] * 1e3) for x in holds if x["at"] <= t1 and x["at"] + x["checkpoint_held"] >= t0]
        if lates or held:
            print(f"    loop late {', '.join(f'{v:.0f}' for v in lates)} ms; checkpointer held {held} ms")
    if late:
        print(f"event loop late >= 5 ms: {len(late)} times, p50 {pct([x['loop_late'] for x in late], .5) * 1e3:.1f} "
              f"max {max(x['loop_late'] for x in late) * 1e3:.1f} ms")
    if holds:
        h = [x["checkpoint_held"] * 1e3 for x in holds]
        print(f"checkpointer held the writer lock {len(h)} times: p50 {pct(h, .5):.1f} p99 {pct(h, .99):.1f} "
              f"max {max(h):.1f} ms, frames p50 {pct([x['frames'] for x in holds], .5)} max "
              f"{max(x['frames'] for x in holds)}")
    lanes: dict = {}
    for r in others:
        if "begun" in r and "committed" in r:
            lanes.setdefault(r.get("lane"), []).append((r["committed"] - r["begun"]) * 1e3)
    for lane, held in lanes.items():
        print(f"lane {lane}: {len(held)} write transactions held the lock p50 {pct(held, .5):.1f} "
              f"p99 {pct(held, .99):.1f} max {max(held):.1f} ms (first transaction of each request)")


if __name__ == "__main__":
    main()
