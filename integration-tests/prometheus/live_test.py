#!/usr/bin/env python3
"""Live test of faultline's Prometheus integration, end to end with real processes.

Why: promtool unit tests prove the rules on hand-written series; this proves them on what a
running faultline really exports. It

  1. starts `faultline run` on free loopback ports, replaying a real fault trace
     (/work/shared/traces/perf-faults/<case>, truth.json says external/internal/none),
  2. starts the real Prometheus server (1 s scrapes, the repo's recording and alerting rules
     with every `for:` shortened to 1 s) scraping it,
  3. waits for the alert matching the trace's true class to fire (/api/v1/alerts) and checks
     that the opposite diagnosis alert does not,
  4. runs every query of dashboards/faultline.json against that Prometheus
     (dashboard_queries.py): each must parse and return data,
  5. stops faultline and waits for FaultlineDown to fire.

    python3 integration-tests/prometheus/live_test.py --faultline target/debug/faultline \
        --case ../shared/traces/perf-faults/mariadb_cpu_cap

`--stand-in` replaces faultline with a static metrics file served by python's http.server
(only to check this harness itself; it proves nothing about faultline).
Exit status 0 = pass; 77 = skipped (a required program is missing; printed loudly).
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import dashboard_queries

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "config" / "prometheus" / "rules"
SKIP = 77
DIAGNOSIS_ALERT = {"external": "FaultlineExternalFault", "internal": "FaultlineInternalFault"}


def log(msg):
    print(f"[live {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    """Body of a GET, or None when the server is not answering (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def wait_until(what, timeout, probe, interval=0.5):
    """Polls `probe` until it returns a truthy value, which is returned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


class Proc:
    """A child process whose output goes to a log file, printed when the test fails."""

    def __init__(self, name, argv, logdir, **kw):
        self.name = name
        self.log_path = Path(logdir) / f"{name}.log"
        self.log_file = open(self.log_path, "wb")
        log(f"start {name}: {' '.join(map(str, argv))}")
        self.p = subprocess.Popen(argv, stdout=self.log_file, stderr=subprocess.STDOUT, **kw)

    def alive(self):
        return self.p.poll() is None

    def stop(self, timeout=15):
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        if self.alive():
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log_file.close()
        return self.p.returncode

    def tail(self, n=40):
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])


def test_rules(tmp):
    """Copies of the repo's rule files with every `for:` cut to 1 s, so alerts fire in seconds.

    Everything else (expressions, labels, annotation templates) is the shipped text.
    """
    out = []
    for src in sorted(RULES.glob("*.yml")):
        text = re.sub(r"(?m)^(\s+)for:\s*\S+\s*$", r"\1for: 1s", src.read_text())
        dst = Path(tmp) / src.name
        dst.write_text(text)
        out.append(dst)
    return out


def prometheus_config(tmp, metrics_addr, rule_files):
    path = Path(tmp) / "prometheus.yml"
    rules = "\n".join(f"  - {json.dumps(str(r))}" for r in rule_files)
    path.write_text(
        f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
{rules}
scrape_configs:
  - job_name: faultline
    static_configs:
      - targets: ["{metrics_addr}"]
        labels:
          host: live-test
"""
    )
    return path


def faultline_config(tmp, trace, metrics_addr, target):
    """A config with free ports, OTLP off, the trace replayed, one named target."""
    path = Path(tmp) / "faultline.toml"
    path.write_text(
        f"""[sources.otlp]
enabled = false

[sources.replay]
enabled = true
path = {json.dumps(str(trace))}

[sinks.prometheus]
listen = "{metrics_addr}"

[[targets]]
name = "{target}"
process_names = ["mariadbd"]
"""
    )
    return path


