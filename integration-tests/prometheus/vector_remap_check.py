#!/usr/bin/env python3
"""Opt-in check of config/vector.yaml's remap against the real VRL compiler and faultline.

Why: Vector cannot be installed here. This builds vector-remap/ (the VRL compiler Vector
embeds, ~350 crates, built once into --target-dir), runs the shipped `perf_to_otlp` program
on real `perf script` lines, and posts the resulting OTLP records to a running
`faultline run` over OTLP/HTTP (JSON, the same records Vector's `otlp` codec would send as
protobuf). Passes when VRL compiles the program, every syscall line becomes a record, the
noise line is dropped, and faultline counts every record as received with no decode error.

    python3 integration-tests/prometheus/vector_remap_check.py --faultline target/debug/faultline

Exit 0 = pass, 1 = fail, 77 = skipped (cargo, the trace or faultline missing, or the
helper cannot be built, e.g. offline).
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import shared_traces
from live_test import free_port, http_get, wait_until, log

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SKIP = 77


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--faultline", default=str(REPO / "target" / "debug" / "faultline"))
    ap.add_argument("--trace", default=str(shared_traces.root() / "perf-faults" / "mariadb_cpu_cap" / "trace.txt.zst"))
    ap.add_argument("--lines", type=int, default=5000, help="perf-script lines to push through")
    ap.add_argument("--target-dir", default=os.path.join(tempfile.gettempdir(), "faultline-vector-remap-target"))
    args = ap.parse_args()

    for what, ok in (("cargo", shutil.which("cargo")), ("zstd", shutil.which("zstd")),
                     (args.trace, Path(args.trace).exists()), (args.faultline, Path(args.faultline).exists())):
        if not ok:
            print(f"SKIPPED: {what} not available", file=sys.stderr)
            return SKIP

    log("building the VRL helper (first time: several minutes)")
    build = subprocess.run(["cargo", "build", "--quiet", "--manifest-path", str(HERE / "vector-remap" / "Cargo.toml"),
                            "--target-dir", args.target_dir], capture_output=True, text=True)
    if build.returncode != 0:
        print(f"SKIPPED: cannot build the VRL helper:\n{build.stderr[-2000:]}", file=sys.stderr)
        return SKIP
    helper = Path(args.target_dir) / "debug" / "faultline-vector-remap-check"

    lines = subprocess.run(f"zstd -dc '{args.trace}' | head -n {args.lines}", shell=True, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    # A line that is not a syscall event (perf prints such) must be dropped, not forwarded.
    stdin = "\n".join(lines + ["perf: lost 3 chunks!"]) + "\n"
    run = subprocess.run([str(helper), str(REPO / "config" / "vector.yaml")], input=stdin,
                         capture_output=True, text=True)
    if run.returncode != 0:
        log(f"FAIL: VRL rejects the remap program of config/vector.yaml:\n{run.stderr}")
        return 1
    events = [json.loads(l) for l in run.stdout.splitlines()]
    log(f"VRL: {run.stderr.strip().splitlines()[-1]}")
    if len(events) != len(lines) or f"aborted=1" not in run.stderr:
        log(f"FAIL: expected {len(lines)} records and 1 dropped line, got {len(events)}: {run.stderr}")
        return 1

    tmp = tempfile.mkdtemp(prefix="faultline-remap-")
    http_addr, metrics_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    cfg = Path(tmp) / "faultline.toml"
    cfg.write_text(f"""[engine]
kind = "native"

[sources.otlp]
enabled = true
grpc = "127.0.0.1:{free_port()}"
http = "{http_addr}"

[sinks.prometheus]
listen = "{metrics_addr}"
""")
    logf = open(Path(tmp) / "faultline.log", "wb")
    proc = subprocess.Popen([args.faultline, "run", "--config", str(cfg)], stdout=logf, stderr=subprocess.STDOUT)
    try:
        wait_until("faultline's metrics endpoint", 120, lambda: http_get(f"http://{metrics_addr}/healthz"))
        body = json.dumps({"resourceLogs": [rl for e in events for rl in e["resourceLogs"]]}).encode()
        req = urllib.request.Request(f"http://{http_addr}/v1/logs", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            answer = json.loads(r.read() or b"{}")
        if answer.get("partialSuccess", {}).get("rejectedLogRecords"):
            log(f"FAIL: faultline rejected records: {answer}")
            return 1

        def counted():
            text = http_get(f"http://{metrics_addr}/metrics") or ""
            vals = {}
            for l in text.splitlines():
                for name in ("faultline_events_received_total", "faultline_decode_errors_total"):
                    if l.startswith(name + '{source="otlp_http"}'):
                        vals[name] = float(l.split()[-1])
            return vals if vals.get("faultline_events_received_total") == len(events) else None

        vals = wait_until(f"faultline to count {len(events)} received events", 30, counted)
        if vals.get("faultline_decode_errors_total", 0) != 0:
            log(f"FAIL: decode errors: {vals}")
            return 1
        log(f"PASS: {len(events)} records from the Vector remap accepted by faultline, no decode error")
        return 0
    except TimeoutError as e:
        log(f"FAIL: {e}\n{(Path(tmp) / 'faultline.log').read_text()[-2000:]}")
        return 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        logf.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
