//! The OTLP push sink against a collector stand-in: a real OTLP server (opentelemetry-proto
//! gRPC service stubs, and an HTTP/protobuf endpoint) that records what the sink's real
//! OpenTelemetry SDK exporters push, so metric names/values and verdict log records can be
//! checked on the wire.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use faultline::pipeline::telemetry::{DropReason, SegmentCounts, Telemetry, TrapReason};
use faultline::sinks::otlp::{OtlpProtocol, OtlpSink, OtlpSinkConfig};
use faultline_engine::report::{EngineCounters, OnsetDistribution};
use faultline_engine::{Report, Verdict};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, NumberDataPoint};
use prost::Message;
use serde_json::json;
use tonic::{Request, Response, Status};

/// The host name the sink pushes as (`faultline run` gives it `[pipeline].host_name` or the
/// kernel's).
const HOST: &str = "node-7";

/// What the stand-in collector received.
#[derive(Clone, Default)]
struct Captured {
    metrics: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
    logs: Arc<Mutex<Vec<ExportLogsServiceRequest>>>,
}

#[tonic::async_trait]
impl MetricsService for Captured {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        self.metrics.lock().unwrap().push(request.into_inner());
        Ok(Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for Captured {
    async fn export(
        &self,
        request: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        self.logs.lock().unwrap().push(request.into_inner());
        Ok(Response::new(ExportLogsServiceResponse::default()))
    }
}

/// A stand-in gRPC collector listening on `bind` (`127.0.0.1:0`: any free port).
async fn grpc_collector(c: Captured, bind: &str) -> String {
    let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(MetricsServiceServer::new(c.clone()))
            .add_service(LogsServiceServer::new(c))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    format!("http://{addr}")
}

async fn http_metrics(State(c): State<Captured>, body: Bytes) -> Vec<u8> {
    let req = ExportMetricsServiceRequest::decode(body.as_ref()).expect("metrics protobuf");
    c.metrics.lock().unwrap().push(req);
    ExportMetricsServiceResponse::default().encode_to_vec()
}

async fn http_logs(State(c): State<Captured>, body: Bytes) -> Vec<u8> {
    let req = ExportLogsServiceRequest::decode(body.as_ref()).expect("logs protobuf");
    c.logs.lock().unwrap().push(req);
    ExportLogsServiceResponse::default().encode_to_vec()
}

/// A stand-in OTLP/HTTP collector listening on `bind`.
async fn http_collector(c: Captured, bind: &str) -> String {
    let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/v1/metrics", post(http_metrics))
        .route("/v1/logs", post(http_logs))
        .with_state(c);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// A report as the engine would produce it, built from the stable JSON schema.
fn report(target: &str, verdict: Verdict, tau: f64) -> Report {
    serde_json::from_value(json!({
        "schema_version": 1,
        "target": target,
        "trigger": "cadence",
        "window_start_ns": 1_000,
        "window_end_ns": 2_000,
        "anomaly_onset_ns": 1_500,
        "verdict": verdict.as_str(),
        "decided_by": "impact_factor",
        "impact_factor": tau,
        "impact_factor_filtered": null,
        "onset_dispersion_seconds": 0.25,
        "threads": {"total": 8, "affected": 6, "directly_affected": 5},
        "affected_threads": [
            {"tid": 11, "onset_seconds": 0.1, "syscall": "futex", "channel": "time", "lost_share": 0.5},
            {"tid": 12, "onset_seconds": 0.2, "syscall": "futex", "channel": "time", "lost_share": 0.125},
            {"tid": 13, "onset_seconds": 0.3, "syscall": "read", "channel": "time", "lost_share": 0.25}
        ],
        "onset_times_seconds": serde_json::to_value(OnsetDistribution::default()).unwrap(),
        "top_syscalls_by_time": [
            {"syscall": "futex", "increase_ratio": 2.5, "subsystem": "locking"},
            {"syscall": "read", "increase_ratio": 0.5, "subsystem": "disk_io"}
        ],
        "top_syscalls_by_frequency": [
            {"syscall": "write", "increase_ratio": 1.5, "subsystem": "disk_io"}
        ],
        "subsystem": "locking",
        "hint": format!("{} fault", verdict.as_str()),
        "syscalls": [{"syscall": "futex", "calls": 10, "calls_per_second": 5.0, "mean_latency_seconds": 0.002}],
        "events_analyzed": 100,
        "counters": serde_json::to_value(EngineCounters::default()).unwrap(),
        "parameters": {}
    }))
    .expect("report JSON matches the schema")
}

/// `r` with vital signs whose totals show `symptoms`, and a thread per entry of `threads`
/// (tid, its symptoms), in the report's JSON schema.
fn with_vital_signs(mut r: Report, symptoms: &[&str], threads: &[(u32, &[&str])]) -> Report {
    let totals = json!({"calls": 40, "cycles": 9_000_000_000u64, "instructions": 18_000_000_000u64,
        "cache_misses": 1_800, "context_switches": 0, "wall_ns": 3_000_000_000u64});
    let rates = json!({"cycles_per_ns": 3.0, "ipc": 2.0, "mpki": 0.0001,
        "calls_per_mcycle": 0.0044, "switches_per_call": null});
    let threads: Vec<_> = threads
        .iter()
        .map(|(tid, s)| json!({"tid": tid, "totals": totals, "rates": rates, "symptoms": s}))
        .collect();
    r.vital_signs = Some(
        serde_json::from_value(json!({
            "totals": totals, "rates": rates, "symptoms": symptoms, "threads": threads
        }))
        .expect("vital signs JSON matches the schema"),
    );
    r
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn str_attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attr(attrs, key)? {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

/// The last data point of metric `name` whose attributes include all of `labels`.
fn last_point(c: &Captured, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let reqs = c.metrics.lock().unwrap();
    let mut found = None;
    for m in reqs
        .iter()
        .flat_map(|r| r.resource_metrics.iter())
        .flat_map(|r| r.scope_metrics.iter())
        .flat_map(|s| s.metrics.iter())
        .filter(|m| m.name == name)
    {
        let points: &[NumberDataPoint] = match &m.data {
            Some(metric::Data::Gauge(g)) => &g.data_points,
            Some(metric::Data::Sum(s)) => {
                assert!(s.is_monotonic, "{name} is a counter");
                &s.data_points
            }
            _ => &[],
        };
        for p in points {
            if labels
                .iter()
                .all(|(k, v)| str_attr(&p.attributes, k) == Some(v))
            {
                found = match p.value {
                    Some(number_data_point::Value::AsDouble(d)) => Some(d),
                    Some(number_data_point::Value::AsInt(i)) => Some(i as f64),
                    None => None,
                };
            }
        }
    }
    found
}

fn log_records(c: &Captured) -> Vec<LogRecord> {
    c.logs
        .lock()
        .unwrap()
        .iter()
        .flat_map(|r| r.resource_logs.iter())
        .flat_map(|r| r.scope_logs.iter())
        .flat_map(|s| s.log_records.iter().cloned())
        .collect()
}

async fn push_and_check(protocol: OtlpProtocol) {
    let captured = Captured::default();
    let endpoint = match protocol {
        OtlpProtocol::Grpc => grpc_collector(captured.clone(), "127.0.0.1:0").await,
        OtlpProtocol::Http => http_collector(captured.clone(), "127.0.0.1:0").await,
    };
    let telemetry = Arc::new(Telemetry::default());
    let src = telemetry.source("otlp_grpc");
    src.add_received(100);
    src.add_decode_errors(2);
    src.add_dropped(DropReason::QueueFull, 3);
    src.segments().watch();
    src.segments().add(SegmentCounts {
        points: 40,
        unpaired: 2,
        gaps: 1,
        forgotten: 0,
    });
    telemetry.set_reorder(7, 5, 1);
    telemetry.add_target_evicted();
    telemetry.add_target_evicted();
    telemetry.set_quarantined(1, 3);
    telemetry.add_guest_restart();
    telemetry.add_guest_restart_failure();
    telemetry.add_guest_trap(TrapReason::Timeout);
    // As a WASM host does: the guest runs, with 3 MiB of its 256 MiB.
    let _host = telemetry.set_guest_hosted(256 << 20);
    telemetry.set_guest_state(true, 3 << 20);
    // As `EngineTask::new` does: the engine thread runs.
    telemetry
        .engine_alive_flag()
        .store(true, std::sync::atomic::Ordering::Relaxed);

    let cfg = OtlpSinkConfig {
        endpoint: Some(endpoint),
        protocol,
        interval_seconds: 60,
        max_targets: 2,
        ..OtlpSinkConfig::default()
    };
    let sink = OtlpSink::start(cfg, HOST.into(), telemetry).expect("sink starts");
    sink.publish(&report("db", Verdict::External, 0.75));
    sink.publish(&report("db", Verdict::External, 0.8)); // same verdict: no new log
    sink.publish(&report("web", Verdict::None, 0.0)); // none: no log
    let mut silent = report("db", Verdict::Internal, 0.2);
    silent.silent_seconds = 25.0; // and it has made no call for 25 s
    sink.publish(&silent); // changed: logged
    sink.publish(&report("api", Verdict::External, 0.9)); // third target: capped
    assert_eq!(sink.capped_reports(), 1);
    assert_eq!(sink.verdict_logs(), 2);
    tokio::time::timeout(Duration::from_secs(30), sink.shutdown())
        .await
        .expect("shutdown finishes")
        .expect("final flush succeeds");

    let db = [("target", "db")];
    assert_eq!(
        last_point(&captured, "faultline_impact_factor_ratio", &db),
        Some(0.2)
    );
    assert_eq!(
        last_point(&captured, "faultline_onset_dispersion_seconds", &db),
        Some(0.25)
    );
    // The median of the affected threads' lost shares.
    assert_eq!(
        last_point(&captured, "faultline_time_lost_ratio", &db),
        Some(0.25)
    );
    assert_eq!(
        last_point(&captured, "faultline_silent_seconds", &db),
        Some(25.0)
    );
    assert_eq!(
        last_point(&captured, "faultline_silent_seconds", &[("target", "web")]),
        Some(0.0),
        "a target that makes calls is silent 0 s"
    );
    assert_eq!(
        last_point(
            &captured,
            "faultline_verdict",
            &[("target", "db"), ("verdict", "internal")]
        ),
        Some(1.0)
    );
    assert_eq!(
        last_point(
            &captured,
            "faultline_verdict",
            &[("target", "db"), ("verdict", "external")]
        ),
        Some(0.0)
    );
    assert_eq!(
        last_point(
            &captured,
            "faultline_verdict",
            &[("target", "web"), ("verdict", "none")]
        ),
        Some(1.0)
    );
    assert_eq!(
        last_point(
            &captured,
            "faultline_threads",
            &[("target", "db"), ("state", "directly_affected")]
        ),
        Some(5.0)
    );
    // The same names and labels as the Prometheus sink (docs/metrics.md), which the alert
    // rules and the dashboard read.
    assert_eq!(
        last_point(
            &captured,
            "faultline_threads",
            &[("target", "db"), ("state", "total")]
        ),
        Some(8.0)
    );
    let before_publish = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        - 120.0;
    let last = last_point(&captured, "faultline_last_report_timestamp_seconds", &db)
        .expect("faultline_last_report_timestamp_seconds pushed");
    assert!(last > before_publish, "{last} is not a recent Unix time");
    assert_eq!(
        last_point(
            &captured,
            "faultline_subsystem",
            &[("target", "db"), ("subsystem", "locking")]
        ),
        Some(1.0)
    );
    assert_eq!(
        last_point(
            &captured,
            "faultline_subsystem",
            &[("target", "db"), ("subsystem", "disk_io")]
        ),
        Some(0.0)
    );
    assert_eq!(
        last_point(
            &captured,
            "faultline_diagnosis_info",
            &[
                ("target", "db"),
                ("verdict", "internal"),
                ("subsystem", "locking"),
                ("hint", "internal fault")
            ]
        ),
        Some(1.0)
    );
    let onset = last_point(&captured, "faultline_anomaly_onset_timestamp_seconds", &db)
        .expect("faultline_anomaly_onset_timestamp_seconds pushed");
    assert!((onset - 1.5e-6).abs() < 1e-15, "{onset}");
    assert_eq!(
        last_point(
            &captured,
            "faultline_reports",
            &[("target", "db"), ("trigger", "cadence")]
        ),
        Some(3.0)
    );
    assert_eq!(last_point(&captured, "faultline_targets", &[]), Some(2.0));
    assert_eq!(
        last_point(
            &captured,
            "faultline_affected_syscall_increase_ratio",
            &[
                ("target", "db"),
                ("syscall", "futex"),
                ("dimension", "time"),
                ("rank", "1")
            ]
        ),
        Some(2.5)
    );
    assert_eq!(
        last_point(
            &captured,
            "faultline_affected_syscall_increase_ratio",
            &[
                ("target", "db"),
                ("syscall", "write"),
                ("dimension", "frequency")
            ]
        ),
        Some(1.5)
    );
    assert_eq!(
        last_point(
            &captured,
            "faultline_syscall_mean_latency_seconds",
            &[("target", "db"), ("syscall", "futex")]
        ),
        Some(0.002)
    );
    assert_eq!(
        last_point(
            &captured,
            "faultline_impact_factor_ratio",
            &[("target", "api")]
        ),
        None,
        "capped target not exported"
    );
    assert_eq!(
        last_point(&captured, "faultline_series_capped", &[]),
        Some(1.0)
    );
    assert_eq!(
        last_point(
            &captured,
            "faultline_events_received",
            &[("source", "otlp_grpc")]
        ),
        Some(100.0)
    );
    assert_eq!(
        last_point(
            &captured,
            "faultline_decode_errors",
            &[("source", "otlp_grpc")]
        ),
        Some(2.0)
    );
    for (name, want) in [
        ("faultline_otlp_tcp_segment_points", 40.0),
        ("faultline_otlp_tcp_segment_points_unpaired", 2.0),
        ("faultline_otlp_tcp_segment_gaps", 1.0),
        ("faultline_otlp_tcp_segment_series_forgotten", 0.0),
    ] {
        let source = [("source", "otlp_grpc")];
        assert_eq!(last_point(&captured, name, &source), Some(want), "{name}");
    }
    for (name, want) in [
        ("faultline_otlp_reorder_held_records", 7.0),
        ("faultline_otlp_records_out_of_order", 5.0),
        ("faultline_otlp_reorder_overflows", 1.0),
    ] {
        assert_eq!(last_point(&captured, name, &[]), Some(want), "{name}");
    }
    assert_eq!(
        last_point(
            &captured,
            "faultline_events_dropped",
            &[("source", "otlp_grpc"), ("reason", "queue_full")]
        ),
        Some(3.0)
    );
    assert_eq!(
        last_point(&captured, "faultline_guest_restarts", &[]),
        Some(1.0)
    );
    for (name, want) in [
        ("faultline_targets_evicted", 2.0),
        ("faultline_targets_quarantined", 1.0),
        ("faultline_target_quarantines", 3.0),
    ] {
        assert_eq!(last_point(&captured, name, &[]), Some(want), "{name}");
    }
    assert_eq!(
        last_point(&captured, "faultline_guest_restart_failures", &[]),
        Some(1.0)
    );
    for (reason, want) in [("timeout", 1.0), ("memory_limit", 0.0), ("other", 0.0)] {
        let labels = [("reason", reason)];
        let got = last_point(&captured, "faultline_guest_traps", &labels);
        assert_eq!(got, Some(want), "{reason}");
    }
    for (name, want) in [
        ("faultline_guest_up", 1.0),
        ("faultline_guest_memory_bytes", f64::from(3u32 << 20)),
        (
            "faultline_guest_memory_limit_bytes",
            f64::from(256u32 << 20),
        ),
    ] {
        assert_eq!(last_point(&captured, name, &[]), Some(want), "{name}");
    }
    assert_eq!(last_point(&captured, "faultline_engine_up", &[]), Some(1.0));

    let logs = log_records(&captured);
    let verdicts: Vec<(&str, &str)> = logs
        .iter()
        .map(|r| {
            (
                str_attr(&r.attributes, "faultline.target").unwrap_or_default(),
                str_attr(&r.attributes, "faultline.verdict").unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(verdicts, vec![("db", "external"), ("db", "internal")]);
    let first = &logs[0];
    assert_eq!(first.event_name, "faultline.verdict");
    assert_eq!(
        str_attr(&first.attributes, "faultline.top_syscall"),
        Some("futex")
    );
    assert_eq!(
        str_attr(&first.attributes, "faultline.decided_by"),
        Some("impact_factor")
    );
    assert_eq!(
        attr(&first.attributes, "faultline.impact_factor"),
        Some(&any_value::Value::DoubleValue(0.75))
    );
    assert_eq!(
        attr(&first.attributes, "faultline.threads.directly_affected"),
        Some(&any_value::Value::IntValue(5))
    );
    assert_eq!(
        attr(&first.attributes, "faultline.silent_seconds"),
        Some(&any_value::Value::DoubleValue(0.0))
    );
    assert_eq!(
        attr(&logs[1].attributes, "faultline.silent_seconds"),
        Some(&any_value::Value::DoubleValue(25.0))
    );
    assert_eq!(
        first.body.as_ref().and_then(|b| b.value.clone()),
        Some(any_value::Value::StringValue("external fault".into()))
    );
    // N hosts pushing to one collector stay apart: the resource names the host, on the
    // metrics and on the verdict records.
    let host = HOST;
    for key in ["service.instance.id", "host.name"] {
        assert_eq!(
            metrics_resource(&captured, key).as_deref(),
            Some(host),
            "{key}"
        );
        assert_eq!(
            logs_resource(&captured, key).as_deref(),
            Some(host),
            "{key}"
        );
    }
    assert_eq!(
        metrics_resource(&captured, "service.name").as_deref(),
        Some("faultline")
    );
}

/// The string attribute `key` of the first metrics request's resource.
fn metrics_resource(c: &Captured, key: &str) -> Option<String> {
    let reqs = c.metrics.lock().unwrap();
    let r = reqs.first()?.resource_metrics.first()?.resource.as_ref()?;
    str_attr(&r.attributes, key).map(str::to_string)
}

/// The string attribute `key` of the first logs request's resource.
fn logs_resource(c: &Captured, key: &str) -> Option<String> {
    let reqs = c.logs.lock().unwrap();
    let r = reqs.first()?.resource_logs.first()?.resource.as_ref()?;
    str_attr(&r.attributes, key).map(str::to_string)
}

/// What the final push says of the engine thread once it ended: 0 when it died while
/// faultline ran (FaultlineEngineDown must fire in an OTLP-fed setup), nothing after the
/// drain of a shutdown (a pushed 0 would stay in the backend and page for a planned stop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_engine_is_pushed_as_down_a_drained_one_is_left_out() {
    for drained in [false, true] {
        let captured = Captured::default();
        let endpoint = grpc_collector(captured.clone(), "127.0.0.1:0").await;
        let telemetry = Arc::new(Telemetry::default());
        if drained {
            telemetry.set_engine_drained();
        }
        let cfg = OtlpSinkConfig {
            endpoint: Some(endpoint),
            interval_seconds: 60,
            ..OtlpSinkConfig::default()
        };
        let sink = OtlpSink::start(cfg, HOST.into(), telemetry).expect("sink starts");
        tokio::time::timeout(Duration::from_secs(30), sink.shutdown())
            .await
            .expect("shutdown finishes")
            .expect("final flush succeeds");
        assert_eq!(
            last_point(&captured, "faultline_targets", &[]),
            Some(0.0),
            "the final push reached the collector"
        );
        let want = (!drained).then_some(0.0);
        assert_eq!(
            last_point(&captured, "faultline_engine_up", &[]),
            want,
            "drained: {drained}"
        );
        // No WASM host (none, or native): no guest gauges.
        assert_eq!(last_point(&captured, "faultline_guest_up", &[]), None);
        assert_eq!(
            last_point(&captured, "faultline_guest_memory_bytes", &[]),
            None
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_metrics_and_verdict_logs_over_grpc() {
    push_and_check(OtlpProtocol::Grpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_metrics_and_verdict_logs_over_http() {
    push_and_check(OtlpProtocol::Http).await;
}

/// A port nothing listens on (yet).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A sink towards `127.0.0.1:port` that pushes metrics only at shutdown, with short
/// timeouts.
fn config_for(port: u16, protocol: OtlpProtocol) -> OtlpSinkConfig {
    OtlpSinkConfig {
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        protocol,
        interval_seconds: 60,
        timeout_seconds: 2,
        ..OtlpSinkConfig::default()
    }
}

/// A collector that is down: every export fails, and each failure is counted per signal
/// (the SDK's exporters retry for a few seconds, then report it nowhere faultline's
/// metrics show); the verdict record, kept until shutdown, is counted lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_to_a_collector_that_is_down_are_counted() {
    use faultline::pipeline::telemetry::OtlpSignal;
    let telemetry = Arc::new(Telemetry::default());
    let cfg = config_for(free_port(), OtlpProtocol::Http);
    let sink = OtlpSink::start(cfg, HOST.into(), telemetry.clone()).expect("sink starts");
    sink.publish(&report("db", Verdict::External, 0.75));
    assert_eq!(telemetry.otlp_export_failures(OtlpSignal::Metrics), 0);
    let flushed = tokio::time::timeout(Duration::from_secs(30), sink.shutdown())
        .await
        .expect("shutdown finishes");
    assert!(flushed.is_err(), "the final push cannot succeed");
    assert!(telemetry.otlp_export_failures(OtlpSignal::Metrics) >= 1);
    assert!(telemetry.otlp_export_failures(OtlpSignal::Logs) >= 1);
    // The verdict record was kept for redelivery until shutdown, then given up on.
    assert_eq!(telemetry.otlp_verdicts_lost(), 1);
    assert_eq!(telemetry.otlp_verdicts_pending(), 0);
}

/// Polls `done` every 100 ms for up to `limit`; whether it became true.
async fn eventually(limit: Duration, done: impl Fn() -> bool) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done()
}

/// A verdict published while the collector is down reaches it once it is back: the sink
/// keeps the refused record and sends it again, once.
async fn verdict_outlives_a_collector_outage(protocol: OtlpProtocol) {
    let port = free_port();
    let telemetry = Arc::new(Telemetry::default());
    let cfg = config_for(port, protocol);
    let sink = OtlpSink::start(cfg, HOST.into(), telemetry.clone()).expect("sink starts");
    sink.publish(&report("db", Verdict::External, 0.95));
    assert!(
        eventually(Duration::from_secs(30), || telemetry
            .otlp_verdicts_pending()
            == 1)
        .await,
        "the refused verdict record is kept"
    );
    let captured = Captured::default();
    let bind = format!("127.0.0.1:{port}");
    match protocol {
        OtlpProtocol::Grpc => grpc_collector(captured.clone(), &bind).await,
        OtlpProtocol::Http => http_collector(captured.clone(), &bind).await,
    };
    let verdicts = |c: &Captured| {
        log_records(c)
            .iter()
            .filter(|r| str_attr(&r.attributes, "faultline.target") == Some("db"))
            .map(|r| str_attr(&r.attributes, "faultline.verdict").map(str::to_string))
            .collect::<Vec<_>>()
    };
    assert!(
        eventually(Duration::from_secs(30), || !verdicts(&captured).is_empty()).await,
        "the verdict record reaches the collector once it is back"
    );
    assert_eq!(verdicts(&captured), vec![Some("external".to_string())]);
    // The collector stores the record before the sink has its answer.
    assert!(
        eventually(Duration::from_secs(10), || telemetry
            .otlp_verdicts_pending()
            == 0)
        .await,
        "nothing pending once the collector answered"
    );
    assert_eq!(telemetry.otlp_verdicts_lost(), 0);
    assert!(telemetry.otlp_export_failures(faultline::pipeline::telemetry::OtlpSignal::Logs) >= 1);
    tokio::time::timeout(Duration::from_secs(30), sink.shutdown())
        .await
        .expect("shutdown finishes")
        .expect("nothing left undelivered");
    assert_eq!(verdicts(&captured).len(), 1, "sent once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verdict_outlives_a_grpc_collector_outage() {
    verdict_outlives_a_collector_outage(OtlpProtocol::Grpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verdict_outlives_an_http_collector_outage() {
    verdict_outlives_a_collector_outage(OtlpProtocol::Http).await;
}

/// The tids (or names) of a list attribute.
fn list_attr(attrs: &[KeyValue], key: &str) -> Option<Vec<any_value::Value>> {
    match attr(attrs, key)? {
        any_value::Value::ArrayValue(a) => {
            Some(a.values.iter().filter_map(|v| v.value.clone()).collect())
        }
        _ => None,
    }
}

/// Vital signs and symptoms reach the collector as metrics (named as on /metrics) and as
/// attributes of the verdict record; a target without counters has none of either, and a
/// symptom gone from the latest report is gone from the push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_vital_signs_and_symptoms() {
    use any_value::Value::{IntValue, StringValue};
    let captured = Captured::default();
    let endpoint = grpc_collector(captured.clone(), "127.0.0.1:0").await;
    let cfg = OtlpSinkConfig {
        endpoint: Some(endpoint),
        interval_seconds: 60,
        ..OtlpSinkConfig::default()
    };
    let sink =
        OtlpSink::start(cfg, HOST.into(), Arc::new(Telemetry::default())).expect("sink starts");
    let busy: &[&str] = &["busy_loop"];
    let both: &[&str] = &["busy_loop", "cache_thrash"];
    sink.publish(&with_vital_signs(
        report("db", Verdict::Internal, 0.2),
        busy,
        &[(7, busy), (9, both)],
    ));
    sink.publish(&report("web", Verdict::External, 0.95));
    sink.publish(&with_vital_signs(
        report("api", Verdict::External, 0.9),
        &["cache_thrash"],
        &[(3, &["cache_thrash"])],
    ));
    // api's thrash is over (same verdict: no new record), its counters still come.
    sink.publish(&with_vital_signs(
        report("api", Verdict::External, 0.9),
        &[],
        &[],
    ));
    tokio::time::timeout(Duration::from_secs(30), sink.shutdown())
        .await
        .expect("shutdown finishes")
        .expect("final flush succeeds");

    let point =
        |name, target, key, value| last_point(&captured, name, &[("target", target), (key, value)]);
    assert_eq!(
        point("faultline_vital_sign", "db", "sign", "ipc"),
        Some(2.0)
    );
    assert_eq!(
        point("faultline_vital_sign", "db", "sign", "cycles_per_ns"),
        Some(3.0)
    );
    assert_eq!(
        point("faultline_vital_sign", "db", "sign", "switches_per_call"),
        None,
        "unmeasured"
    );
    assert_eq!(
        point("faultline_symptom", "db", "symptom", "busy_loop"),
        Some(1.0)
    );
    assert_eq!(
        point("faultline_symptom", "db", "symptom", "cache_thrash"),
        None
    );
    assert_eq!(
        point("faultline_symptom_threads", "db", "symptom", "busy_loop"),
        Some(2.0)
    );
    assert_eq!(
        point("faultline_symptom_threads", "db", "symptom", "cache_thrash"),
        Some(1.0)
    );
    assert_eq!(point("faultline_vital_sign", "web", "sign", "ipc"), None);
    assert_eq!(
        point("faultline_vital_sign", "api", "sign", "ipc"),
        Some(2.0)
    );
    assert_eq!(
        last_point(&captured, "faultline_symptom", &[("target", "api")]),
        None,
        "stale symptom pushed"
    );
    assert_eq!(
        last_point(&captured, "faultline_symptom_threads", &[("target", "api")]),
        None,
        "stale symptom threads pushed"
    );

    let logs = log_records(&captured);
    let of = |target: &str| {
        logs.iter()
            .find(|r| str_attr(&r.attributes, "faultline.target") == Some(target))
            .unwrap_or_else(|| panic!("no verdict record of {target}"))
    };
    let db = &of("db").attributes;
    assert_eq!(
        list_attr(db, "faultline.symptoms"),
        Some(vec![StringValue("busy_loop".into())])
    );
    assert_eq!(
        list_attr(db, "faultline.symptom_threads.busy_loop"),
        Some(vec![IntValue(7), IntValue(9)])
    );
    assert_eq!(
        list_attr(db, "faultline.symptom_threads.cache_thrash"),
        Some(vec![IntValue(9)])
    );
    assert_eq!(attr(db, "faultline.symptom_threads.syscall_loop"), None);
    let web = &of("web").attributes;
    assert_eq!(attr(web, "faultline.symptoms"), None, "no counters, no key");
    let api = &of("api").attributes;
    assert_eq!(
        list_attr(api, "faultline.symptoms"),
        Some(vec![StringValue("cache_thrash".into())])
    );
}

/// The `target` values of every data point in the last metrics request the collector got.
fn targets_of_last_push(c: &Captured) -> std::collections::BTreeSet<String> {
    let reqs = c.metrics.lock().unwrap();
    let mut targets = std::collections::BTreeSet::new();
    let last = reqs.last().expect("a push");
    for m in last
        .resource_metrics
        .iter()
        .flat_map(|r| r.scope_metrics.iter())
        .flat_map(|s| s.metrics.iter())
    {
        let attrs: Vec<&[KeyValue]> = match &m.data {
            Some(metric::Data::Gauge(g)) => {
                g.data_points.iter().map(|p| &p.attributes[..]).collect()
            }
            Some(metric::Data::Sum(s)) => s.data_points.iter().map(|p| &p.attributes[..]).collect(),
            Some(metric::Data::Histogram(h)) => {
                h.data_points.iter().map(|p| &p.attributes[..]).collect()
            }
            _ => Vec::new(),
        };
        targets.extend(
            attrs
                .into_iter()
                .filter_map(|a| str_attr(a, "target"))
                .map(str::to_string),
        );
    }
    targets
}

/// What the engine task does when the router evicts an idle target (or quarantines one):
/// `ReportSink::forget` on every sink. The next push carries none of its series, and its
/// place under the sink's own `max_targets` goes to the next new target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_target_leaves_the_push_and_its_place_goes_to_a_new_one() {
    use faultline::pipeline::report_sink::ReportSink;
    let captured = Captured::default();
    let endpoint = grpc_collector(captured.clone(), "127.0.0.1:0").await;
    let cfg = OtlpSinkConfig {
        endpoint: Some(endpoint),
        interval_seconds: 1,
        max_targets: 2,
        ..OtlpSinkConfig::default()
    };
    let mut sink =
        OtlpSink::start(cfg, HOST.into(), Arc::new(Telemetry::default())).expect("sink starts");
    let publish = |sink: &mut OtlpSink, target, verdict| {
        ReportSink::publish(sink, &report(target, verdict, 0.5)).expect("published");
    };
    publish(&mut sink, "db", Verdict::External);
    publish(&mut sink, "web", Verdict::None);
    publish(&mut sink, "api", Verdict::External);
    assert_eq!(sink.capped_reports(), 1, "the cap is full: api is not kept");
    let db = [("target", "db")];
    assert!(
        eventually(Duration::from_secs(30), || last_point(
            &captured,
            "faultline_impact_factor_ratio",
            &db
        )
        .is_some())
        .await,
        "db's series were pushed"
    );

    ReportSink::forget(&mut sink, "db");
    publish(&mut sink, "api", Verdict::External);
    assert_eq!(sink.capped_reports(), 1, "api took db's place");
    tokio::time::timeout(Duration::from_secs(30), sink.shutdown())
        .await
        .expect("shutdown finishes")
        .expect("final flush succeeds");

    let names: Vec<String> = targets_of_last_push(&captured).into_iter().collect();
    assert_eq!(names, ["api", "web"], "the final push has no series of db");
    let reqs = captured.metrics.lock().unwrap().len();
    assert!(reqs >= 2, "{reqs} pushes");
    assert_eq!(
        last_point(&captured, "faultline_series_capped", &[]),
        Some(1.0)
    );
    assert_eq!(last_point(&captured, "faultline_targets", &[]), Some(2.0));
}
