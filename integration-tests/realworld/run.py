#!/usr/bin/env python3
"""Real-world verification: real servers, real kernel syscall traces, injected faults.

For each application (PostgreSQL/pgbench, MariaDB/sysbench, Apache httpd/HTTP client) and each
fault (external: CPU cap, CPU hog, memory cap, disk writer, freeze, packet loss; internal: app-specific
bugs; fault-free controls, and idle cases where the traffic stops) it runs the server in a sandbox (network namespace + cgroup on
CPU 1, client on CPU 0), records `perf record` raw_syscalls, runs the live plugin beside it,
injects the fault, then diagnoses the trace offline and prints the accuracy table.

  run.py                      the full matrix; writes integration-tests/RESULTS.md
  run.py --smoke              a few PostgreSQL cases (CI); exits non-zero when a check fails
  run.py --apps postgres --faults control,cpu_cap
  run.py --evaluate-only DIR  re-diagnose recorded cases (e.g. after an engine change)
  run.py --evaluate-only DIR --set min_persistence=0.5   ... with other engine parameters

Needs root, perf, and the packages scripts/setup.sh installs.
"""
import argparse
import datetime
import fcntl
import json
import os
import platform
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from rw import diagnose, latency, otlp_case  # noqa: E402
from rw.apps import APPS  # noqa: E402
from rw.case import Timing, run_case  # noqa: E402
from rw.env import Env, require, sh  # noqa: E402
from rw.faults import EXTERNAL, IDLE, CpuCap, NoFault  # noqa: E402
from rw.live import LivePlugin  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SMOKE = {"postgres": ["control", "cpu_cap", "lock_table", "freeze"]}
# CI's CPU cap is below the server's demand (about 3 % of a CPU under the standard load), so
# every thread stalls: a clear-cut environment fault. The full matrix's 5 % cap is marginal
# (p50 ×2, throughput unchanged); its outcomes vary from run to run and are what
# RESULTS.md measures, not what a CI gate should hinge on (one of 8 recordings reads
# internal: CI of 2026-11-23).
SMOKE_FAULTS = {"cpu_cap": lambda: CpuCap(fraction=0.02)}


def fault_overrides(args):
    """Fault factories the command line replaces: the smoke set's clear-cut cap, or the
    cap `--cpu-cap` asks for (a cap that bites: the apps' marginal 5 % may not)."""
    out = dict(SMOKE_FAULTS) if args.smoke else {}
    if args.cpu_cap is not None:
        if not args.cpu_cap > 0:
            sys.exit(f"--cpu-cap must be a fraction of one CPU above 0, not {args.cpu_cap}")
        frac = args.cpu_cap
        out["cpu_cap"] = lambda: CpuCap(fraction=frac)
    return out or None


def plan(instances, faults, overrides=None):
    """[(app, fault name, fault factory)] in run order: a control first and last, the idle
    cases (traffic stops; judged as controls) before the last; `overrides` replaces factories
    by fault name."""
    out = []
    for name, app in instances.items():
        internal = app.internal_faults()
        names = ["control"] + list(EXTERNAL) + list(internal) + list(IDLE) + ["control2"]
        for f in names:
            if faults and f not in faults:
                continue
            if f in app.unsupported:
                print(f"skip {name}_{f}: {app.unsupported[f]}")
                continue
            factory = NoFault if f.startswith("control") else EXTERNAL.get(f) or IDLE.get(f) or internal[f]
            factory = (overrides or {}).get(f, factory)
            out.append((app, f, factory))
    return out


def machine():
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} CPUs ({cpu}), kernel {platform.release()}"