STAND_IN_METRICS = """# TYPE faultline_impact_factor_ratio gauge
faultline_impact_factor_ratio{{target="{t}"}} 0.95
# TYPE faultline_onset_dispersion_seconds gauge
faultline_onset_dispersion_seconds{{target="{t}"}} 0.1
# TYPE faultline_verdict gauge
faultline_verdict{{target="{t}",verdict="external"}} 1
faultline_verdict{{target="{t}",verdict="internal"}} 0
faultline_verdict{{target="{t}",verdict="none"}} 0
# TYPE faultline_threads gauge
faultline_threads{{target="{t}",state="total"}} 20
faultline_threads{{target="{t}",state="affected"}} 20
faultline_threads{{target="{t}",state="directly_affected"}} 19
# TYPE faultline_affected_syscall_increase_ratio gauge
faultline_affected_syscall_increase_ratio{{target="{t}",syscall="futex",dimension="time",rank="1"}} 2.5
faultline_affected_syscall_increase_ratio{{target="{t}",syscall="futex",dimension="frequency",rank="1"}} 1.5
# TYPE faultline_diagnosis_info gauge
faultline_diagnosis_info{{target="{t}",verdict="external",subsystem="cpu_scheduling",hint="stand-in"}} 1
# TYPE faultline_subsystem gauge
faultline_subsystem{{target="{t}",subsystem="cpu_scheduling"}} 1
faultline_subsystem{{target="{t}",subsystem="locking"}} 0
# TYPE faultline_syscall_calls_per_second gauge
faultline_syscall_calls_per_second{{target="{t}",syscall="futex"}} 100
# TYPE faultline_syscall_mean_latency_seconds gauge
faultline_syscall_mean_latency_seconds{{target="{t}",syscall="futex"}} 0.001
# TYPE faultline_last_report_timestamp_seconds gauge
faultline_last_report_timestamp_seconds{{target="{t}"}} {now}
# TYPE faultline_events_received_total counter
faultline_events_received_total{{source="replay"}} {n}
# TYPE faultline_events_dropped_total counter
faultline_events_dropped_total{{source="replay",reason="queue_full"}} 0
# TYPE faultline_decode_errors_total counter
faultline_decode_errors_total{{source="replay"}} 0
# TYPE faultline_guest_restarts_total counter
faultline_guest_restarts_total 0
# TYPE faultline_analysis_duration_seconds histogram
faultline_analysis_duration_seconds_bucket{{le="0.01"}} {n}
faultline_analysis_duration_seconds_bucket{{le="+Inf"}} {n}
faultline_analysis_duration_seconds_sum 1
faultline_analysis_duration_seconds_count {n}
"""


def alerts(prom):
    body = http_get(f"{prom}/api/v1/alerts")
    return json.loads(body)["data"]["alerts"] if body else []


def firing(prom, name):
    return [a for a in alerts(prom) if a["labels"].get("alertname") == name and a["state"] == "firing"]


