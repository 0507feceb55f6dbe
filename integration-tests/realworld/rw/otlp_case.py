"""One recorded case fed through the OTLP path: every `perf script` line of its trace becomes
an OTLP log record (one half of a call: `syscall.phase`, `syscall.nr`, `thread.id`, the
record's timestamp), exported by the real OpenTelemetry Python SDK over gRPC to a running
`faultline run`, which is then asked for the on-demand diagnosis at fault + 10 s. The
verdict must match the offline `analyze` of the same trace: the accuracy holds for OTLP
input, not only for perf text.

When the case recorded the server namespace's TCP segments (`tcp.txt`), they follow as
OTLP metrics, the way node_exporter's counters reach faultline through a Collector:
running totals in gauges named `node_netstat_Tcp_OutSegs` and `node_netstat_Tcp_RetransSegs`,
one export per reading, by the SDK's own OTLP metric exporter (the SDK's instruments
stamp readings with the present time; these carry the recording's)."""
import json
import os
import re
import subprocess
import time
import urllib.request

from .ports import free_addrs

LINE = re.compile(r"^\s*(\S+)\s+(\d+)/(\d+)\s+(\d+)\.(\d+):\s+raw_syscalls:sys_(enter|exit):\s+NR\s+(-?\d+)(?:.*=\s*(-?\d+))?")


def records(trace):
    """(pid, tid, ts_ns, phase, nr, ret) of every line of a zstd perf-script trace."""
    p = subprocess.Popen(["zstd", "-dcq", trace], stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        m = LINE.match(line)
        if not m:
            continue
        _, pid, tid, s, ns, phase, nr, ret = m.groups()
        yield int(pid), int(tid), int(s) * 10**9 + int(ns.ljust(9, "0")[:9]), phase, int(nr), ret
    p.wait()


def start_plugin(binary, out_dir, target, host_targets=()):
    """Starts `faultline run` with an OTLP source on free ports; returns the process, the
    JSON reports' path, the gRPC address to export to and the metrics address.
    `host_targets`: (name, host) of targets of `target`'s service on one host, matched
    before the service's own."""
    config = os.path.join(out_dir, "otlp.toml")
    reports = os.path.join(out_dir, "otlp_reports.jsonl")
    grpc, http, metrics = free_addrs(3)
    blocks = "".join(
        f'[[targets]]\nname = "{name}"\nservice_names = ["{target}"]\nhosts = ["{host}"]\n\n'
        for name, host in host_targets
    )
    with open(config, "w") as f:
        f.write(
            blocks +
            f'[[targets]]\nname = "{target}"\nservice_names = ["{target}"]\n\n'
            f'[sources.otlp]\nenabled = true\ngrpc = "{grpc}"\nhttp = "{http}"\n\n'
            f'[pipeline]\nqueue_capacity = 4096\n\n'
            f'[sinks.prometheus]\nlisten = "{metrics}"\n\n[sinks.json]\nenabled = true\npath = "{reports}"\n'
        )
    proc = subprocess.Popen([binary, "run", "--config", config], stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(out_dir, "otlp.log"), "w"))
    # A debug build compiles the WASM engine with an unoptimised Cranelift: seconds when
    # idle, over 10 s on a busy 2-core machine (a CI run once timed out at 10 s).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://{metrics}/healthz", timeout=1).read()
            # Ours answered, as far as one can tell: a plugin that cannot bind its
            # port exits, and then another one took the port first.
            if proc.poll() is None:
                return proc, reports, grpc, metrics
            break
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("faultline run did not start within 60 s or exited (see otlp.log)")


def metric(metrics, name):
    text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def send(trace, target, grpc, host=None, shift_ns=0):
    """Exports the trace with one LoggerProvider per process (process.pid is a resource
    attribute, and host.name when `host` is given), each record `shift_ns` later than
    recorded; returns the number of records sent."""
    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    providers, loggers, sent = {}, {}, 0
    # FL_OTLP_ONE_PROVIDER=1: one provider for every process (the pid a record attribute),
    # so requests follow the trace's time order across processes (an experiment knob).
    one = os.environ.get("FL_OTLP_ONE_PROVIDER") == "1"
    for pid, tid, ts, phase, nr, ret in records(trace):
        logger = loggers.get(0 if one else pid)
        if logger is None:
            res = {"service.name": target} if one else {"service.name": target, "process.pid": pid}
            if host is not None:
                res["host.name"] = host
            provider = LoggerProvider(resource=Resource.create(res))
            # A queue large enough that the SDK never drops (it drops silently when full).
            provider.add_log_record_processor(BatchLogRecordProcessor(
                OTLPLogExporter(endpoint=f"http://{grpc}", insecure=True),
                max_queue_size=1 << 20, max_export_batch_size=2048, schedule_delay_millis=200))
            providers[0 if one else pid], logger = provider, provider.get_logger("faultline.realworld")
            loggers[0 if one else pid] = logger
        attrs = {"thread.id": tid, "syscall.nr": nr, "syscall.phase": phase}
        if one:
            attrs["process.pid"] = pid
        if ret is not None:
            attrs["syscall.ret"] = int(ret)
        logger.emit(LogRecord(timestamp=ts + shift_ns, attributes=attrs))
        sent += 1
    for p in providers.values():
        p.force_flush(timeout_millis=120_000)
        p.shutdown()
    return sent


