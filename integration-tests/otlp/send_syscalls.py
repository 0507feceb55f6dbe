#!/usr/bin/env python3
"""Send synthetic syscall events to faultline's OTLP receiver with the real OpenTelemetry
Python SDK (OTLP gRPC or HTTP/protobuf exporters), as log records or as spans.

Setup: pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-grpc \
           opentelemetry-exporter-otlp-proto-http

The attribute names are faultline's defaults (docs/otlp-mapping.md). Besides the syscall
records it sends `--noise` log records without a syscall attribute (faultline counts and
drops them) and `--bad` syscall records without a thread id (faultline rejects them as a
partial success). With `--expect-out FILE` it writes the syscall events it sent, one JSON
object per line ({pid, tid, syscall, ts_ns, duration_ns, ret}), so a test can compare
what arrived with what was sent.

Example:
  send_syscalls.py --endpoint http://127.0.0.1:4317 --protocol grpc --signal logs \
      --service mariadb --pid 4242 --threads 4 --calls 25
"""

import argparse
import json
import socket
import sys
import time

SYSCALLS = ["read", "write", "futex"]


def planned_events(args):
    """The syscall events to send: deterministic, several threads, varying durations."""
    events = []
    for i in range(args.threads):
        tid = args.pid + 1 + i
        for j in range(args.calls):
            events.append(
                {
                    "pid": args.pid,
                    "tid": tid,
                    "syscall": SYSCALLS[(i + j) % len(SYSCALLS)],
                    "ts_ns": args.start_ns + j * 1_000_000 + i * 1_000,
                    "duration_ns": 2_000 + 100 * i + j,
                    "ret": j - 1,
                }
            )
    return events


def resource(args):
    from opentelemetry.sdk.resources import Resource

    return Resource.create(
        {
            "service.name": args.service,
            "host.name": args.host,
            "process.pid": args.pid,
            "process.executable.name": args.exe,
        }
    )


def compression(args):
    if args.compression == "none":
        return None
    if args.protocol == "grpc":
        from grpc import Compression

        return Compression.Gzip
    from opentelemetry.exporter.otlp.proto.http import Compression

    return Compression.Gzip


def send_logs(args, events):
    from opentelemetry._logs import LogRecord
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

    if args.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter

        exporter = OTLPLogExporter(endpoint=args.endpoint, insecure=True, compression=compression(args))
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

        exporter = OTLPLogExporter(endpoint=args.endpoint.rstrip("/") + "/v1/logs", compression=compression(args))
    provider = LoggerProvider(resource=resource(args))
    # The SDK drops records beyond its queue size; size it so every planned record is sent.
    queue = max(2048, len(events) + args.noise + args.bad)
    provider.add_log_record_processor(
        BatchLogRecordProcessor(exporter, max_queue_size=queue, max_export_batch_size=min(args.batch, queue))
    )
    logger = provider.get_logger("faultline.send_syscalls")
    for e in events:
        logger.emit(
            LogRecord(
                timestamp=e["ts_ns"],
                body="syscall",
                attributes={
                    "thread.id": e["tid"],
                    "syscall.name": e["syscall"],
                    "syscall.duration_ns": e["duration_ns"],
                    "syscall.ret": e["ret"],
                },
            )
        )
    for k in range(args.noise):
        logger.emit(LogRecord(timestamp=args.start_ns + k, body="an application log line", attributes={"http.route": "/"}))
    for k in range(args.bad):
        logger.emit(LogRecord(timestamp=args.start_ns + k, attributes={"syscall.name": "read", "syscall.duration_ns": 5}))
    ok = provider.force_flush(timeout_millis=20_000)
    provider.shutdown()
    return ok


def send_spans(args, events):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if args.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=args.endpoint, insecure=True, compression=compression(args))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=args.endpoint.rstrip("/") + "/v1/traces", compression=compression(args))
    provider = TracerProvider(resource=resource(args))
    queue = max(2048, len(events) + args.noise)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=queue, max_export_batch_size=min(args.batch, queue))
    )
    tracer = provider.get_tracer("faultline.send_syscalls")
    for e in events:
        # The span's name is the syscall; its start and end are the call's entry and exit.
        span = tracer.start_span(
            e["syscall"],
            start_time=e["ts_ns"],
            attributes={"thread.id": e["tid"], "syscall.ret": e["ret"]},
        )
        span.end(end_time=e["ts_ns"] + e["duration_ns"])
    for k in range(args.noise):
        span = tracer.start_span("GET /users", start_time=args.start_ns + k)
        span.end(end_time=args.start_ns + k + 10)
    ok = provider.force_flush(timeout_millis=20_000)
    provider.shutdown()
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--endpoint", required=True, help="grpc: http://host:4317; http: http://host:4318")
    p.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    p.add_argument("--signal", choices=["logs", "traces"], default="logs")
    p.add_argument("--compression", choices=["none", "gzip"], default="none")
    p.add_argument("--service", default="faultline-test")
    p.add_argument("--exe", default="mariadbd")
    p.add_argument("--pid", type=int, default=4242)
    p.add_argument(
        "--host",
        default=socket.gethostname(),
        help="host.name of the resource (default: this host's, as an SDK's host detector says)",
    )
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--calls", type=int, default=25)
    p.add_argument("--start-ns", type=int, default=None, help="entry time of the first call (default: now)")
    p.add_argument("--noise", type=int, default=0, help="extra records that are not syscalls")
    p.add_argument("--bad", type=int, default=0, help="extra syscall log records without a thread id")
    p.add_argument("--batch", type=int, default=512, help="records per export request")
    p.add_argument("--expect-out", help="write the sent syscall events here (JSON lines)")
    args = p.parse_args()
    if args.start_ns is None:
        args.start_ns = time.time_ns()

    events = planned_events(args)
    if args.expect_out:
        with open(args.expect_out, "w") as f:
            for e in events:
                f.write(json.dumps(e) + "\n")
    ok = send_logs(args, events) if args.signal == "logs" else send_spans(args, events)
    print(json.dumps({"sent": len(events), "noise": args.noise, "bad": args.bad, "flushed": bool(ok)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