def query(prom, expr):
    body = http_get(f"{prom}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    return json.loads(body)["data"]["result"] if body else []


def latest_report(metrics_addr, target):
    body = http_get(f"http://{metrics_addr}/report")
    reports = [r for r in json.loads(body) if r.get("target") == target] if body else []
    return reports[-1] if reports else None


def wait_for_final_report(src, metrics_addr, target, timeout):
    """The target's report once the replay is over and no new report came for 3 s.

    The end of the replay is read from faultline's log; reports alone could pause for a few
    seconds on a loaded CI machine mid-replay. The stand-in has no /report: its static
    metrics play the part of a report.
    """
    if src.name == "stand-in":
        return {"verdict": "external", "decided_by": "stand-in", "impact_factor": 0.95,
                "hint": "stand-in", "top_syscalls_by_time": [{"syscall": "futex"}]}
    wait_until("the replay to finish (faultline log)", timeout,
               lambda: "replay source finished" in src.tail(10_000))

    def stable():
        first = latest_report(metrics_addr, target)
        time.sleep(3)
        second = latest_report(metrics_addr, target)
        if first and second and (first["window_end_ns"], first["verdict"]) == (second["window_end_ns"], second["verdict"]):
            return second
        return None

    return wait_until(f"a final report for target {target}", timeout, stable, interval=0)


def check_diagnosis_alert(prom, target, verdict, report, metrics_addr=None):
    """The alert of `verdict` fires for `target` with the report's details; the other does not."""
    name = DIAGNOSIS_ALERT[verdict]
    other = DIAGNOSIS_ALERT["internal" if verdict == "external" else "external"]

    def settled():
        mine = [a for a in firing(prom, name) if a["labels"].get("target") == target]
        theirs = [a for a in firing(prom, other) if a["labels"].get("target") == target]
        return mine if mine and not theirs else None

    alert = wait_until(f"{name} firing alone for {target}", 60, settled)[0]
    log(f"{name} firing: {json.dumps(alert, indent=1)}")
    ann = alert["annotations"]
    assert alert["labels"]["verdict"] == verdict, alert
    if metrics_addr:
        now = latest_report(metrics_addr, target)
        assert now and now["window_end_ns"] == report["window_end_ns"], "a new report arrived during the check"
    assert target in ann["summary"], ann
    # The annotation joins must carry the report's own diagnosis, not fallbacks.
    assert ann["hint"] == report["hint"], f"hint annotation {ann['hint']!r} != report hint {report['hint']!r}"
    top = report["top_syscalls_by_time"]
    if top:
        assert f"{top[0]['syscall']} (+" in ann["description"], f"top syscall {top[0]['syscall']} missing: {ann['description']}"
    else:
        assert "none ranked" in ann["description"], ann["description"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faultline", default=str(REPO / "target" / "debug" / "faultline"))
    ap.add_argument("--case", default=str(REPO.parent / "shared" / "traces" / "perf-faults" / "mariadb_cpu_cap"),
                    help="a perf-faults case directory (trace.txt.zst + truth.json)")
    ap.add_argument("--prometheus-bin", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    ap.add_argument("--target", default="mariadb", help="target name given to the traced server")
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for the diagnosis alert")
    ap.add_argument("--stand-in", action="store_true", help="serve static metrics instead of faultline (harness self-check)")
    ap.add_argument("--require-truth", action="store_true",
                    help="also fail when faultline's verdict differs from the case's truth.json class")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs, TSDB)")
    args = ap.parse_args()

    if not Path(args.prometheus_bin).exists():
        print(f"SKIPPED: no Prometheus server at {args.prometheus_bin} (apt-get install prometheus)", file=sys.stderr)
        return SKIP
    case = Path(args.case)
    if args.stand_in:
        truth = "external"
    else:
        if not Path(args.faultline).exists():
            print(f"SKIPPED: no faultline binary at {args.faultline} (cargo build -p faultline)", file=sys.stderr)
            return SKIP
        if not (case / "truth.json").exists():
            print(f"SKIPPED: no trace case at {case}", file=sys.stderr)
            return SKIP
        truth = json.loads((case / "truth.json").read_text())["class"]

    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="faultline-live-")
    procs = []
    ok = False
    try:
        metrics_addr = f"127.0.0.1:{free_port()}"
        if args.stand_in:
            www = Path(tmp) / "www"
            www.mkdir()
            (www / "metrics").write_text(STAND_IN_METRICS.format(t=args.target, now=time.time(), n=1000))
            src = Proc("stand-in", [sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                                    "--directory", str(www), metrics_addr.split(":")[1]], tmp)
        else:
            cfg = faultline_config(tmp, case / "trace.txt.zst", metrics_addr, args.target)
            src = Proc("faultline", [args.faultline, "run", "--config", str(cfg)], tmp,
                       env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "info")})
        procs.append(src)
        wait_until("the metrics endpoint", 30,
                   lambda: not src.alive() and (_ for _ in ()).throw(RuntimeError(f"{src.name} exited early"))
                   or http_get(f"http://{metrics_addr}/metrics"))

        prom_port = free_port()
        prom = f"http://127.0.0.1:{prom_port}"
        prom_cfg = prometheus_config(tmp, metrics_addr, test_rules(tmp))
        promtool = shutil.which("promtool")
        if promtool:
            subprocess.run([promtool, "check", "config", str(prom_cfg)], check=True, stdout=subprocess.DEVNULL)
        pserver = Proc("prometheus", [args.prometheus_bin, f"--config.file={prom_cfg}",
                                      f"--storage.tsdb.path={Path(tmp) / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"], tmp)
        procs.append(pserver)
        wait_until("Prometheus ready", 30, lambda: http_get(f"{prom}/-/ready"))
        wait_until("faultline scraped (up == 1)", 30,
                   lambda: any(r["value"][1] == "1" for r in query(prom, 'up{job="faultline"}')))
        log("Prometheus scrapes the metrics endpoint")

        # The alert must follow what faultline itself concluded (its JSON report, a channel
        # independent of the metrics): that is what this test proves about the integration.
        # Whether that conclusion matches the trace's truth is the engine's business; it is
        # printed, and enforced only with --require-truth.
        report = wait_for_final_report(src, metrics_addr, args.target, args.timeout)
        verdict = report["verdict"]
        agree = "agrees with" if verdict == truth else "DIFFERS from"
        log(f"faultline's verdict: {verdict} ({report['decided_by']}, tau={report['impact_factor']:.3f}); "
            f"{agree} truth.json: {truth}")
        if args.require_truth and verdict != truth:
            raise AssertionError(f"verdict {verdict} != truth {truth} (--require-truth)")
        if verdict in DIAGNOSIS_ALERT:
            check_diagnosis_alert(prom, args.target, verdict, report,
                                  None if args.stand_in else metrics_addr)
        else:
            # Verdict none: neither diagnosis alert may fire, over several evaluations.
            time.sleep(5)
            for name in DIAGNOSIS_ALERT.values():
                assert not firing(prom, name), f"{name} fires on verdict none: {firing(prom, name)}"
            log("no diagnosis alert on verdict none")

        # Rates need a few scrapes of the counters before the dashboard check.
        time.sleep(3)
        failures = dashboard_queries.check(prom, {"target": args.target, "instance": metrics_addr})
        assert not failures, "dashboard queries failed:\n  " + "\n  ".join(failures)

        code = src.stop()
        log(f"{src.name} stopped with exit code {code}")
        wait_until("FaultlineDown firing", 30, lambda: firing(prom, "FaultlineDown"))
        log("FaultlineDown firing after faultline stopped")
        ok = True
        log(f"PASS in {time.monotonic() - t0:.1f}s")
        return 0
    except (AssertionError, TimeoutError, RuntimeError, subprocess.CalledProcessError) as e:
        log(f"FAIL: {e}")
        for p in procs:
            print(f"----- last lines of {p.name} ({p.log_path}) -----\n{p.tail()}", file=sys.stderr)
        return 1
    finally:
        for p in reversed(procs):
            p.stop()
        if args.keep or not ok:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
