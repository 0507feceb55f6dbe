#!/usr/bin/env python3
"""Runs `faultline analyze` on every case of the real MariaDB fault traces and prints a
Markdown table of verdict, τ, Ω and top syscalls against each case's truth.json.

Usage: evaluate.py [--bin target/release/faultline] [--cases DIR] [--mode continuous|trigger]
  continuous: the engine's own detection (first anomaly after the fault start counts;
              any non-`none` verdict before it, or in a control, is a false alarm)
  trigger:    an external alarm `--trigger-after` seconds after the fault start (the paper's mode)
Exit status 0; the table is the result (this is an evaluation, not a test).
"""
import argparse
import json
import os
import subprocess
import sys
import time


def run_case(binary, case_dir, mode, trigger_after, extra):
    truth = json.load(open(os.path.join(case_dir, "truth.json")))
    trace = os.path.join(case_dir, "trace.txt.zst")
    split = truth.get("fault_start_ns") or truth.get("nominal_split_ns")
    cmd = [binary, "analyze", "--input", f"perf:{trace}", "--format", "json", "--no-progress"] + extra
    if mode == "trigger":
        cmd += ["--trigger-at", str(int(split + trigger_after * 1e9))]
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.time() - t0
    if out.returncode != 0:
        return truth, None, elapsed, out.stderr.strip()
    analyses = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return truth, analyses, elapsed, None


def pick(analysis, truth, mode):
    """The report that answers the case, and the false alarms before the fault."""
    split = truth.get("fault_start_ns") or truth.get("nominal_split_ns")
    if mode == "trigger":
        return analysis, [], None
    early = [a for a in analysis["anomalies"] if a["detected_at_ns"] < split]
    late = [a for a in analysis["anomalies"] if a["detected_at_ns"] >= split]
    if truth["class"] == "none":
        return None, analysis["anomalies"], None
    if not late:
        return None, early, None
    first = late[0]
    return first["diagnosis"], early, (first["detected_at_ns"] - split) / 1e9


def fmt_top(lst, n=3):
    return ", ".join(f"{r['syscall']} {r['increase_ratio'] * 100:+.0f}%" for r in lst[:n]) or "—"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/faultline")
    ap.add_argument("--cases", default=os.path.join(os.path.dirname(__file__), "../../../shared/traces/perf-faults"))
    ap.add_argument("--mode", choices=["continuous", "trigger"], default="continuous")
    ap.add_argument("--trigger-after", type=float, default=20.0)
    ap.add_argument("extra", nargs="*", help="extra arguments for analyze (e.g. --set alpha_seconds=1)")
    args = ap.parse_args()
    cases = sorted(d for d in os.listdir(args.cases) if os.path.isdir(os.path.join(args.cases, d)))
    print(f"| case | truth | subsystem | verdict | τ | Ω (s) | threads dir/aff/total | top by time | top by frequency | report subsystem | detect delay (s) | false alarms | analyze (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    right = total = controls_ok = controls = 0
    for c in cases:
        truth, analyses, elapsed, err = run_case(args.bin, os.path.join(args.cases, c), args.mode, args.trigger_after, args.extra)
        if err:
            print(f"| {c} | {truth['class']} | {truth['subsystem']} | ERROR: {err[:80]} |")
            continue
        a = analyses[0]
        report, early, delay = pick(a, truth, args.mode)
        verdict = report["verdict"] if report else "none"
        if truth["class"] == "none":
            controls += 1
            controls_ok += verdict == "none" and not early
        else:
            total += 1
            right += verdict == truth["class"]
        r = report or a
        th = r["threads"]
        print(
            f"| {c} | {truth['class']} | {truth['subsystem']} | **{verdict}** | {r['impact_factor']:.2f} | {r['onset_dispersion_seconds']:.2f} | "
            f"{th['directly_affected']}/{th['affected']}/{th['total']} | {fmt_top(r['top_syscalls_by_time'])} | {fmt_top(r['top_syscalls_by_frequency'])} | "
            f"{r['subsystem'] if report else '—'} | {'' if delay is None else f'{delay:.1f}'} | {len(early)} | {elapsed:.1f} |"
        )
    print()
    print(f"fault cases right: {right}/{total}; controls clean: {controls_ok}/{controls} (mode: {args.mode})")


if __name__ == "__main__":
    sys.exit(main())
