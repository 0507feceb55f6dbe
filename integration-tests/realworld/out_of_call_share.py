#!/usr/bin/env python3
"""How many server threads ran outside any system call most of the time, before and after the fault.

A thread outside every call is running user code or waiting for a CPU (runnable, throttled, or
page-faulting); syscall timing alone cannot tell which. This scan measures how often that happens
per recorded case, to judge whether the out-of-call share can separate a runaway loop in the
service (its own threads burn the CPU) from a CPU or memory cap (the threads wait for it). See
wasm-guest/EVALUATION.md, "Out-of-call share".

    python3 integration-tests/realworld/out_of_call_share.py /var/tmp/faultline-rw/cases/*/

For each case directory (a `truth.json` and its `perf script` trace, as `run.py` records them) it
prints, for the SPAN seconds before the fault and the SPAN seconds after it: threads active
(>= 10 calls, or mostly outside calls), and how many of them spent over 50 %, 80 % and 95 % of
the span outside calls.
"""
import collections
import json
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

SPAN = 10.0
SHARES = (0.5, 0.8, 0.95)
MIN_CALLS = 10
COMM = {"postgres": "postgres", "mariadb": "mariadbd", "apache": "apache2"}
MARK = "raw_syscalls:sys_"


def parse(line):
    """(tid, seconds, is_enter) of a `perf script` syscall line, or None."""
    at = line.find(MARK)
    if at < 0:
        return None
    head = line[:at].split()
    try:
        tid = int(head[1].split("/")[-1])
        ts = float(head[-1].rstrip(":"))
    except (IndexError, ValueError):
        return None
    return head[0], tid, ts, line.startswith("enter", at + len(MARK))


def scan(case):
    with open(os.path.join(case, "truth.json")) as f:
        truth = json.load(f)
    fault = (truth.get("fault_start_ns") or truth["nominal_split_ns"]) / 1e9
    spans = ((fault - SPAN, fault), (fault, fault + SPAN))
    comm = COMM.get(truth.get("app"), "")[:6]
    trace = os.path.join(case, truth.get("trace_file", "trace.txt.zst"))
    outside = collections.defaultdict(lambda: [0.0, 0.0])
    calls = collections.defaultdict(lambda: [0, 0])
    last_exit = {}

    def add_outside(tid, start, end):
        for k, (lo, hi) in enumerate(spans):
            outside[tid][k] += max(0.0, min(end, hi) - max(start, lo))

    with subprocess.Popen(["zstdcat", trace], stdout=subprocess.PIPE, text=True, bufsize=1 << 20) as p:
        for line in p.stdout:
            rec = parse(line)
            if rec is None:
                continue
            name, tid, ts, enter = rec
            if not name.startswith(comm):
                continue
            if ts > fault + SPAN + 1:
                break
            if enter:
                if tid in last_exit:
                    add_outside(tid, last_exit.pop(tid), ts)
                for k, (lo, hi) in enumerate(spans):
                    calls[tid][k] += lo <= ts < hi
            else:
                last_exit[tid] = ts
        p.kill()
    # A thread still outside calls at the end of the scan stays there to the span's end.
    for tid, ts in last_exit.items():
        add_outside(tid, ts, fault + SPAN)
    rows = []
    for k in (0, 1):
        active = [t for t in calls if calls[t][k] >= MIN_CALLS or outside[t][k] > SHARES[0] * SPAN]
        rows.append([len(active)] + [sum(outside[t][k] > s * SPAN for t in active) for s in SHARES])
    return truth.get("class", "?"), rows


def main(cases):
    with ProcessPoolExecutor(2) as pool:
        for case, (cls, (before, after)) in zip(cases, pool.map(scan, cases)):
            print(f"{case:60s} {cls:9s} before {before}  after {after}  (active, >50 %, >80 %, >95 %)", flush=True)


if __name__ == "__main__":
    main([c.rstrip("/") for c in sys.argv[1:] if os.path.exists(os.path.join(c, "truth.json"))])
