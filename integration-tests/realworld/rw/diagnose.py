"""Offline diagnosis of recorded cases with `faultline analyze`, and the accuracy table.

Modes, as in the paper's evaluation:
- continuous: the engine's own detection; the first anomaly detected after the fault start
  answers the case, any non-`none` anomaly before it (or anywhere in a control) is a false alarm;
- on-demand: an external alarm 10 s after the fault start (`--trigger-at`), diagnosed on the whole
  recording (the window around the alarm, as a post-mortem would);
- alarm-only: the same alarm, with only the data up to it (the trace cut at the alarm time, as the
  paper's PerfCompass sees it: the 1.5 minutes before the alarm);
- calibrated: on-demand with α/β from `faultline calibrate` on the app's own CPU-cap case;
- every mode is told when the recording ended (`--recorded-until`: the trace's end, or the
  alarm for alarm-only), so a server that fell silent before it (a freeze) is still diagnosed,
  and whether the server's threads were all asleep in a wait then (`--recorded-asleep`, read
  from /proc by the harness as the live plugin reads it): an idle server, not a frozen one;
- early_alarm: an alarm 15 s *before* the fault start (or the control's split), on the whole
  recording: the service was healthy then, so every case must answer `none` (data after an
  alarm must not answer it with a fault that began later).
"""
import json
import os
import re
import subprocess
import threading
import time

from . import tcp_segments

ALARM_AFTER_S = 10.0
EARLY_ALARM_S = -15.0


def split_ns(truth):
    return truth.get("fault_start_ns") or truth.get("nominal_split_ns")


def analyze(binary, case_dir, truth, mode, targets=(), extra=()):
    """Runs analyze on one case; returns (analysis dict or None, seconds, error text)."""
    trace = os.path.join(case_dir, truth.get("trace_file", "trace.txt.zst"))
    alarm_ns = int(split_ns(truth) + (EARLY_ALARM_S if mode == "early_alarm" else ALARM_AFTER_S) * 1e9)
    cut = mode == "alarm_only"
    tcp = _tcp_file(case_dir)
    cmd = [binary, "analyze", "--input", "perf:-" if cut or tcp else f"perf:{trace}", "--format", "json",
           "--no-progress"]
    for t in targets:
        cmd += ["--target", t]
    cmd += list(extra)
    if mode != "continuous":
        cmd += ["--trigger-at", str(alarm_ns)]
    # The recording ran on past its last record when the server fell silent (a freeze):
    # the clock moves on to the recording's end, as the live plugin's does.
    until = alarm_ns if cut else truth.get("trace_end_ns")
    if until:
        cmd += ["--recorded-until", str(until)]
        # ... and, as the live plugin reads from /proc, whether the server's threads were
        # all asleep in a wait then (idle), not frozen or stopped.
        if truth.get("asleep_at_alarm" if cut else "asleep_at_end"):
            cmd += ["--recorded-asleep"]
    t0 = time.time()
    if cut:
        out = _analyze_cut(cmd, trace, alarm_ns, tcp)
    elif tcp:
        out = _analyze_merged(cmd, trace, tcp)
    else:
        out = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.time() - t0
    if out.returncode != 0:
        return None, elapsed, out.stderr.strip()
    analyses = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    if not analyses:
        return None, elapsed, "no target in the trace"
    # The target with the most events is the server (others are stray processes).
    analyses.sort(key=lambda a: -a.get("input", {}).get("events_routed", 0))
    return analyses[0], elapsed, None


def _tcp_file(case_dir):
    """The case's `faultline:tcp_segments` lines (rw/tcp_segments.py), or None: older cases
    have none and are analysed as before."""
    path = os.path.join(case_dir, tcp_segments.FILE)
    return path if os.path.exists(path) else None


def _unpack(trace):
    # -f: zstd skips a symbolic link otherwise (a case folder of links to the recordings).
    return ["zstd", "-dcf", trace] if trace.endswith(".zst") else ["cat", trace]


