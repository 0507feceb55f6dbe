#!/usr/bin/env python3
"""Live test of faultline's Prometheus integration, end to end with real processes.

Why: promtool unit tests prove the rules on hand-written series; this proves them on what a
running faultline really exports. It

  1. starts one `faultline run` per case on free loopback ports, each replaying a real fault
     trace (<traces>/perf-faults/<case>, <traces> found by shared_traces.py; by default
     mariadb_cpu_cap, an external fault, and mariadb_lock_tables, an internal one),
  2. starts the real Prometheus server (1 s scrapes, the repo's recording and alerting rules
     with every `for:` shortened to 1 s) scraping all of them,
  3. for each faultline, waits for its final report (GET /report) and checks that the alert
     of that verdict fires for its instance (/api/v1/alerts) with the report's hint and top
     syscall in the annotations, and that the opposite diagnosis alert does not; whether the
     verdict matches the case's truth.json is printed (enforced with --require-truth),
  4. runs every query of dashboards/faultline.json against that Prometheus
     (dashboard_queries.py): each must parse and return data,
  5. stops the faultlines and waits for FaultlineDown to fire for each.

    python3 integration-tests/prometheus/live_test.py --faultline target/debug/faultline \
        [--case ../shared/traces/perf-faults/mariadb_cpu_cap ...] [--engine wasm] [--keep]

`--stand-in` replaces faultline with a static metrics file served by python's http.server
(only to check this harness itself; it proves nothing about faultline).
Exit status 0 = pass; 77 = skipped (a required program or the traces are missing; printed
loudly; missing traces fail instead under FAULTLINE_REQUIRE_TRACES=1).
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
import shared_traces

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


def prometheus_config(tmp, metrics_addrs, rule_files):
    path = Path(tmp) / "prometheus.yml"
    rules = "\n".join(f"  - {json.dumps(str(r))}" for r in rule_files)
    targets = ", ".join(json.dumps(a) for a in metrics_addrs)
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
      - targets: [{targets}]
        labels:
          host: live-test
"""
    )
    return path


