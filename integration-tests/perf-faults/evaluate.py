#!/usr/bin/env python3
"""Runs `faultline analyze` on every case of the real MariaDB fault traces
(<traces>/perf-faults, <traces> as integration-tests/prometheus/shared_traces.py finds it:
$FAULTLINE_TRACES, else ../shared/traces beside the repository, else /work/shared/traces)
and prints the Markdown accuracy table against each
case's truth.json — the same evaluation as the real-world harness
(integration-tests/realworld/rw/diagnose.py), on traces recorded elsewhere.

Usage: evaluate.py [--bin target/release/faultline] [--cases DIR] [--mode continuous|on_demand|calibrated] [-- analyze args]
  continuous: the engine's own detection (first anomaly after the fault start counts;
              any non-`none` anomaly before it, or in a control, is a false alarm)
  on_demand:  an external alarm 10 s after the fault start (the paper's mode)
  calibrated: on demand with α/β calibrated on the CPU-cap case
Exit status 0; the table is the result (this is an evaluation, not a test).
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "realworld"))
sys.path.insert(0, os.path.join(HERE, "..", "prometheus"))

from rw import diagnose  # noqa: E402
import shared_traces  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(HERE, "../../target/release/faultline"))
    ap.add_argument("--cases", default=str(shared_traces.root() / "perf-faults"))
    ap.add_argument("--mode", choices=["continuous", "on_demand", "calibrated"], default=None,
                    help="one mode (default: all three)")
    ap.add_argument("extra", nargs="*", help="extra arguments for analyze (e.g. --set alpha_seconds=1)")
    args = ap.parse_args()
    modes = [m for m in ("continuous", "on_demand") if args.mode in (None, m)]
    rows = diagnose.evaluate(args.bin, args.cases, modes=modes, calibrated=args.mode in (None, "calibrated"),
                             extra=args.extra)
    for mode in ("continuous", "on_demand", "calibrated"):
        if any(r["mode"] == mode for r in rows):
            print(f"\n## {mode}\n\n{diagnose.table(rows, mode)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
