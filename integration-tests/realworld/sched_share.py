#!/usr/bin/env python3
"""Per server thread: CPU share and how it left the CPU, before and after the fault.

The engine's CPU-burner rule (wasm-guest/src/cpu_time.rs) reads the scheduler's records the
perf sources add to the syscall trace: `sched:sched_stat_runtime` (time on a CPU) and
`sched:sched_switch` (`prev_state`: R/R+ = preempted, still runnable; anything else = blocked).
This scan prints, per recorded case, the threads whose share of one CPU rose after the fault
(>= MIN_SHARE and >= RISE x their lowest 3-s share over the 15 s before), with their
preempted share of switches away, so the rule's thresholds can be checked against real
recordings. See wasm-guest/EVALUATION.md, "Spinners".

    python3 integration-tests/realworld/sched_share.py /var/tmp/faultline-rw/cases/*/

For each case directory (a `truth.json` and its `perf script` trace, as `run.py` records them).
"""
import collections
import json
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

AFTER = 3.0          # the engine's persistence_seconds
SPANS_BEFORE = 5     # the engine's BURNER_BEFORE
MIN_SHARE = 0.03
RISE = 3.0


def records(trace):
    """(tid, seconds, kind, value) of the scheduler lines: kind "run" with the runtime in
    seconds, or "switch" with True when the thread was preempted."""
    unpack = ["zstd", "-dc", trace] if trace.endswith(".zst") else ["cat", trace]
    with subprocess.Popen(unpack, stdout=subprocess.PIPE, text=True, errors="replace") as p:
        for line in p.stdout:
            at = line.find(" sched:sched_")
            if at < 0:
                continue
            # perf pads the event column: `<time>:       sched:sched_switch: …`.
            head, rest = line[:at], line[at + len(" sched:sched_"):]
            parts = head.split()
            try:
                tid = int(parts[1].split("/")[-1])
                ts = float(parts[-1].rstrip(":"))
            except (IndexError, ValueError):
                continue
            if rest.startswith("stat_runtime:"):
                at = rest.rfind(" runtime=")
                try:
                    yield tid, ts, "run", int(rest[at + 9:].split()[0]) / 1e9
                except (IndexError, ValueError):
                    continue
            elif rest.startswith("switch:"):
                tail = rest[rest.find(" prev_prio="):]
                at = tail.find(" prev_state=")
                if at < 0:
                    continue
                state = tail[at + 12:].split()[0] if tail[at + 12:].split() else ""
                yield tid, ts, "switch", state in ("R", "R+")


def scan(case_dir):
    truth = json.load(open(os.path.join(case_dir, "truth.json")))
    fault = (truth.get("fault_start_ns") or truth.get("nominal_split_ns")) / 1e9
    trace = os.path.join(case_dir, truth.get("trace_file", "trace.txt.zst"))
    run = collections.defaultdict(float)        # (tid, span index) -> seconds on a CPU
    sw = collections.defaultdict(lambda: [0, 0])  # tid -> [preempted, blocked] after
    switches = 0
    lo = fault - AFTER * SPANS_BEFORE
    for tid, ts, kind, v in records(trace):
        if ts < lo or ts >= fault + AFTER:
            continue
        span = int((ts - fault) // AFTER)       # -5 … -1 before, 0 after
        if kind == "run":
            run[(tid, span)] += v
        else:
            switches += 1
            if span == 0:
                sw[tid][0 if v else 1] += 1
    rows = []
    for tid in {t for t, _ in run} | set(sw):
        after = run[(tid, 0)] / AFTER
        before = min(run[(tid, -i)] / AFTER for i in range(1, SPANS_BEFORE + 1))
        if after >= MIN_SHARE and after >= RISE * before:
            p, b = sw[tid]
            rows.append((tid, before, after, p, b))
    rows.sort(key=lambda r: -r[2])
    return os.path.basename(case_dir.rstrip("/")), truth.get("class"), switches, rows


def main(dirs):
    print("| case | class | switch records in span | risen threads: tid share before → after, preempted/blocked after |")
    print("|---|---|---:|---|")
    with ProcessPoolExecutor(max_workers=2) as ex:
        for name, cls, switches, rows in ex.map(scan, dirs):
            cells = "; ".join(
                f"{tid} {b:.2f}→{a:.2f} {p}/{bl} ({p / (p + bl):.2f})" if p + bl else f"{tid} {b:.2f}→{a:.2f} –"
                for tid, b, a, p, bl in rows) or "none"
            print(f"| {name} | {cls} | {switches} | {cells} |")


if __name__ == "__main__":
    main([d for d in sys.argv[1:] if os.path.exists(os.path.join(d, "truth.json"))])