def faultline_config(tmp, trace, metrics_addr, target, engine):
    """A config with free ports, OTLP off, the trace replayed, one named target."""
    path = Path(tmp) / "faultline.toml"
    path.write_text(
        f"""[engine]
kind = "{engine}"

[sources.otlp]
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
# TYPE faultline_silent_seconds gauge
faultline_silent_seconds{{target="{t}"}} 0
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
    if src.name.startswith("stand-in"):
        return {"verdict": "external", "decided_by": "stand-in", "impact_factor": 0.95,
                "hint": "stand-in", "top_syscalls_by_time": [{"syscall": "futex"}]}
    def received():
        text = http_get(f"http://{metrics_addr}/metrics") or ""
        return sum(float(l.split()[-1]) for l in text.splitlines()
                   if l.startswith("faultline_events_received_total"))

    def replay_over():
        # faultline logs the end of the replay; should that line change, a received-events
        # counter that stopped growing for 5 s says the same.
        if "replay source finished" in src.tail(10_000):
            return True
        before = received()
        time.sleep(5)
        return before > 0 and received() == before

    wait_until("the replay to finish", timeout, replay_over)

    def stable():
        first = latest_report(metrics_addr, target)
        time.sleep(3)
        second = latest_report(metrics_addr, target)
        if first and second and (first["window_end_ns"], first["verdict"]) == (second["window_end_ns"], second["verdict"]):
            return second
        return None

    return wait_until(f"a final report for target {target}", timeout, stable, interval=0)


def check_diagnosis_alert(prom, target, instance, verdict, report, has_report):
    """The alert of `verdict` fires for `target` on `instance` with the report's details; the
    other diagnosis alert does not."""
    name = DIAGNOSIS_ALERT[verdict]
    other = DIAGNOSIS_ALERT["internal" if verdict == "external" else "external"]

    def ours(alerts):
        return [a for a in alerts if a["labels"].get("target") == target and a["labels"].get("instance") == instance]

    def settled():
        mine, theirs = ours(firing(prom, name)), ours(firing(prom, other))
        return mine if mine and not theirs else None

    alert = wait_until(f"{name} firing alone for {target} on {instance}", 60, settled)[0]
    log(f"{name} firing: {json.dumps(alert, indent=1)}")
    ann = alert["annotations"]
    assert alert["labels"]["verdict"] == verdict, alert
    if has_report:
        now = latest_report(instance, target)
        assert now and now["window_end_ns"] == report["window_end_ns"], "a new report arrived during the check"
    assert target in ann["summary"], ann
    # The annotation joins must carry the report's own diagnosis, not fallbacks.
    # The sink cuts the hint to MAX_HINT_CHARS (256) characters: it is a label value.
    assert ann["hint"] == report["hint"][:256], f"hint annotation {ann['hint']!r} != report hint {report['hint']!r}"
    top = report["top_syscalls_by_time"]
    if top:
        assert f"{top[0]['syscall']} (+" in ann["description"], f"top syscall {top[0]['syscall']} missing: {ann['description']}"
    else:
        assert "none ranked" in ann["description"], ann["description"]


def check_hosts_count(prom, feeds, verdicts, target):
    """Every firing diagnosis alert counts the hosts of its service with its verdict among
    those reporting: every faultline here names its server `target`, one host each."""
    for f in feeds:
        verdict = verdicts[f.name]
        if verdict not in DIAGNOSIS_ALERT:
            continue
        same = sum(v == verdict for v in verdicts.values())
        want = f"Hosts of {target} with this verdict: {same} of {len(feeds)} reporting"
        alerts = [a for a in firing(prom, DIAGNOSIS_ALERT[verdict])
                  if a["labels"].get("instance") == f.addr and a["labels"].get("target") == target]
        assert alerts, f"{f.name}: {DIAGNOSIS_ALERT[verdict]} no longer firing"
        desc = alerts[0]["annotations"]["description"]
        assert want in desc, f"{f.name}: {want!r} not in {desc!r}"
        log(f"{f.name}: the page says '{want}'")


DEFAULT_CASES = ["mariadb_cpu_cap", "mariadb_lock_tables"]


class Feed:
    """One metrics endpoint under test: a faultline replaying one case, or the stand-in."""

    def __init__(self, name, truth, addr, proc):
        self.name, self.truth, self.addr, self.proc = name, truth, addr, proc


def start_feeds(args, tmp):
    feeds = []
    if args.stand_in:
        addr = f"127.0.0.1:{free_port()}"
        www = Path(tmp) / "www"
        www.mkdir()
        (www / "metrics").write_text(STAND_IN_METRICS.format(t=args.target, now=time.time(), n=1000))
        proc = Proc("stand-in", [sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                                 "--directory", str(www), addr.split(":")[1]], tmp)
        return [Feed("stand-in", "external", addr, proc)]
    for case in args.cases:
        addr = f"127.0.0.1:{free_port()}"
        cdir = Path(tmp) / case.name
        cdir.mkdir()
        cfg = faultline_config(cdir, case / "trace.txt.zst", addr, args.target, args.engine)
        truth = json.loads((case / "truth.json").read_text())["class"]
        proc = Proc(f"faultline-{case.name}", [args.faultline, "run", "--config", str(cfg)], tmp,
                    env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "info")})
        feeds.append(Feed(case.name, truth, addr, proc))
    return feeds


def check_feed(prom, feed, args):
    """The diagnosis alerts of one faultline follow its own final report."""
    # The alert must follow what faultline itself concluded (its JSON report, a channel
    # independent of the metrics): that is what this test proves about the integration.
    # Whether that conclusion matches the trace's truth is the engine's business; it is
    # printed, and enforced only with --require-truth.
    report = wait_for_final_report(feed.proc, feed.addr, args.target, args.timeout)
    verdict = report["verdict"]
    agree = "agrees with" if verdict == feed.truth else "DIFFERS from"
    log(f"{feed.name}: faultline's verdict {verdict} ({report['decided_by']}, "
        f"tau={report['impact_factor']:.3f}) {agree} truth.json: {feed.truth}")
    if args.require_truth and verdict != feed.truth:
        raise AssertionError(f"{feed.name}: verdict {verdict} != truth {feed.truth} (--require-truth)")
    if verdict in DIAGNOSIS_ALERT:
        check_diagnosis_alert(prom, args.target, feed.addr, verdict, report, not args.stand_in)
    else:
        # Verdict none: neither diagnosis alert may fire, over several evaluations.
        time.sleep(5)
        for name in DIAGNOSIS_ALERT.values():
            mine = [a for a in firing(prom, name) if a["labels"].get("instance") == feed.addr]
            assert not mine, f"{name} fires on verdict none: {mine}"
        log(f"{feed.name}: no diagnosis alert on verdict none")
    return verdict


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faultline", default=str(REPO / "target" / "debug" / "faultline"))
    ap.add_argument("--case", action="append", dest="cases",
                    help="a perf-faults case directory (trace.txt.zst + truth.json), repeatable; "
                         f"default: {', '.join(DEFAULT_CASES)} (one faultline each, scraped together)")
    ap.add_argument("--prometheus-bin", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    # native by default: a debug build compiles the WASM guest for ~20 s at startup, and how
    # the engine is hosted does not change what reaches Prometheus.
    ap.add_argument("--engine", default="native", choices=["native", "wasm"], help="faultline's [engine] kind")
    ap.add_argument("--target", default="mariadb", help="target name given to the traced server")
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for each final report")
    ap.add_argument("--stand-in", action="store_true", help="serve static metrics instead of faultline (harness self-check)")
    ap.add_argument("--require-truth", action="store_true",
                    help="also fail when faultline's verdict differs from the case's truth.json class")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs, TSDB)")
    args = ap.parse_args()

    if not Path(args.prometheus_bin).exists():
        print(f"SKIPPED: no Prometheus server at {args.prometheus_bin} (apt-get install prometheus)", file=sys.stderr)
        return SKIP
    traces = shared_traces.root() / "perf-faults"
    args.cases = [Path(c) for c in (args.cases or [traces / c for c in DEFAULT_CASES])]
    if not args.stand_in:
        if not Path(args.faultline).exists():
            print(f"SKIPPED: no faultline binary at {args.faultline} (cargo build -p faultline)", file=sys.stderr)
            return SKIP
        missing = [str(c) for c in args.cases if not (c / "truth.json").exists()]
        if missing:
            if shared_traces.required():
                print(f"FAIL: no trace case at {', '.join(missing)} (FAULTLINE_REQUIRE_TRACES is set)",
                      file=sys.stderr)
                return 1
            print(f"SKIPPED: no trace case at {', '.join(missing)}", file=sys.stderr)
            return SKIP

    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="faultline-live-")
    procs = []
    ok = False
    try:
        feeds = start_feeds(args, tmp)
        procs += [f.proc for f in feeds]
        for f in feeds:
            wait_until(f"the metrics endpoint of {f.name}", 120,
                       lambda f=f: not f.proc.alive() and (_ for _ in ()).throw(RuntimeError(f"{f.proc.name} exited early"))
                       or http_get(f"http://{f.addr}/metrics"))

        prom_port = free_port()
        prom = f"http://127.0.0.1:{prom_port}"
        prom_cfg = prometheus_config(tmp, [f.addr for f in feeds], test_rules(tmp))
        promtool = shutil.which("promtool")
        if promtool:
            subprocess.run([promtool, "check", "config", str(prom_cfg)], check=True, stdout=subprocess.DEVNULL)
        procs.append(Proc("prometheus", [args.prometheus_bin, f"--config.file={prom_cfg}",
                                         f"--storage.tsdb.path={Path(tmp) / 'tsdb'}",
                                         f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"], tmp))
        wait_until("Prometheus ready", 30, lambda: http_get(f"{prom}/-/ready"))
        wait_until("every faultline scraped (up == 1)", 30,
                   lambda: sum(r["value"][1] == "1" for r in query(prom, 'up{job="faultline"}')) == len(feeds))
        log(f"Prometheus scrapes {len(feeds)} metrics endpoint(s)")

        verdicts = {f.name: check_feed(prom, f, args) for f in feeds}
        check_hosts_count(prom, feeds, verdicts, args.target)

        # Rates need a few scrapes of the counters before the dashboard check.
        time.sleep(3)
        failures = dashboard_queries.check(prom, {"target": args.target, "instance": ".*", "host": ".*"})
        assert not failures, "dashboard queries failed:\n  " + "\n  ".join(failures)

        for f in feeds:
            log(f"{f.proc.name} stopped with exit code {f.proc.stop()}")
        wait_until("FaultlineDown firing for every instance", 30,
                   lambda: {a["labels"]["instance"] for a in firing(prom, "FaultlineDown")} == {f.addr for f in feeds})
        log("FaultlineDown firing after faultline stopped")
        ok = True
        log(f"PASS in {time.monotonic() - t0:.1f}s: verdicts {verdicts}")
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
