#!/usr/bin/env python3
"""Send this machine's TCP segment counters (`Tcp: OutSegs` and `Tcp: RetransSegs` of
/proc/self/net/snmp, the kernel's account for this process's network namespace) to
faultline's OTLP receiver as metrics, with the real OpenTelemetry Python SDK: two
observable counters named as node_exporter names them, read `--readings` times
`--interval` seconds apart (each reading is one collection and one export).

faultline turns each pair of readings into a record of the segments sent and
retransmitted in between (docs/otlp-mapping.md, "TCP segments"). With `--expect-out FILE`
it writes what the counters read, one JSON object per reading ({sent, retransmitted}),
so a test can compare the records with the kernel's own figures. `--connect HOST:PORT`
opens a TCP connection before each reading so the counters move.

With `--node-exporter URL` the readings are scrapes of a real node_exporter's `/metrics`
instead, exported as the OpenTelemetry Collector's `prometheus` receiver forwards
node_exporter's untyped counters: gauges with the scrape's time, under node_exporter's
exact names (built as the SDK's metrics data and sent by the SDK's OTLP exporter).

Setup: pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-grpc \
           opentelemetry-exporter-otlp-proto-http

Example:
  send_tcp_segments.py --endpoint http://127.0.0.1:4318 --protocol http --readings 5
"""

import argparse
import json
import math
import socket
import sys
import time

SENT = "node_netstat_Tcp_OutSegs"
RETRANSMITTED = "node_netstat_Tcp_RetransSegs"


def tcp_counters():
    """(OutSegs, RetransSegs) from the kernel's table for this network namespace."""
    with open("/proc/self/net/snmp") as f:
        lines = [l.split() for l in f if l.startswith("Tcp:")]
    header, values = lines[0], lines[1]
    row = dict(zip(header[1:], (int(v) for v in values[1:])))
    return row["OutSegs"], row["RetransSegs"]


def scrape(url):
    """(OutSegs, RetransSegs) from node_exporter's text exposition, and the scrape time."""
    import urllib.request

    t = time.time_ns()
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in (SENT, RETRANSMITTED):
            values[name] = int(float(value))
    return t, values[SENT], values[RETRANSMITTED]


def export_scrape(exp, args, t, sent, retr):
    """One scrape as the Collector's prometheus receiver forwards it: two gauges, one time."""
    from opentelemetry.sdk.metrics.export import (Gauge, Metric, MetricExportResult, MetricsData,
                                                  NumberDataPoint, ResourceMetrics, ScopeMetrics)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    def gauge(name, value):
        point = NumberDataPoint(attributes={}, start_time_unix_nano=0, time_unix_nano=t, value=float(value))
        return Metric(name=name, description="", unit="", data=Gauge(data_points=[point]))

    resource = Resource.create({"service.name": args.service, "process.pid": args.pid,
                                "service.instance.id": "127.0.0.1:9100"})
    data = MetricsData(resource_metrics=[ResourceMetrics(resource=resource, schema_url="", scope_metrics=[
        ScopeMetrics(scope=InstrumentationScope("otelcol/prometheusreceiver"), schema_url="",
                     metrics=[gauge(SENT, sent), gauge(RETRANSMITTED, retr)])])])
    return exp.export(data) == MetricExportResult.SUCCESS


def from_node_exporter(args):
    exp = exporter(args)
    readings, ok = [], True
    for i in range(args.readings):
        if args.connect:
            connect(args.connect)
        t, sent, retr = scrape(args.node_exporter)
        readings.append({"sent": sent, "retransmitted": retr})
        ok = export_scrape(exp, args, t, sent, retr) and ok
        if i + 1 < args.readings:
            time.sleep(args.interval)
    exp.shutdown()
    return readings, ok


def connect(target):
    host, port = target.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5):
        pass


def exporter(args):
    from opentelemetry.sdk.metrics import ObservableCounter
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    temporality = {
        ObservableCounter: AggregationTemporality.DELTA
        if args.temporality == "delta"
        else AggregationTemporality.CUMULATIVE
    }
    if args.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=args.endpoint, insecure=True, preferred_temporality=temporality)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=args.endpoint.rstrip("/") + "/v1/metrics", preferred_temporality=temporality)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", required=True, help="grpc: http://host:4317; http: http://host:4318")
    p.add_argument("--protocol", choices=["grpc", "http"], default="http")
    p.add_argument("--temporality", choices=["cumulative", "delta"], default="cumulative")
    p.add_argument("--service", default="nginx")
    p.add_argument("--pid", type=int, default=4242)
    p.add_argument("--host", default=socket.gethostname(), help="host.name of the resource (default: this host's)")
    p.add_argument("--readings", type=int, default=5)
    p.add_argument("--interval", type=float, default=0.3, help="seconds between readings")
    p.add_argument("--connect", help="HOST:PORT to open a TCP connection to before each reading")
    p.add_argument("--node-exporter", help="scrape this node_exporter /metrics URL for the readings")
    p.add_argument("--expect-out", help="write the counters read here (JSON lines)")
    args = p.parse_args()
    if args.node_exporter:
        readings, ok = from_node_exporter(args)
        write(args, readings)
        print(json.dumps({"readings": len(readings), "flushed": bool(ok)}))
        return 0 if ok else 1

    from opentelemetry.metrics import Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    # One kernel read per collection, shared by both callbacks, so the two metrics of a
    # reading are one snapshot (the SDK calls the callbacks one after the other).
    readings = []

    def snapshot():
        if not readings or readings[-1]["used"] == 2:
            sent, retr = tcp_counters()
            readings.append({"sent": sent, "retransmitted": retr, "used": 0})
        readings[-1]["used"] += 1
        return readings[-1]

    def sent_cb(_options):
        yield Observation(snapshot()["sent"])

    def retr_cb(_options):
        yield Observation(snapshot()["retransmitted"])

    reader = PeriodicExportingMetricReader(exporter(args), export_interval_millis=math.inf)
    provider = MeterProvider(
        resource=Resource.create(
            {"service.name": args.service, "host.name": args.host, "process.pid": args.pid}
        ),
        metric_readers=[reader],
    )
    meter = provider.get_meter("faultline.send_tcp_segments")
    meter.create_observable_counter(SENT, callbacks=[sent_cb], unit="{segment}")
    meter.create_observable_counter(RETRANSMITTED, callbacks=[retr_cb], unit="{segment}")
    ok = True
    for i in range(args.readings):
        if args.connect:
            connect(args.connect)
        ok = reader.force_flush(timeout_millis=20_000) and ok
        if i + 1 < args.readings:
            time.sleep(args.interval)
    provider.shutdown()
    write(args, readings)
    print(json.dumps({"readings": len(readings), "flushed": bool(ok)}))
    return 0 if ok else 1


def write(args, readings):
    if args.expect_out:
        with open(args.expect_out, "w") as f:
            for r in readings:
                f.write(json.dumps({"sent": r["sent"], "retransmitted": r["retransmitted"]}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