SEGMENTS = re.compile(r"^\s*\S+\s+(\d+)/\d+\s+(\d+)\.(\d+):\s+faultline:tcp_segments:\s+sent=(\d+)\s+retransmitted=(\d+)")


def segment_samples(path):
    """(pid, ts_ns, sent, retransmitted) of every sample of a `tcp.txt`."""
    with open(path) as f:
        for line in f:
            m = SEGMENTS.match(line)
            if m:
                pid, s, ns, sent, retr = m.groups()
                yield int(pid), int(s) * 10**9 + int(ns.ljust(9, "0")[:9]), int(sent), int(retr)


def send_segments(path, target, grpc):
    """Exports the samples as node_exporter's running totals, a reference reading 1 s
    before the first (the first reading of a series is faultline's reference); returns the
    number of readings exported."""
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import (Gauge, Metric, MetricExportResult, MetricsData,
                                                  NumberDataPoint, ResourceMetrics, ScopeMetrics)
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    samples = list(segment_samples(path))
    if not samples:
        return 0
    exporter = OTLPMetricExporter(endpoint=f"http://{grpc}", insecure=True)
    scope = InstrumentationScope("faultline.realworld")
    pid, first_ts = samples[0][0], samples[0][1]
    totals = [1_000_000, 1_000]  # an arbitrary start: only differences count
    readings = [(first_ts - 10**9, *totals)]
    for _, ts, sent, retr in samples:
        totals = [totals[0] + sent, totals[1] + retr]
        readings.append((ts, *totals))
    resource = Resource.create({"service.name": target, "process.pid": pid})
    for ts, sent, retr in readings:
        def gauge(name, value):
            point = NumberDataPoint(attributes={}, start_time_unix_nano=0, time_unix_nano=ts, value=value)
            return Metric(name=name, description="", unit="", data=Gauge(data_points=[point]))
        data = MetricsData(resource_metrics=[ResourceMetrics(resource=resource, schema_url="", scope_metrics=[
            ScopeMetrics(scope=scope, schema_url="", metrics=[
                gauge("node_netstat_Tcp_OutSegs", float(sent)),
                gauge("node_netstat_Tcp_RetransSegs", float(retr))])])])
        if exporter.export(data) != MetricExportResult.SUCCESS:
            raise RuntimeError(f"the TCP segment reading at {ts} was not exported")
    exporter.shutdown()
    return len(readings)


def run(binary, case_dir, truth, alarm_after_s=10.0):
    """Returns the OTLP path's on-demand diagnosis and the event accounting."""
    target = truth["app"]
    proc, _, grpc, metrics = start_plugin(binary, case_dir, target)
    try:
        t0 = time.time()
        sent = send(os.path.join(case_dir, truth["trace_file"]), target, grpc)
        tcp = os.path.join(case_dir, "tcp.txt")
        readings = send_segments(tcp, target, grpc) if os.path.exists(tcp) else 0
        took = time.time() - t0
        deadline = time.time() + 60
        while (time.time() < deadline
               and metric(metrics, "faultline_engine_events_total") < metric(metrics, "faultline_events_received_total")):
            time.sleep(0.5)
        received = metric(metrics, "faultline_events_received_total")
        dropped = metric(metrics, "faultline_events_dropped_total")
        rejected = metric(metrics, "faultline_decode_errors_total")
        segment_records = metric(metrics, "faultline_engine_segment_records_total")
        # A control has no fault: its alarm comes where a fault phase would have begun.
        start = truth["fault_start_ns"] if truth.get("fault_start_ns") is not None else truth["nominal_split_ns"]
        at = int(start + alarm_after_s * 1e9)
        req = urllib.request.Request(f"http://{metrics}/trigger?target={target}&at_ns={at}", method="POST", data=b"")
        report = json.loads(urllib.request.urlopen(req, timeout=60).read())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"sent": sent, "segment_readings": readings, "segment_records": segment_records, "received": received, "dropped": dropped, "rejected": rejected, "send_seconds": round(took, 1),
            "verdict": report.get("verdict"), "impact_factor": report.get("impact_factor"),
            "onset_dispersion_seconds": report.get("onset_dispersion_seconds"),
            "top_syscalls_by_time": [s["syscall"] for s in report.get("top_syscalls_by_time", [])[:3]],
            "subsystem": report.get("subsystem"), "decided_by": report.get("decided_by")}
