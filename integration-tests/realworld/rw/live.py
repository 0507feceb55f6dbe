"""The live plugin during a case: `faultline run` with its perf source attached to the
server's processes (the engine inside wasmtime, as by default), reports to a JSON-lines file,
and an on-demand alarm sent to `POST /trigger` 10 s after the fault starts."""
import json
import os
import subprocess
import threading
import time
import urllib.request

from .env import mono_ns
from .ports import free_addr

ALARM_AFTER_S = 10.0


class LivePlugin:
    def __init__(self, binary, out_dir, target, comm, cpu):
        self.binary = binary
        self.out_dir = out_dir
        self.target = target
        self.comm = comm
        self.cpu = cpu
        self.proc = None
        self.trigger_answer = None
        self.alarm = None

    def start(self, pids, case_id):
        os.makedirs(self.out_dir, exist_ok=True)
        self.reports = os.path.join(self.out_dir, "live_reports.jsonl")
        config = os.path.join(self.out_dir, "live.toml")
        self.metrics = free_addr()
        with open(config, "w") as f:
            f.write(
                f'[[targets]]\nname = "{self.target}"\nprocess_names = ["{self.comm}"]\n\n'
                "[sources.otlp]\nenabled = false\n\n"
                f"[sources.perf]\nenabled = true\npids = {json.dumps(pids)}\n\n"
                f'[sinks.prometheus]\nlisten = "{self.metrics}"\n\n'
                f'[sinks.json]\nenabled = true\npath = "{self.reports}"\n'
            )
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(self.cpu), self.binary, "run", "--config", config],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.out_dir, "live.log"), "w"))
        self.started_ns = mono_ns()

    def wait_ready(self, timeout_s=90.0):
        """Waits until the plugin serves /healthz (its engine compiled, its perf source
        attached); returns the seconds it took, None when it never did (its log says why).

        Why: the engine's start compiles the WASM guest, seconds of CPU on the load
        generator's CPU (6.8 s for a debug build in a CI pre-check). Overlapping the normal
        phase, it slowed the control's own client (p99 306 ms in its first second, 3-6 ms
        otherwise), so the control read as disturbed and its false-alarm checks were skipped."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                return None
            try:
                with urllib.request.urlopen(f"http://{self.metrics}/healthz", timeout=1) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.2)
        return None

    def mark_fault(self, fault_start_ns):
        def fire():
            time.sleep(max(0.0, ALARM_AFTER_S + 2.0 - (mono_ns() - fault_start_ns) / 1e9))
            at = int(fault_start_ns + ALARM_AFTER_S * 1e9)
            url = f"http://{self.metrics}/trigger?target={self.target}&at_ns={at}"
            try:
                req = urllib.request.Request(url, method="POST", data=b"")
                with urllib.request.urlopen(req, timeout=30) as r:
                    self.trigger_answer = json.loads(r.read())
            except Exception as e:  # noqa: BLE001 - recorded in the result, not fatal
                self.trigger_answer = {"error": str(e)}

        self.alarm = threading.Thread(target=fire, daemon=True)
        self.alarm.start()

    def collect(self, fault_start_ns, fault_end_ns):
        """Continuous mode: the first non-`none` cadence report ending in the fault phase,
        and non-`none` reports before it (false alarms); on-demand: the /trigger answer."""
        if self.alarm is not None:
            self.alarm.join(timeout=40)
        reports = []
        try:
            with open(self.reports) as f:
                reports = [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError):
            pass
        cadence = [r for r in reports if r.get("trigger") == "cadence" and r["window_end_ns"] <= fault_end_ns]
        early = [r for r in cadence if r["verdict"] != "none" and r["window_end_ns"] < fault_start_ns]
        late = [r for r in cadence if r["verdict"] != "none" and r["window_end_ns"] >= fault_start_ns]
        first = late[0] if late else None
        return {
            "vital_signs": vital_signs(cadence, fault_start_ns),
            "exit_code": getattr(self, "exit_code", None),
            "reports": len(reports),
            "false_alarms_before_fault": len(early),
            "continuous_verdict": first["verdict"] if first else "none",
            "continuous_delay_s": round((first["window_end_ns"] - fault_start_ns) / 1e9, 1) if first else None,
            "continuous_impact_factor": first["impact_factor"] if first else None,
            "on_demand": slim(self.trigger_answer),
            "silent": silent(cadence, fault_start_ns),
        }

    def stop(self):
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.exit_code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.exit_code = "killed after 30 s"


def slim(report):
    """The fields the result table shows."""
    if not isinstance(report, dict) or "verdict" not in report:
        return report
    if isinstance(report.get("reports"), list):  # answer may wrap several targets
        report = report["reports"][0] if report["reports"] else {}
    return {k: report.get(k) for k in ("verdict", "impact_factor", "onset_dispersion_seconds", "subsystem")} | {
        "top_syscalls_by_time": [s["syscall"] for s in report.get("top_syscalls_by_time", [])[:3]],
        "cpu_burners": [b["tid"] for b in report.get("cpu_burners", [])],
    }


def silent(cadence, fault_start_ns):
    """The cadence reports of the fault phase that the plugin made while the server sent no
    record (its clock moved on: `silent_seconds` of a cadence or more), e.g. during a freeze:
    without that the plugin has nothing to say until the server makes calls again."""
    quiet = [r for r in cadence if r["window_end_ns"] >= fault_start_ns and r.get("silent_seconds", 0) >= 10]
    first = quiet[0] if quiet else None
    return {
        "reports": len(quiet),
        "max_silent_s": round(max((r["silent_seconds"] for r in quiet), default=0.0), 1),
        "first_verdict": first["verdict"] if first else None,
        "verdicts": sorted({r["verdict"] for r in quiet}),
    }


def busy_tids(report):
    """Tids the report's vital signs name as busy loops (hardware counters, ChopStix Rule #1)."""
    vs = report.get("vital_signs") or {}
    return sorted(t["tid"] for t in vs.get("threads", []) if "busy_loop" in t.get("symptoms", []))


def vital_signs(cadence, fault_start_ns):
    """What the live reports' vital signs said: whether counters arrived, cadence reports
    naming a busy loop before the fault (false alarms on a healthy server), and the first
    one after it (delay and tids)."""
    with_signs = [r for r in cadence if r.get("vital_signs")]
    before = [r for r in with_signs if r["window_end_ns"] < fault_start_ns and busy_tids(r)]
    after = [r for r in with_signs if r["window_end_ns"] >= fault_start_ns and busy_tids(r)]
    first = after[0] if after else None
    return {
        "reports_with_counters": len(with_signs),
        "busy_loop_reports_before_fault": len(before),
        "busy_loop_delay_s": round((first["window_end_ns"] - fault_start_ns) / 1e9, 1) if first else None,
        "busy_loop_tids": busy_tids(first) if first else [],
        "busy_loop_reports_after_fault": len(after),
    }
