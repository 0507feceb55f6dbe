"""One case: start the server, warm up, record the normal phase, inject the fault, record the
fault phase, stop everything, decode the trace and write truth.json (same schema as
/work/shared/traces/perf-faults)."""
import json
import os
import time

from . import perfrec, proc_state, tcp_segments
from .diagnose import ALARM_AFTER_S
from .env import mono_ns
from .latency import LatencyLog, anomaly


def drop_caches():
    """Empties the page cache so the server's file pages are charged to its own cgroup as it
    reads them (else pages cached by an earlier case or the data load escape a memory cap)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


# Longest wait for the live plugin to be ready before the normal phase begins.
LIVE_READY_MAX_S = 90.0
# How long the last live plugin took to be ready (a debug build: 6-8 s on a 2-core box, a
# release build about 1 s): the load is lengthened by a margin over it, since a load
# generator is waited for to the end of its run (pgbench flushes its log only then), and a
# margin of the longest wait would add a minute and a half to every case. The load has 5 s
# to spare besides.
_last_ready_s = 7.0


def ready_margin():
    """Seconds the load is lengthened by for the live plugin to get ready."""
    return min(LIVE_READY_MAX_S, 1.25 * _last_ready_s + 1.0)


class Timing:
    def __init__(self, warmup=10.0, normal=45.0, fault=45.0):
        self.warmup = warmup
        self.normal = normal
        self.fault = fault


def run_case(env, app, fault_name, fault, timing, out_dir, live=None):
    """Records one case into `out_dir`; returns truth (dict). `live`, when given, is a
    LivePlugin started on the server's pids after warm-up and asked for reports during the run."""
    os.makedirs(out_dir, exist_ok=True)
    case_id = f"{app.name}_{fault_name}"
    print(f"== {case_id}: starting {app.name}", flush=True)
    global _last_ready_s
    # The load outlasts the case when the live plugin is as quick to be ready as the last.
    margin = ready_margin() if live is not None else 0.0
    app.load_seconds = timing.warmup + margin + 1.0 + timing.normal + timing.fault + 5.0
    drop_caches()
    app.start(env)
    log = LatencyLog()
    load = None
    rec = None
    tcp = None
    live_result = None
    fault_on = False
    asleep_at_alarm = asleep_at_end = False
    try:
        fault.arm(env, app)
        load = app.start_load(env, log)
        fault.attach_load(load)
        time.sleep(timing.warmup)
        pids = env.cgroup.pids()
        perf_data = os.path.join(out_dir, "perf.data")
        rec = perfrec.Recording(pids, perf_data, env.client_cpu)
        # The main process's namespace is the server's: its TCP counters beside the trace.
        tcp = tcp_segments.Sampler(pids[0]).start() if pids else None
        if live is not None:
            live.start(pids, case_id)
            ready = live.wait_ready(LIVE_READY_MAX_S)
            if ready is None:
                print("   live plugin NOT ready (see live.log)", flush=True)
            else:
                late = " (past the load's margin: the load ends early)" if ready > margin + 5.0 else ""
                print(f"   live plugin ready in {ready:.1f} s{late}", flush=True)
                _last_ready_s = ready
        time.sleep(1.0)
        trace_start = mono_ns()
        time.sleep(timing.normal)
        fault_start = mono_ns()
        print(f"   fault {fault_name} at {fault_start}", flush=True)
        fault_on = True
        fault.start(env, app)
        if live is not None:
            live.mark_fault(fault_start)
        # How the server's threads stand at the alarm (fault start + ALARM_AFTER_S, as the
        # diagnoses place it, however long fault.start took) and at the end (see
        # proc_state), for the offline diagnoses of a silent server.
        phase_end = mono_ns() + int(timing.fault * 1e9)
        alarm_ns = min(fault_start + int(ALARM_AFTER_S * 1e9), phase_end)
        time.sleep(max(0.0, (alarm_ns - mono_ns()) / 1e9))
        asleep_at_alarm = proc_state.asleep(env.cgroup.pids())
        time.sleep(max(0.0, (phase_end - mono_ns()) / 1e9))
        asleep_at_end = proc_state.asleep(env.cgroup.pids())
        fault_end = mono_ns()
        fault.stop(env, app)
        fault_on = False
    finally:
        if fault_on:
            # The case failed mid-fault: stop it first, else a frozen or capped server hangs
            # its own shutdown below and the next case.
            try:
                fault.stop(env, app)
            except Exception as e:  # noqa: BLE001 - the original error is the one to raise
                print(f"   stopping {fault_name} after a failure: {e}", flush=True)
        if load is not None:
            load.stop()
        if tcp is not None:
            tcp.stop()
        if rec is not None:
            perf_msgs = rec.stop()
        if live is not None:
            live.stop()
        app.stop(env)
    if live is not None:
        # After the plugin stopped: its shutdown drained everything perf had captured.
        live_result = live.collect(fault_start, fault_end)
    now = mono_ns()
    records = log.records()
    log.dump(os.path.join(out_dir, "client.jsonl"))
    trace = os.path.join(out_dir, "trace.txt.zst")
    lines = perfrec.decode(perf_data, trace, trace_start, fault_end)
    lost = perfrec.lost_events(perf_data)
    tcp_samples = tcp.write(os.path.join(out_dir, tcp_segments.FILE), trace_start, fault_end) if tcp else 0
    os.unlink(perf_data)
    an = anomaly(records, (trace_start, fault_start), (fault_start, fault_end), now)
    if fault.stops_load:
        # An idle case: no request in the fault phase by design (throughput -100 %), which is
        # not the service being hurt; it is judged like a control (fault-free).
        an["hurt"] = False
        an["load_stopped"] = True
    truth = {
        "case_id": case_id,
        "app": app.name,
        "app_version": app.version(),
        "fault": fault_name,
        "description": fault.description,
        "class": fault.klass,
        "subsystem": fault.subsystem,
        # An idle case's "fault" phase is the time without traffic: its start is when the load stopped.
        "fault_start_ns": fault_start if fault.klass != "none" or fault.stops_load else None,
        "fault_end_ns": fault_end if fault.klass != "none" or fault.stops_load else None,
        "nominal_split_ns": fault_start,
        "trace_start_ns": trace_start,
        "trace_end_ns": fault_end,
        "server_pids": pids,
        # Every server thread asleep in a wait (see proc_state) at the alarm and at the end.
        "asleep_at_alarm": asleep_at_alarm,
        "asleep_at_end": asleep_at_end,
        "load": app.describe_load(),
        "anomaly": an,
        "fault_details": fault.details,
        "events": lines,
        "perf_lost": {"messages": perf_msgs, "lost_records": lost},
        "trace_file": "trace.txt.zst",
        "trace_bytes": os.path.getsize(trace),
        # faultline:tcp_segments lines in tcp.txt, merged into the trace by the diagnoses.
        "tcp_samples": tcp_samples,
        # A freeze that did not take hold (every thread stopped) injected something else.
        "below_validity_rule": (fault.klass != "none" and not an["hurt"])
        or fault.details.get("all_stopped") is False,
    }
    if live_result is not None:
        truth["live"] = live_result
    with open(os.path.join(out_dir, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)
    b, fl = an["baseline_detail"], an["fault_detail"]
    print(
        f"   {lines} events, lost {lost}; client p99 {b['p99_ms']} -> {fl['p99_ms']} ms, "
        f"{b['throughput_rps']} -> {fl['throughput_rps']} req/s, hung {fl['hung_or_gt5s']}, hurt={an['hurt']}",
        flush=True,
    )
    return truth
