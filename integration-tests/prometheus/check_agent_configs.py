#!/usr/bin/env python3
"""Static checks of the shipped agent configs (Vector, OpenTelemetry Collector, Grafana
provisioning), since neither Vector nor the Collector can be installed here to validate them.

Why: a pipeline that references an undefined component, or a parsing regex that does not
match real `perf script` output, fails only on the customer's host. Checks:
  * every file parses as YAML;
  * every Vector `inputs` and every Collector pipeline entry names a defined component;
  * the Vector sink posts OTLP (codec otlp) to faultline's /v1/logs and the scrape targets
    faultline's metrics address;
  * the Vector remap's regex parses every line of a real perf-script trace (when the shared
    traces are present: shared_traces.py; a failure when absent under
    FAULTLINE_REQUIRE_TRACES=1) and yields the fields faultline's OTLP mapping needs.
Exit 0 = pass, 1 = a check failed, 77 = skipped (PyYAML missing).
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import shared_traces

try:
    import yaml
except ImportError:
    print("SKIPPED: PyYAML is not installed (pip install pyyaml)", file=sys.stderr)
    sys.exit(77)

REPO = Path(__file__).resolve().parents[2]
TRACE = shared_traces.root() / "perf-faults" / "mariadb_cpu_cap" / "trace.txt.zst"
FAILURES = []


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)


def load(rel):
    return yaml.safe_load((REPO / rel).read_text())


def vector():
    cfg = load("config/vector.yaml")
    defined = {}
    for kind in ("sources", "transforms", "sinks"):
        for name, comp in (cfg.get(kind) or {}).items():
            defined[name] = (kind, comp)
    for name, (kind, comp) in defined.items():
        for inp in comp.get("inputs", []):
            base = inp.split(".")[0]
            check(base in defined and defined[base][0] != "sinks",
                  f"vector: {kind}.{name} reads undefined input {inp}")
            if "." in inp:
                # Named outputs exist on the opentelemetry source only (logs/metrics/traces).
                check(defined.get(base, ("", {}))[1].get("type") == "opentelemetry"
                      and inp.split(".", 1)[1] in ("logs", "metrics", "traces"),
                      f"vector: {name} reads unknown named output {inp}")
    sink = cfg["sinks"]["faultline"]
    check(sink["type"] == "opentelemetry", "vector: faultline sink must be opentelemetry")
    check(sink["protocol"]["type"] == "http", "vector: protocol.type must be http")
    check(sink["protocol"]["uri"] == "http://127.0.0.1:4318/v1/logs", "vector: uri must be faultline's default /v1/logs")
    check(sink["protocol"]["encoding"]["codec"] == "otlp", "vector: protocol.encoding.codec must be otlp")
    scrape = cfg["sources"]["faultline_metrics"]
    check(scrape["type"] == "prometheus_scrape", "vector: faultline_metrics must be prometheus_scrape")
    check(scrape["endpoints"] == ["http://127.0.0.1:9464/metrics"], "vector: scrape faultline's default metrics address")
    return cfg["transforms"]["perf_to_otlp"]["source"]


def vrl_regex_on_real_lines(vrl):
    m = re.search(r"parse_regex\(\.message, r'(.*?)'\)", vrl)
    check(m is not None, "vector: remap has no parse_regex(.message, r'...')")
    if not m:
        return
    rx = re.compile(m.group(1))
    for name in ("pid", "tid", "secs", "nanos", "phase", "nr", "ret"):
        check(name in rx.groupindex, f"vector: remap regex lacks group {name}")
    if not TRACE.exists() or not shutil.which("zstd"):
        absent = f"{TRACE} or the zstd program is absent: regex NOT tried on a real trace"
        check(not shared_traces.required(), f"{absent} (FAULTLINE_REQUIRE_TRACES is set)")
        print(f"NOTE: {absent}")
        return
    lines = subprocess.run(f"zstd -dc '{TRACE}' | head -n 20000", shell=True, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    bad = [l for l in lines if not rx.match(l)]
    check(not bad, f"vector: remap regex misses {len(bad)} of {len(lines)} real lines, e.g. {bad[:2]}")
    exits = [rx.match(l) for l in lines if "sys_exit" in l]
    check(all(m and m.group("ret") is not None for m in exits), "vector: regex loses sys_exit return values")
    check(lines, f"vector: no lines decompressed from {TRACE}")
    print(f"vector remap regex parses {len(lines)} real perf-script lines")


def otelcol():
    cfg = load("config/otelcol.yaml")
    for pname, p in cfg["service"]["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for comp in p.get(kind, []):
                check(comp in (cfg.get(kind) or {}), f"otelcol: pipeline {pname} uses undefined {kind[:-1]} {comp}")
    used = {c for p in cfg["service"]["pipelines"].values() for k in ("receivers", "processors", "exporters") for c in p.get(k, [])}
    for kind in ("receivers", "processors", "exporters"):
        for comp in cfg.get(kind) or {}:
            check(comp in used, f"otelcol: {kind[:-1]} {comp} is defined but unused")
    exp = cfg["exporters"]["otlp/faultline"]
    check(exp["endpoint"] == "127.0.0.1:14317", "otelcol: otlp/faultline must point at faultline's gRPC port")
    scrape = cfg["receivers"]["prometheus/faultline"]["config"]["scrape_configs"][0]
    check(scrape["static_configs"][0]["targets"] == ["127.0.0.1:9464"], "otelcol: scrape faultline's default metrics address")
    # The packet-loss test's readings: both default metric names kept, once a second, to faultline.
    tcp = cfg["receivers"]["prometheus/node_tcp"]["config"]["scrape_configs"][0]
    check(tcp["scrape_interval"] == "1s", "otelcol: node_tcp must scrape once a second")
    keep = re.compile(tcp["metric_relabel_configs"][0]["regex"])
    for name in ("node_netstat_Tcp_OutSegs", "node_netstat_Tcp_RetransSegs"):
        check(keep.fullmatch(name), f"otelcol: node_tcp's relabel drops {name}")
    check(not keep.fullmatch("node_netstat_Tcp_InSegs"), "otelcol: node_tcp keeps more than the two counters")
    check(cfg["service"]["pipelines"]["metrics/tcp_segments"]["exporters"] == ["otlp/faultline"],
          "otelcol: metrics/tcp_segments must export to faultline")
    # The counters reach a target only when the service.name the Collector sets routes to one
    # in the shipped faultline config (else they are dropped as no_target).
    named = [a["value"] for a in cfg["processors"]["resource/faultline_target"]["attributes"]
             if a["key"] == "service.name"]
    try:
        import tomllib
        targets = tomllib.loads((REPO / "config/faultline.toml").read_text()).get("targets", [])
        services = {s for t in targets for s in t.get("service_names", [])}
        check(named and named[0] in services,
              f"otelcol: resource/faultline_target sets service.name {named} that no [[targets]] service_names of config/faultline.toml routes")
    except ImportError:
        print("NOTE: tomllib (Python 3.11+) absent: the Collector's service.name was not checked against config/faultline.toml")


def grafana_provisioning():
    ds = load("dashboards/provisioning/datasources/faultline.yaml")
    check(ds["apiVersion"] == 1 and ds["datasources"][0]["type"] == "prometheus", "grafana: datasource provisioning")
    db = load("dashboards/provisioning/dashboards/faultline.yaml")
    check(db["apiVersion"] == 1 and db["providers"][0]["type"] == "file", "grafana: dashboard provisioning")


def main():
    vrl = vector()
    vrl_regex_on_real_lines(vrl)
    otelcol()
    grafana_provisioning()
    for f in FAILURES:
        print("FAIL", f, file=sys.stderr)
    print(f"agent configs: {len(FAILURES)} failure(s)")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