def _run_fed(cmd, lines):
    """`cmd` run with the (bytes) `lines` on its stdin, written by a thread while its output
    is collected (a full pipe either way would otherwise stall both); a CompletedProcess."""
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(cmd, stdin=r, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError:
        os.close(w)
        raise
    finally:
        os.close(r)

    failed = []

    def feed():
        try:
            with open(w, "wb") as sink:
                sink.writelines(lines)
        except BrokenPipeError:
            pass  # faultline exited early: its exit code and stderr tell why
        except Exception as e:  # noqa: BLE001 - re-raised below: a cut feed must not score
            failed.append(e)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        out, err = proc.communicate()
    finally:
        writer.join()
    if failed:
        raise RuntimeError(f"feeding {cmd[0]} failed: {failed[0]!r}") from failed[0]
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _analyze_merged(cmd, trace, tcp):
    """`cmd` fed with `trace` and the case's TCP segment lines in time order (streamed)."""
    src = subprocess.Popen(_unpack(trace), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = _run_fed(cmd, tcp_segments.merge(src.stdout, tcp))
    finally:
        src.stdout.close()
        rc = src.wait()
    # A corrupt trace ends the feed early: that must not be scored as a short trace.
    if rc != 0 and out.returncode == 0:
        raise RuntimeError(f"unpacking {trace} failed: {src.stderr.read().decode(errors='replace')}")
    src.stderr.close()
    return out


def _analyze_cut(cmd, trace, alarm_ns, tcp=None):
    """`cmd` fed with the perf-script records of `trace` up to `alarm_ns` (perf script prints
    them in time order: the first later record ends the feed), with the TCP segment lines
    of `tcp` up to the same time merged in when given."""
    unpack = _unpack(trace)
    # awk: field 3 is the timestamp "seconds.nanoseconds:".
    cutter = ["awk", "-v", f"T={alarm_ns / 1e9:.9f}", "{ts = substr($3, 1, length($3) - 1) + 0; if (ts > T) exit; print}"]
    src = subprocess.Popen(unpack, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    mid = subprocess.Popen(cutter, stdin=src.stdout, stdout=subprocess.PIPE)
    src.stdout.close()
    if tcp:
        out = _run_fed(cmd, tcp_segments.merge(mid.stdout, tcp, until_ns=alarm_ns))
    else:
        out = subprocess.run(cmd, stdin=mid.stdout, capture_output=True, text=True)
    mid.stdout.close()
    mid.wait()
    src.wait()
    return out


def pick(analysis, truth, mode):
    """The report that answers the case, the false alarms, and the detection delay (s)."""
    split = split_ns(truth)
    if mode != "continuous":
        return analysis, [], None
    early = [a for a in analysis["anomalies"] if a["detected_at_ns"] < split]
    late = [a for a in analysis["anomalies"] if a["detected_at_ns"] >= split]
    if truth["class"] == "none":
        return None, analysis["anomalies"], None
    if not late:
        return None, early, None
    first = late[0]
    return first["diagnosis"], early, (first["detected_at_ns"] - split) / 1e9


def calibrate(binary, case_dir, truth, targets=()):
    """α/β (and the activity floors scaled with α) from a case recorded under a known external
    fault: ["--set", "alpha_seconds=…", …]."""
    trace = os.path.join(case_dir, truth.get('trace_file', 'trace.txt.zst'))
    tcp = _tcp_file(case_dir)
    cmd = [binary, "calibrate", "--input", "perf:-" if tcp else f"perf:{trace}",
           "--no-progress", "--fault-start-ns", str(split_ns(truth))]
    for t in targets:
        cmd += ["--target", t]
    out = _analyze_merged(cmd, trace, tcp) if tcp else subprocess.run(cmd, capture_output=True, text=True)
    sets = []
    for key in ("alpha_seconds", "beta_seconds", "min_active_calls", "direct_within_calls"):
        m = re.search(rf"{key}\s*=\s*([0-9.eE+-]+)", out.stdout)
        if m:
            sets += ["--set", f"{key}={m.group(1)}"]
    return sets, out.stdout.strip() if not sets else None


def fmt_top(lst, n=3):
    return ", ".join(f"{r['syscall']} {r['increase_ratio'] * 100:+.0f}%" for r in lst[:n]) or "—"


SUBSYSTEM_OF_TRUTH = {"cpu": "cpu_scheduling", "memory": "memory", "disk": "disk_io", "network": "network_io",
                      "locking": "locking"}


def row(case, truth, mode, analysis, elapsed, err):
    """One evaluated case as a dict (the table row and the JSON result)."""
    base = {"case": case, "app": truth.get("app", ""), "truth": truth["class"], "truth_subsystem": truth["subsystem"],
            "mode": mode, "valid": not truth.get("below_validity_rule", False), "analyze_seconds": round(elapsed, 1)}
    if err:
        return base | {"error": err[:200], "verdict": "error", "right": False}
    report, early, delay = pick(analysis, truth, mode)
    verdict = report["verdict"] if report else "none"
    r = report or analysis
    expected = "none" if mode == "early_alarm" else truth["class"]
    right = verdict == expected and not (expected == "none" and early)
    want = SUBSYSTEM_OF_TRUTH.get(truth["subsystem"])
    return base | {
        "verdict": verdict,
        "right": right,
        "false_alarms": len(early),
        "impact_factor": r["impact_factor"],
        "onset_dispersion_seconds": r["onset_dispersion_seconds"],
        "threads": r["threads"],
        "top_by_time": fmt_top(r["top_syscalls_by_time"]),
        "top_by_frequency": fmt_top(r["top_syscalls_by_frequency"]),
        "subsystem": r["subsystem"] if report else None,
        "subsystem_right": (r["subsystem"] == want) if (report and want and truth["class"] == "external") else None,
        "delay_s": None if delay is None else round(delay, 1),
        # Per affected thread: what made it count (for re-tuning against recorded cases).
        "affected": _affected(r),
        "false_alarm_affected": [_affected(a.get("diagnosis", {})) for a in early],
    }


def _affected(report):
    return [{k: a.get(k) for k in ("tid", "syscall", "channel", "persistence", "lost_share", "active")}
            for a in report.get("affected_threads", [])]


def evaluate(binary, cases_root, modes=("continuous", "on_demand"), calibrated=True, targets_of=None, extra=()):
    """Every case folder under `cases_root` in every mode; returns the rows. `extra` are
    more `analyze` arguments (e.g. `--set alpha_seconds=1`)."""
    rows = []
    cases = sorted(d for d in os.listdir(cases_root) if os.path.exists(os.path.join(cases_root, d, "truth.json")))
    calib = {}
    for c in cases:
        d = os.path.join(cases_root, c)
        truth = json.load(open(os.path.join(d, "truth.json")))
        targets = targets_of(truth) if targets_of else ()
        for mode in modes:
            a, el, err = analyze(binary, d, truth, mode, targets, extra)
            rows.append(row(c, truth, mode, a, el, err))
        if calibrated:
            app = truth.get("app", "")
            if app not in calib:
                ref = os.path.join(cases_root, f"{app}_cpu_cap")
                if os.path.exists(os.path.join(ref, "truth.json")):
                    calib[app] = calibrate(binary, ref, json.load(open(os.path.join(ref, "truth.json"))), targets)[0]
                else:
                    calib[app] = []
            a, el, err = analyze(binary, d, truth, "calibrated", targets, list(extra) + calib[app])
            r = row(c, truth, "calibrated", a, el, err)
            r["calibration"] = " ".join(calib[app][1::2])
            rows.append(r)
    return rows


def table(rows, mode):
    """Markdown table of one mode, with its accuracy line."""
    out = ["| case | truth | verdict | τ | Ω (s) | threads dir/aff/total | top syscalls by time | top by frequency | subsystem | delay (s) | false alarms | hurt |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in [r for r in rows if r["mode"] == mode]:
        if "error" in r:
            out.append(f"| {r['case']} | {r['truth']} | ERROR {r['error'][:60]} |||||||||| ")
            continue
        th = r["threads"]
        mark = "" if r["right"] else " ✗"
        sub = r["subsystem"] or "—"
        if r["subsystem_right"] is False:
            sub += " ✗"
        out.append(
            f"| {r['case']} | {r['truth']}/{r['truth_subsystem']} | **{r['verdict']}**{mark} | {r['impact_factor']:.2f} | "
            f"{r['onset_dispersion_seconds']:.2f} | {th['directly_affected']}/{th['affected']}/{th['total']} | {r['top_by_time']} | "
            f"{r['top_by_frequency']} | {sub} | {'' if r['delay_s'] is None else r['delay_s']} | {r['false_alarms']} | "
            f"{'—' if r['truth'] == 'none' else 'yes' if r['valid'] else 'no'} |")
    out.append("")
    out.append(summary(rows, mode))
    return "\n".join(out)


def summary(rows, mode):
    rs = [r for r in rows if r["mode"] == mode]
    if mode == "early_alarm":
        return (f"**{mode}**: alarms 15 s before the fault (or the control's split) answered `none`: "
                f"{sum(r['right'] for r in rs)}/{len(rs)} (every case)")
    faults = [r for r in rs if r["truth"] != "none" and r["valid"]]
    controls = [r for r in rs if r["truth"] == "none"]
    # An error row has no subsystem to judge.
    ext = [r for r in faults if r["truth"] == "external" and r.get("subsystem_right") is not None]
    right = sum(r["right"] for r in faults)
    pct = 100.0 * right / len(faults) if faults else 0.0
    return (f"**{mode}**: fault cases right {right}/{len(faults)} ({pct:.0f}%, cases where the fault hurt the client); "
            f"controls clean {sum(r['right'] for r in controls)}/{len(controls)}; "
            f"external cases with the right subsystem {sum(r['subsystem_right'] for r in ext)}/{len(ext)}; "
            f"invalid (fault did not hurt) excluded: {sum(1 for r in rs if r['truth'] != 'none' and not r['valid'])}")