def write_results(path, rows, truths, args, versions, otlp):
    live = [t for t in truths if "live" in t]
    now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    if args.evaluate_only:
        stamps = [os.path.getmtime(os.path.join(args.evaluate_only, t["case_id"], "truth.json")) for t in truths]
        recorded = datetime.datetime.fromtimestamp(min(stamps), datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC') \
            if stamps else "?"
        sets = "".join(f" --set {kv}" for kv in args.set)
        run_line = (f"Diagnosed: {now} with `run.py --evaluate-only {args.evaluate_only}{sets}` (this engine) from cases "
                    f"recorded from {recorded} on (OTLP replayed again); the live-plugin section is from the recording, i.e. the "
                    f"engine of that time.")
    else:
        run_line = (f"Run: {now} with `python3 integration-tests/realworld/run.py` (normal phase {args.normal:.0f} s, "
                    f"fault phase {args.fault:.0f} s).")
    lines = [
        "# Real-world verification results",
        "",
        run_line,
        f"Machine: {machine()}. Versions: {'; '.join(versions)}.",
        "",
        "A case counts when the fault visibly hurt the client (p99 ×2, throughput −20 %, or hung requests): "
        "column *hurt*; the others are listed but excluded from the accuracy. Traces are perf `raw_syscalls` "
        "enter/exit records of every server thread with the scheduler's `sched_stat_runtime` and `sched_switch` "
        "records, decoded with `perf script` (not committed: they are large).",
        "",
    ]
    for mode in ("continuous", "on_demand", "alarm_only", "calibrated", "early_alarm"):
        if any(r["mode"] == mode for r in rows):
            lines += [f"## {mode}", "", diagnose.table(rows, mode), ""]
    if live:
        lines += ["## Live plugin (`faultline run`, perf source on the server's pids, engine in wasmtime)", "",
                  "| case | truth | continuous verdict | delay (s) | false alarms before fault | on-demand (alarm +10 s) | τ | top by time |",
                  "|---|---|---|---|---|---|---|---|"]
        for t in live:
            lv, od = t["live"], t["live"].get("on_demand") or {}
            lines.append(f"| {t['case_id']} | {t['class']} | {lv['continuous_verdict']} | {lv['continuous_delay_s'] or ''} | "
                         f"{lv['false_alarms_before_fault']} | {od.get('verdict', od.get('error', '—'))} | "
                         f"{od.get('impact_factor', '')} | {', '.join(od.get('top_syscalls_by_time', []) or [])} |")
        lines.append("")
        signs = [t for t in live if (t["live"].get("vital_signs") or {}).get("reports_with_counters")]
        if signs:
            lines += ["### Vital signs (hardware counters the live perf source samples per thread)", "",
                      "A thread burning ≥ 1 cycle per ns with < 0.5 cache misses per thousand instructions and "
                      "almost no syscalls is a busy loop (ChopStix Rule #1); a runaway loop makes no syscalls, "
                      "so only the counters show it. The CPU burner column is the on-demand report's "
                      "scheduler-based burners, for comparison.", "",
                      "| case | truth | cadence reports with counters | busy-loop reports before fault | "
                      "after fault | first after fault: delay (s), tids | on-demand CPU burners |",
                      "|---|---|---|---|---|---|---|"]
            for t in signs:
                v, od = t["live"]["vital_signs"], t["live"].get("on_demand") or {}
                first = (f"{v['busy_loop_delay_s']}, {v['busy_loop_tids']}" if v["busy_loop_delay_s"] is not None else "—")
                lines.append(f"| {t['case_id']} | {t['class']} | {v['reports_with_counters']} | "
                             f"{v['busy_loop_reports_before_fault']} | {v['busy_loop_reports_after_fault']} | {first} | "
                             f"{od.get('cpu_burners', '—')} |")
            lines.append("")
    if otlp:
        lines += ["## One case through OTLP (OpenTelemetry Python SDK, gRPC, engine in wasmtime)", "",
                  f"`{otlp['case']}`: {otlp['sent']} records sent (each perf line as one log record with "
                  f"`syscall.phase`), {otlp['received']:.0f} received, {otlp['rejected']:.0f} rejected as partial success "
                  f"(perf's `NR -1` exit records), {otlp['dropped']:.0f} dropped, in {otlp['send_seconds']} s; "
                  f"{otlp.get('segment_readings', 0)} TCP segment readings as OTLP gauges (node_exporter's names), "
                  f"{otlp.get('segment_records', 0):.0f} segment records taken. "
                  f"On-demand verdict through OTLP: **{otlp['verdict']}** (τ {otlp['impact_factor']}, "
                  f"{otlp.get('subsystem')}, decided by {otlp.get('decided_by')}); offline `analyze` of the "
                  f"same trace: **{otlp['offline_verdict']}** (τ {otlp['offline_impact_factor']}).", ""]
    unhealthy = latency.unhealthy_normal_phases(truths)
    lines += ["## Client-side impact per case", ""]
    if unhealthy:
        lines += ["Normal phase already slow (p99 over 5× the median normal-phase p99 of the same application in this "
                  "run; counted as recorded, not excluded): "
                  + ", ".join(f"`{c}` ({r}×)" for c, r in sorted(unhealthy.items())) + ".", ""]
    lines += ["| case | p50 ms before → during | p99 ms before → during | req/s before → during | hung | events | perf lost | normal phase |",
              "|---|---|---|---|---|---|---|---|"]
    for t in truths:
        a = t["anomaly"]
        health = f"slow ({unhealthy[t['case_id']]}×)" if t["case_id"] in unhealthy else "ok"
        if a.get("load_stopped"):
            health += "; load stopped at the fault start (idle case)"
        lines.append(f"| {t['case_id']} | {a['baseline_p50_ms']} → {a['fault_p50_ms']} | {a['baseline_p99_ms']} → {a['fault_p99_ms']} | "
                     f"{a['baseline_throughput']} → {a['fault_throughput']} | {a.get('hung_requests', '—')} | {t['events']} | "
                     f"{t['perf_lost'].get('lost_records', 0)} | {health} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--apps", default=",".join(APPS))
    ap.add_argument("--faults", default="", help="comma-separated fault names (default: all)")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default="/var/tmp/faultline-rw/cases")
    ap.add_argument("--root", default="/var/tmp/faultline-rw/apps", help="persistent server data")
    ap.add_argument("--bin", default=os.path.join(REPO, "target/release/faultline"))
    ap.add_argument("--normal", type=float, default=45.0)
    ap.add_argument("--fault", type=float, default=45.0)
    ap.add_argument("--no-live", action="store_true", help="skip the live plugin")
    ap.add_argument("--cpu-cap", type=float, default=None, metavar="FRACTION",
                    help="the cpu_cap case's quota as a fraction of one CPU (default: each app's "
                         "marginal `cpu_cap_fraction`; --smoke: 0.02)")
    ap.add_argument("--evaluate-only", metavar="DIR")
    ap.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                    help="an engine parameter for the offline diagnoses (`analyze --set`), repeatable: "
                         "re-diagnose recorded cases with other parameters, e.g. --set min_persistence=0.5")
    ap.add_argument("--otlp-case", default=None, help="case id to replay through OTLP (default: postgres_cpu_cap when recorded)")
    ap.add_argument("--results", default=None, help="Markdown output (default: integration-tests/RESULTS.md for the full run)")
    args = ap.parse_args()

    if args.smoke:
        apps, faults = list(SMOKE), set(SMOKE["postgres"])
        args.normal, args.fault = min(args.normal, 35.0), min(args.fault, 25.0)
    else:
        apps = [a for a in args.apps.split(",") if a]
        faults = {f for f in args.faults.split(",") if f}
    unknown = [a for a in apps if a not in APPS]
    if unknown:
        sys.exit(f"unknown app(s) {unknown}; known: {list(APPS)}")
    if not os.path.exists(args.bin):
        sys.exit(f"{args.bin} missing: cargo build --release -p faultline")
    targets_of = lambda truth: [APPS[truth["app"]].comm] if truth.get("app") in APPS else []  # noqa: E731

    truths = []
    cases_root = args.evaluate_only or args.out
    if not args.evaluate_only:
        require("perf", "ip", "nft", "stress-ng", "taskset", "zstd")
        os.makedirs(args.out, exist_ok=True)
        # One sandbox per machine (fixed namespace and cgroup names): runs queue up here.
        lock = open("/var/tmp/faultline-rw.lock", "w")
        print("waiting for the sandbox lock …", flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
        env = Env(os.path.join(args.out, ".env"))
        env.setup()
        try:
            instances = {name: APPS[name](args.root) for name in apps}
            prepared = set()
            for app, fname, factory in plan(instances, faults, fault_overrides(args)):
                name = app.name
                if name not in prepared:
                    prepared.add(name)
                    require(*app.tools)
                    print(f"== preparing {name}", flush=True)
                    app.prepare(env)
                out_dir = os.path.join(args.out, f"{name}_{fname}")
                live = None if args.no_live else LivePlugin(args.bin, out_dir, name, app.comm, env.client_cpu)
                truths.append(run_case(env, app, fname, factory(), Timing(normal=args.normal, fault=args.fault), out_dir, live))
        finally:
            env.teardown()
    else:
        for d in sorted(os.listdir(cases_root)):
            p = os.path.join(cases_root, d, "truth.json")
            if os.path.exists(p):
                truths.append(json.load(open(p)))

    modes = ("continuous", "on_demand") if args.smoke else ("continuous", "on_demand", "alarm_only", "early_alarm")
    extra = [a for kv in args.set for a in ("--set", kv)]
    rows = diagnose.evaluate(args.bin, cases_root, modes=modes, calibrated=not args.smoke, targets_of=targets_of,
                             extra=extra)
    otlp = None
    if args.otlp_case is None and any(t["case_id"] == "postgres_cpu_cap" for t in truths):
        args.otlp_case = "postgres_cpu_cap"
    if args.otlp_case:
        d = os.path.join(cases_root, args.otlp_case)
        truth = json.load(open(os.path.join(d, "truth.json")))
        print(f"== {args.otlp_case} through OTLP (OpenTelemetry Python SDK → faultline run)", flush=True)
        otlp = otlp_case.run(args.bin, d, truth) | {"case": args.otlp_case}
        offline = next(r for r in rows if r["case"] == args.otlp_case and r["mode"] == "on_demand")
        otlp["offline_verdict"] = offline["verdict"]
        otlp["offline_impact_factor"] = offline.get("impact_factor")
        print(f"   OTLP: {otlp}")
    with open(os.path.join(cases_root, "results.json"), "w") as f:
        json.dump({"rows": rows, "live": {t["case_id"]: t.get("live") for t in truths}, "otlp": otlp}, f, indent=1)
    for mode in ("continuous", "on_demand", "alarm_only", "calibrated", "early_alarm"):
        if any(r["mode"] == mode for r in rows):
            print(f"\n## {mode}\n\n{diagnose.table(rows, mode)}")
    versions = sorted({t.get("app_version", "") for t in truths})
    versions.append(sh(args.bin, "--version", check=False, quiet=True).stdout.strip())
    versions.append(sh("perf", "--version", check=False, quiet=True).stdout.strip())
    results = args.results or (None if args.smoke else os.path.join(REPO, "integration-tests", "RESULTS.md"))
    if results:
        write_results(results, rows, truths, args, versions, otlp)
        print(f"\nwrote {results}")
    if args.smoke:
        return smoke_checks(rows, truths, otlp)
    return 0


def smoke_checks(rows, truths, otlp):
    """CI's checks: every case recorded events and was analysed; the control stays `none`
    (offline and live) and, where the live perf source sampled hardware counters, names no
    busy loop; the CPU cap and the freeze are `external` (offline, on demand); the live
    plugin calls the frozen server external while it is frozen.

    A control is only fault-free when its own client saw no slowdown: on a shared host a
    neighbour's load can hurt it as much as an injected fault (measured in a CI pre-check:
    the control's client p99 9 → 21 ms, with nothing else of ours running). Such a
    control is reported and its checks skipped, the mirror of the rule that a fault case
    only counts when the fault hurt the client. So is a control whose client was slowed
    before the alarm (p99 at least twice the p99 after it): the baselines were learned
    from the disturbed phase, and the service's return to normal reads as a change
    (measured in a CI pre-check: p99 16.9 -> 5.8 ms, the requests' calls +400 to +7,000 %
    more frequent after the alarm than in the slowed phase)."""
    failures = []

    def slowed_before(a):
        bp, fp = a.get("baseline_p99_ms"), a.get("fault_p99_ms")
        return bool(bp and fp and bp >= 2.0 * fp)

    disturbed = {t["case_id"] for t in truths
                 if t["class"] == "none" and (t["anomaly"]["hurt"] or slowed_before(t["anomaly"]))}
    for c in sorted(disturbed):
        a = next(t["anomaly"] for t in truths if t["case_id"] == c)
        when = "before the alarm" if slowed_before(a) and not a["hurt"] else "after the alarm"
        print(f"SMOKE SKIP: {c}: the control's own client was slowed {when} (p99 {a['baseline_p99_ms']} -> {a['fault_p99_ms']} ms, "
              f"{a['baseline_throughput']} -> {a['fault_throughput']} req/s): not fault-free, its checks are skipped")
    if disturbed and len(disturbed) == sum(1 for t in truths if t["class"] == "none"):
        print("SMOKE WARNING: no undisturbed control this run; false alarms were not checked")
    for t in truths:
        if t["events"] < 1000:
            failures.append(f"{t['case_id']}: only {t['events']} events recorded")
        if "live" in t and t["live"]["reports"] == 0:
            failures.append(f"{t['case_id']}: the live plugin wrote no report")
        if "live" in t and t["live"].get("exit_code") != 0:
            failures.append(f"{t['case_id']}: the live plugin exited with {t['live'].get('exit_code')} (see live.log)")
    for r in rows:
        if "error" in r:
            failures.append(f"{r['case']} ({r['mode']}): {r['error']}")
        elif r["truth"] == "none" and not r["right"] and r["case"] not in disturbed:
            failures.append(f"{r['case']} ({r['mode']}): control got {r['verdict']} / {r['false_alarms']} false alarms")
        elif (r["case"].endswith(("cpu_cap", "freeze")) and r["mode"] == "on_demand" and r["valid"]
              and not r["right"]):
            failures.append(f"{r['case']} (on demand): {r['verdict']}, expected external")
    if otlp is not None:
        # Records the receiver rejects (perf's `NR -1` exits) are answered as partial success.
        # Every TCP segment reading after the first (the reference) makes a segment record,
        # received like an event and taken by the engine.
        records = max(0, otlp.get("segment_readings", 0) - 1)
        if otlp.get("segment_records", 0) < records:
            failures.append(f"OTLP: {otlp['segment_readings']} TCP segment readings, "
                            f"{otlp['segment_records']:.0f} segment records taken (expected {records})")
        if otlp["received"] + otlp["rejected"] < otlp["sent"] + records or otlp["dropped"] > 0:
            failures.append(f"OTLP: sent {otlp['sent']}, received {otlp['received']}, rejected {otlp['rejected']}, "
                            f"dropped {otlp['dropped']}")
        if otlp["verdict"] != otlp["offline_verdict"]:
            failures.append(f"OTLP verdict {otlp['verdict']} differs from offline {otlp['offline_verdict']}")
    for t in truths:
        if (t["class"] == "none" and t["case_id"] not in disturbed and "live" in t
                and t["live"]["false_alarms_before_fault"] + (t["live"]["continuous_verdict"] != "none") > 0):
            failures.append(f"{t['case_id']}: the live plugin raised a verdict on the control")
        # A frozen server makes no call: the live plugin must still report on it while it is
        # frozen (its clock moved on after `silent_after_seconds`), and call it external.
        quiet = (t.get("live") or {}).get("silent") or {}
        if t["case_id"].endswith("freeze") and "live" in t and "external" not in quiet.get("verdicts", []):
            failures.append(f"{t['case_id']}: no external live report while the server was frozen ({quiet})")
        signs = (t.get("live") or {}).get("vital_signs") or {}
        if (t["class"] == "none" and t["case_id"] not in disturbed
                and signs.get("busy_loop_reports_before_fault", 0) + signs.get("busy_loop_reports_after_fault", 0) > 0):
            failures.append(f"{t['case_id']}: the live plugin's counters named a busy loop on the control")
    for f in failures:
        print(f"SMOKE FAIL: {f}")
    print(f"smoke: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
