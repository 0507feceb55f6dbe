#!/usr/bin/env python3
"""Per case: how the server's threads left their CPU, 30 s before and after the fault.

The engine's CPU-quota rule (`ThrottleTest` in wasm-guest/src/cpu_time.rs) reads the
scheduler's `sched:sched_switch` records the perf sources add to the syscall trace. A switch
away with `prev_state=R` (still runnable) and the idle task next (`next_pid=0`) happens only
when the thread's group used up its CPU quota: the scheduler preempts a runnable thread only
for another task otherwise. This scan counts every switch away by state (R = runnable, S =
sleeping, D = uninterruptible, ...) and by what ran next (idle or another task), so the rule's
premise, no throttled switch without a cap, can be checked on every recording. See
wasm-guest/EVALUATION.md, session 38.

    python3 integration-tests/realworld/switch_kinds.py /var/tmp/faultline-rw/cases/*/

For each case directory (a `truth.json` and its `perf script` trace, as `run.py` records them).
"""
import collections
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

SPAN_S = 30.0
SWITCH = re.compile(
    r"\s(\d+)\.(\d+):\s+sched:sched_switch: .*? prev_state=(\S+) ==> next_comm=.*? next_pid=(\d+)"
)


def scan(case):
    """(case name, fault, {"before"|"after": Counter((state, "idle"|"task"))})."""
    with open(os.path.join(case, "truth.json")) as f:
        truth = json.load(f)
    split = truth.get("fault_start_ns") or truth["nominal_split_ns"]
    trace = os.path.join(case, truth["trace_file"])
    unpack = ["zstd", "-dc", trace] if trace.endswith(".zst") else ["cat", trace]
    counts = {"before": collections.Counter(), "after": collections.Counter()}
    with subprocess.Popen(unpack, stdout=subprocess.PIPE, text=True, errors="replace") as p:
        for line in p.stdout:
            m = SWITCH.search(line)
            if not m:
                continue
            ts = int(m.group(1)) * 10**9 + int(m.group(2).ljust(9, "0")[:9])
            if abs(ts - split) > SPAN_S * 1e9:
                continue
            state = m.group(3)[:1]
            nxt = "idle" if m.group(4) == "0" else "task"
            counts["before" if ts < split else "after"][(state, nxt)] += 1
    name = os.path.basename(os.path.normpath(case))
    return name, truth.get("fault", "?"), counts


def main(cases):
    if not cases:
        sys.exit(__doc__)
    print("| case | fault | span | switches away | runnable → idle (throttled) | runnable → task | blocked → idle |")
    print("|---|---|---|---:|---:|---:|---:|")
    with ProcessPoolExecutor() as pool:
        for name, fault, counts in pool.map(scan, cases):
            for span in ("before", "after"):
                c = counts[span]
                total = sum(c.values())
                share = lambda n: f"{n} ({n / total:.3f})" if total else "0"
                throttled = c[("R", "idle")]
                preempted = c[("R", "task")]
                blocked_idle = sum(v for (st, nxt), v in c.items() if st != "R" and nxt == "idle")
                print(f"| {name} | {fault} | {span} | {total} | {share(throttled)} | {share(preempted)} | {share(blocked_idle)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
