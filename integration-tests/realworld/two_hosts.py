#!/usr/bin/env python3
"""One service on two hosts through OTLP, as a Collector gateway forwards them: a recorded
fault case as this host's processes, a fault-free control (its phase split moved onto the
fault's start) as another host's, both exported by the real OpenTelemetry Python SDK over
gRPC into one `faultline run`; then the on-demand diagnosis at fault + 10 s of the target
of each host (`NAME` and `NAME@HOST`, or with `--host-target` the target `NAME-HOST`
configured with `hosts = [HOST]`).

Why: PerfCompass reads a fault that reaches every thread of a target as the environment's.
Merged into one target, a CPU cap on one host reaches a subset of the service's threads
and reads as a bug; the plugin keeps each host's threads a target of their own.

    python3 integration-tests/realworld/two_hosts.py --bin target/release/faultline \
        --fault ../shared/traces/perf-faults/mariadb_cpu_cap \
        --control ../shared/traces/perf-faults/mariadb_control

Exit status 0 when the fault's host reads as the fault's class and the other host `none`
(about 2 minutes for the two MariaDB traces, 1.8 M records)."""
import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rw import otlp_case  # noqa: E402

OTHER_HOST = "peer-2"


def send(trace, service, host, shift_ns, grpc, sent):
    """Exports `trace` as `service`'s processes on `host`, `shift_ns` later;
    `sent[host]` is the number of records exported."""
    sent[host] = otlp_case.send(trace, service, grpc, host=host, shift_ns=shift_ns)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="target/release/faultline")
    ap.add_argument("--fault", required=True, help="case directory (trace.txt.zst, truth.json)")
    ap.add_argument("--control", required=True, help="fault-free case directory of the same service")
    ap.add_argument("--out", help="directory for the plugin's config, log and reports (default: a temporary one)")
    ap.add_argument("--host-target", action="store_true",
                    help="configure the other host's processes as a target of their own (hosts = [HOST]) "
                         "instead of NAME@HOST")
    args = ap.parse_args()
    fault = json.load(open(os.path.join(args.fault, "truth.json")))
    control = json.load(open(os.path.join(args.control, "truth.json")))
    service = fault["app"]
    shift = fault["fault_start_ns"] - control["nominal_split_ns"]
    out = args.out or tempfile.mkdtemp(prefix="faultline-two-hosts-")
    os.makedirs(out, exist_ok=True)
    here = socket.gethostname()
    peer_target = f"{service}-{OTHER_HOST}" if args.host_target else f"{service}@{OTHER_HOST}"
    host_targets = [(peer_target, OTHER_HOST)] if args.host_target else []
    proc, _, grpc, metrics = otlp_case.start_plugin(args.bin, out, service, host_targets)
    try:
        sent, t0 = {}, time.time()
        senders = [
            threading.Thread(target=send, args=(os.path.join(args.fault, fault["trace_file"]), service, here, 0, grpc, sent)),
            threading.Thread(target=send, args=(os.path.join(args.control, control["trace_file"]), service, OTHER_HOST, shift, grpc, sent)),
        ]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        deadline = time.time() + 120
        while (time.time() < deadline
               and otlp_case.metric(metrics, "faultline_engine_events_total")
               < otlp_case.metric(metrics, "faultline_events_received_total")):
            time.sleep(0.5)
        received = otlp_case.metric(metrics, "faultline_events_received_total")
        dropped = otlp_case.metric(metrics, "faultline_events_dropped_total")
        print(f"sent {sent} in {time.time() - t0:.0f} s; received {received:.0f}, dropped {dropped:.0f}")
        at = fault["fault_start_ns"] + 10 * 10**9
        verdicts = {}
        for host, target, want in [(here, service, fault["class"]), (OTHER_HOST, peer_target, "none")]:
            q = urllib.parse.urlencode({"target": target, "at_ns": at})
            req = urllib.request.Request(f"http://{metrics}/trigger?{q}", method="POST", data=b"")
            try:
                r = json.loads(urllib.request.urlopen(req, timeout=60).read())
            except OSError as e:
                print(f"{target}: no report ({e})")
                verdicts[target] = (None, want)
                continue
            top = [s["syscall"] for s in r.get("top_syscalls_by_time", [])[:3]]
            print(f"{target} ({host}): {r.get('verdict')} (want {want}), τ {r.get('impact_factor')}, "
                  f"threads {r.get('threads')}, top {top}, {r.get('subsystem')}")
            verdicts[target] = (r.get("verdict"), want)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    ok = all(got == want for got, want in verdicts.values())
    print("PASS" if ok else "FAIL", f"(plugin files in {out})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
