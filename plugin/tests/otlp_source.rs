//! The OTLP receiver against real clients: the OpenTelemetry Python SDK's gRPC and
//! HTTP/protobuf exporters (integration-tests/otlp/send_syscalls.py), the Rust tonic
//! client, hand-written OTLP/JSON as the Collector's `otlphttp` (json) and Vector's
//! `opentelemetry` sink send it, and Vector-style flat JSON; TCP segment counters as
//! metrics from the SDK and from a real node_exporter (integration-tests/otlp/send_tcp_segments.py).
//!
//! Needs: pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-grpc
//! opentelemetry-exporter-otlp-proto-http (scripts/setup.sh installs it; without it the
//! tests that need it skip, recorded, or fail under FAULTLINE_REQUIRE_TOOLS=1: `prereq`).

mod prereq;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use faultline::model::EventBatch;
use faultline::pipeline::queue::{bounded, BatchReceiver, BatchSender};
use faultline::pipeline::telemetry::{DropReason, SourceStats, Telemetry};
use faultline::sources::otlp::{self, OtlpServer, OtlpSourceConfig, GRPC_SOURCE, HTTP_SOURCE};
use faultline_engine::{EventKind, SyscallEvent, SyscallId};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tokio::sync::oneshot;

struct Harness {
    server: OtlpServer,
    rx: BatchReceiver,
    grpc: Arc<SourceStats>,
    http: Arc<SourceStats>,
    _stop: oneshot::Sender<()>,
}

impl Harness {
    async fn start(capacity: usize, max_request_bytes: usize) -> Self {
        let telemetry = Telemetry::default();
        let (tx, rx) = bounded(capacity);
        let grpc = telemetry.source(GRPC_SOURCE);
        let http = telemetry.source(HTTP_SOURCE);
        let cfg = OtlpSourceConfig {
            grpc: Some("127.0.0.1:0".into()),
            http: Some("127.0.0.1:0".into()),
            max_request_bytes,
            ..OtlpSourceConfig::default()
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let server = otlp::start(
            &cfg,
            BatchSender::new(tx.clone(), grpc.clone()),
            BatchSender::new(tx, http.clone()),
            async {
                let _ = stopped.await;
            },
        )
        .await
        .expect("receiver starts on port 0");
        Self {
            server,
            rx,
            grpc,
            http,
            _stop: stop,
        }
    }

    fn grpc_url(&self) -> String {
        format!("http://{}", self.server.grpc_addr.expect("grpc bound"))
    }

    fn http_url(&self) -> String {
        format!("http://{}", self.server.http_addr.expect("http bound"))
    }

    fn drain(&mut self) -> Vec<EventBatch> {
        let mut out = Vec::new();
        while let Ok(b) = self.rx.try_recv() {
            out.push(b);
        }
        out
    }
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../integration-tests/otlp/send_syscalls.py")
}

/// The Python SDK is installed by scripts/setup.sh; without it the SDK tests skip
/// (recorded), or fail under FAULTLINE_REQUIRE_TOOLS=1.
fn python_sdk_available() -> bool {
    let ok = std::process::Command::new("python3")
        .args([
            "-c",
            "import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.grpc, opentelemetry.exporter.otlp.proto.http",
        ])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        prereq::missing_tool(
            "the OpenTelemetry Python SDK",
            "pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-grpc \
             opentelemetry-exporter-otlp-proto-http",
        );
    }
    ok
}

/// (pid, tid, syscall, ts, duration, ret) as the script says it sent them.
type Sent = (u32, u32, SyscallId, u64, u64, i64);

/// The `host.name` the client scripts put on their resource: the receiver carries it.
const TEST_HOST: &str = "otlp-test-host";

/// Runs a client script with `args`, which writes what it sent to `expect`; it must succeed.
async fn run_script(script: PathBuf, args: &[&str], expect: &std::path::Path) {
    let out = tokio::process::Command::new("python3")
        .arg(script)
        .args(["--host", TEST_HOST])
        .args(args)
        .arg("--expect-out")
        .arg(expect)
        .output()
        .await
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "client failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn run_client(args: &[&str]) -> BTreeSet<Sent> {
    let dir = tempfile::tempdir().expect("tempdir");
    let expect = dir.path().join("sent.jsonl");
    run_script(script(), args, &expect).await;
    let text = std::fs::read_to_string(&expect).expect("client wrote what it sent");
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json line");
            let u = |k: &str| v[k].as_u64().expect("number");
            (
                u("pid") as u32,
                u("tid") as u32,
                SyscallId::from_name(v["syscall"].as_str().expect("name")),
                u("ts_ns"),
                u("duration_ns"),
                v["ret"].as_i64().expect("ret"),
            )
        })
        .collect()
}

fn received(batches: &[EventBatch]) -> BTreeSet<Sent> {
    batches
        .iter()
        .flat_map(|b| b.events.iter())
        .map(|e| {
            assert_eq!(e.kind, EventKind::Complete);
            (
                e.pid,
                e.tid,
                e.syscall,
                e.ts_ns,
                e.duration_ns,
                e.ret.unwrap_or(i64::MIN),
            )
        })
        .collect()
}

fn assert_process(batches: &[EventBatch], source: &str, service: &str) {
    assert!(!batches.is_empty());
    for b in batches {
        assert_eq!(b.source, source);
        assert_eq!(b.process.service_name.as_deref(), Some(service));
        assert_eq!(b.process.pid, Some(4242));
        assert_eq!(b.process.comm.as_deref(), Some("mariadbd"));
        assert_eq!(b.process.host.as_deref(), Some(TEST_HOST));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_logs_over_grpc_and_http_arrive_intact() {
    if !python_sdk_available() {
        return;
    }
    let mut h = Harness::start(256, 4 << 20).await;
    for (protocol, compression, url, service) in [
        ("grpc", "gzip", h.grpc_url(), "db-grpc"),
        ("http", "none", h.http_url(), "db-http"),
    ] {
        let sent = run_client(&[
            "--endpoint",
            &url,
            "--protocol",
            protocol,
            "--compression",
            compression,
            "--signal",
            "logs",
            "--service",
            service,
            "--pid",
            "4242",
            "--threads",
            "4",
            "--calls",
            "30",
            "--noise",
            "3",
            "--bad",
            "2",
            "--batch",
            "50",
        ])
        .await;
        assert_eq!(sent.len(), 120);
        let batches = h.drain();
        let source = if protocol == "grpc" {
            GRPC_SOURCE
        } else {
            HTTP_SOURCE
        };
        assert_process(&batches, source, service);
        assert_eq!(
            received(&batches),
            sent,
            "{protocol}: events differ from what was sent"
        );
        let tids: BTreeSet<u32> = batches
            .iter()
            .flat_map(|b| b.events.iter().map(|e| e.tid))
            .collect();
        assert_eq!(tids, (4243..4247).collect());
    }
    for (stats, counters) in [
        (&h.grpc, &h.server.grpc_counters),
        (&h.http, &h.server.http_counters),
    ] {
        assert_eq!(stats.received(), 120);
        assert_eq!(
            stats.decode_errors(),
            2,
            "records without thread id are rejected"
        );
        assert_eq!(counters.not_syscall(), 3, "non-syscall records are counted");
        assert_eq!(stats.dropped(DropReason::QueueFull), 0);
    }
}

/// (segments sent, retransmitted) of each reading the script took of the kernel's counters.
fn readings(path: &std::path::Path) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(path).expect("the script wrote its readings");
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json line");
            let u = |k: &str| v[k].as_u64().expect("number");
            (u("sent"), u("retransmitted"))
        })
        .collect()
}

/// A listener whose connections make the TCP counters move between readings.
fn connection_target() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let target = listener.local_addr().expect("addr").to_string();
    std::thread::spawn(move || for _ in listener.incoming() {});
    target
}

/// Runs send_tcp_segments.py against a fresh receiver with `extra` arguments (5 readings
/// 0.2 s apart, each after a connection to a local listener) and checks that every reading
/// after the first arrived as one segment record holding exactly the difference of the
/// counters the script read, routed to the resource's process.
async fn segment_readings_arrive_as_records(protocol: &str, extra: &[&str]) {
    let target = connection_target();
    let mut h = Harness::start(64, 4 << 20).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let expect = dir.path().join("readings.jsonl");
    let endpoint = if protocol == "grpc" {
        h.grpc_url()
    } else {
        h.http_url()
    };
    let mut args = vec![
        "--endpoint",
        &endpoint,
        "--protocol",
        protocol,
        "--readings",
        "5",
        "--interval",
        "0.2",
        "--service",
        "nginx",
        "--pid",
        "4242",
        "--connect",
        &target,
    ];
    args.extend_from_slice(extra);
    let script = script().with_file_name("send_tcp_segments.py");
    run_script(script, &args, &expect).await;
    let read = readings(&expect);
    assert!(read.len() >= 5, "{extra:?}: {read:?}");
    let mut got = Vec::new();
    for b in &h.drain() {
        assert_eq!(b.process.service_name.as_deref(), Some("nginx"));
        assert_eq!(b.process.pid, Some(4242));
        for e in &b.events {
            assert_eq!(e.kind, EventKind::TcpSegments, "{extra:?}");
            got.push((e.ts_ns, e.segments().expect("segments")));
        }
    }
    got.sort();
    let got: Vec<(u64, u64)> = got.into_iter().map(|(_, s)| s).collect();
    // The first reading is the reference, for a delta exporter too (whose first point
    // holds the counters' whole total).
    let diffs: Vec<(u64, u64)> = read
        .windows(2)
        .map(|w| (w[1].0 - w[0].0, w[1].1 - w[0].1))
        .collect();
    assert_eq!(got, diffs, "{protocol} {extra:?}: readings {read:?}");
    assert!(
        diffs.iter().all(|&(sent, _)| sent > 0),
        "the connections moved the counters: {diffs:?}"
    );
    let stats = if protocol == "grpc" { &h.grpc } else { &h.http };
    let tallies = stats.segments().get();
    assert!(stats.segments().is_watched(), "exported from 0");
    assert_eq!(tallies.unpaired, 0, "{extra:?}");
    assert_eq!(tallies.gaps, 0, "{extra:?}");
    assert_eq!(tallies.points, 2 * read.len() as u64, "{extra:?}");
}

/// The kernel's real TCP counters, read and exported by the Python SDK's observable
/// counters (cumulative over HTTP, delta over gRPC), arrive as one segment record per
/// reading after the first, holding exactly the kernel's differences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_tcp_segment_counters_become_segment_records() {
    if !python_sdk_available() {
        return;
    }
    segment_readings_arrive_as_records("http", &["--temporality", "cumulative"]).await;
    segment_readings_arrive_as_records("grpc", &["--temporality", "delta"]).await;
}

/// The default metric names are a real node_exporter's: its scrapes, forwarded as the
/// Collector's prometheus receiver forwards untyped counters (gauges at the scrape's
/// time), become the same records. Needs `prometheus-node-exporter` (Debian package).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_exporter_tcp_counters_become_segment_records() {
    if !python_sdk_available() {
        return;
    }
    let Some(bin) = ["prometheus-node-exporter", "node_exporter"]
        .into_iter()
        .find(|b| {
            std::process::Command::new(b)
                .arg("--version")
                .output()
                .is_ok()
        })
    else {
        prereq::missing_tool("node_exporter", "apt-get install prometheus-node-exporter");
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    /// Stops the exporter however the test ends.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _exporter = Killed(
        std::process::Command::new(bin)
            .arg(format!("--web.listen-address={addr}"))
            .args(["--collector.disable-defaults", "--collector.netstat"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("node_exporter starts"),
    );
    let up = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::net::TcpStream::connect(&addr).is_ok()
    });
    assert!(up, "node_exporter did not listen on {addr} within 10 s");
    let url = format!("http://{addr}/metrics");
    segment_readings_arrive_as_records("http", &["--node-exporter", &url]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_spans_over_grpc_and_http_are_calls() {
    if !python_sdk_available() {
        return;
    }
    let mut h = Harness::start(256, 4 << 20).await;
    for (protocol, compression, url) in [
        ("grpc", "none", h.grpc_url()),
        ("http", "gzip", h.http_url()),
    ] {
        let sent = run_client(&[
            "--endpoint",
            &url,
            "--protocol",
            protocol,
            "--compression",
            compression,
            "--signal",
            "traces",
            "--service",
            "db",
            "--threads",
            "3",
            "--calls",
            "20",
            "--noise",
            "2",
        ])
        .await;
        let batches = h.drain();
        let source = if protocol == "grpc" {
            GRPC_SOURCE
        } else {
            HTTP_SOURCE
        };
        assert_process(&batches, source, "db");
        assert_eq!(
            received(&batches),
            sent,
            "{protocol}: spans differ from what was sent"
        );
    }
    assert_eq!(h.grpc.received(), 60);
    assert_eq!(h.http.received(), 60);
    assert_eq!(h.server.grpc_counters.not_syscall(), 2);
    assert_eq!(h.server.http_counters.not_syscall(), 2);
}

/// OTLP/JSON as the spec's example and the Collector's `otlphttp` (encoding: json) send
/// it: camelCase keys, int64 as strings, hex trace ids, enum numbers.
const OTLP_JSON_LOGS: &str = r#"{
  "resourceLogs": [{
    "resource": {"attributes": [
      {"key": "service.name", "value": {"stringValue": "json-svc"}},
      {"key": "process.pid", "value": {"intValue": "777"}}
    ]},
    "scopeLogs": [{
      "scope": {"name": "my.library", "version": "1.0.0"},
      "logRecords": [
        {"timeUnixNano": "1544712660300000000", "observedTimeUnixNano": "1544712660300000000",
         "severityNumber": 10, "severityText": "Information",
         "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
         "body": {"stringValue": "syscall"},
         "attributes": [
           {"key": "thread.id", "value": {"intValue": "778"}},
           {"key": "syscall.name", "value": {"stringValue": "futex"}},
           {"key": "syscall.duration_ns", "value": {"intValue": "123456"}},
           {"key": "syscall.ret", "value": {"intValue": "-110"}},
           {"key": "perf.cycles", "value": {"intValue": "5000"}}
         ]},
        {"timeUnixNano": "1544712660400000000",
         "attributes": [
           {"key": "thread.id", "value": {"intValue": 779}},
           {"key": "syscall.nr", "value": {"intValue": "0"}},
           {"key": "syscall.enter_ns", "value": {"intValue": "1544712660400000100"}},
           {"key": "syscall.exit_ns", "value": {"intValue": "1544712660400000900"}}
         ]},
        {"timeUnixNano": "1544712660500000000", "body": {"stringValue": "plain log"}}
      ]
    }]
  }]
}"#;

async fn post(
    url: &str,
    content_type: &str,
    encoding: Option<&str>,
    body: Vec<u8>,
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", content_type);
    if let Some(e) = encoding {
        req = req.header("content-encoding", e);
    }
    req.body(body).send().await.expect("request sent")
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).expect("gzip");
    enc.finish().expect("gzip")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_json_plain_and_gzipped_decodes_per_the_spec() {
    let mut h = Harness::start(64, 4 << 20).await;
    let url = format!("{}/v1/logs", h.http_url());
    for encoding in [None, Some("gzip")] {
        let body = OTLP_JSON_LOGS.as_bytes().to_vec();
        let body = if encoding.is_some() {
            gzip(&body)
        } else {
            body
        };
        let resp = post(&url, "application/json", encoding, body).await;
        assert_eq!(resp.status(), 200);
        assert!(resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json"));
        let v: serde_json::Value =
            serde_json::from_slice(&resp.bytes().await.expect("body")).expect("json response");
        assert!(v.get("partialSuccess").is_none(), "nothing rejected: {v}");
        let batches = h.drain();
        assert_eq!(batches.len(), 1);
        let b = &batches[0];
        assert_eq!(b.process.service_name.as_deref(), Some("json-svc"));
        assert_eq!(b.process.pid, Some(777));
        let e: Vec<SyscallEvent> = b.events.clone();
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].pid, e[0].tid, e[0].syscall),
            (777, 778, SyscallId::from_name("futex"))
        );
        assert_eq!(
            (e[0].ts_ns, e[0].duration_ns, e[0].ret),
            (1_544_712_660_300_000_000, 123_456, Some(-110))
        );
        assert_eq!(e[0].perf.map(|p| p.cycles), Some(5000));
        // syscall.nr 0 is `read` on x86_64; the attribute times win over the record time.
        assert_eq!(e[1].tid, 779);
        assert_eq!(e[1].syscall, SyscallId::from_name("read"));
        assert_eq!(
            (e[1].ts_ns, e[1].duration_ns),
            (1_544_712_660_400_000_100, 800)
        );
    }
    assert_eq!(h.http.received(), 4);
    assert_eq!(h.server.http_counters.not_syscall(), 2);
}

fn kv(key: &str, v: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn logs_request(records: usize, with_bad: usize) -> ExportLogsServiceRequest {
    let good = (0..records).map(|i| LogRecord {
        time_unix_nano: 1_000_000 + i as u64,
        attributes: vec![
            kv("thread.id", Value::IntValue(11)),
            kv("syscall.name", Value::StringValue("write".into())),
            kv("syscall.duration_ns", Value::IntValue(40)),
        ],
        ..Default::default()
    });
    let bad = (0..with_bad).map(|_| LogRecord {
        time_unix_nano: 5,
        attributes: vec![kv("syscall.name", Value::StringValue("write".into()))],
        ..Default::default()
    });
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![kv("service.name", Value::StringValue("rust".into()))],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: good.chain(bad).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_success_reports_rejected_records_on_both_transports() {
    let mut h = Harness::start(64, 4 << 20).await;
    let resp = post(
        &format!("{}/v1/logs", h.http_url()),
        "application/x-protobuf",
        None,
        logs_request(3, 2).encode_to_vec(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let body = resp.bytes().await.expect("body");
    let r = ExportLogsServiceResponse::decode(body.as_ref()).expect("protobuf response");
    let ps = r.partial_success.expect("partial success");
    assert_eq!(ps.rejected_log_records, 2);
    assert!(
        ps.error_message.contains("thread id"),
        "{}",
        ps.error_message
    );

    let mut client = LogsServiceClient::connect(h.grpc_url())
        .await
        .expect("connect");
    let r = client
        .export(logs_request(4, 1))
        .await
        .expect("export ok")
        .into_inner();
    assert_eq!(r.partial_success.map(|p| p.rejected_log_records), Some(1));
    let batches = h.drain();
    assert_eq!(batches.iter().map(|b| b.events.len()).sum::<usize>(), 7);
    assert_eq!((h.http.received(), h.http.decode_errors()), (3, 2));
    assert_eq!((h.grpc.received(), h.grpc.decode_errors()), (4, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_invalid_argument_and_counted_as_dropped_requests() {
    let h = Harness::start(64, 4 << 20).await;
    let url = format!("{}/v1/logs", h.http_url());
    let resp = post(
        &url,
        "application/x-protobuf",
        None,
        vec![0xff, 0xff, 0xff, 0x0f],
    )
    .await;
    assert_eq!(resp.status(), 400);
    let resp = post(
        &url,
        "application/json",
        None,
        b"{\"resourceLogs\": [".to_vec(),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let status: serde_json::Value =
        serde_json::from_slice(&resp.bytes().await.expect("body")).expect("status body");
    assert_eq!(status["code"], 3, "google.rpc.Status with INVALID_ARGUMENT");
    let resp = post(&url, "application/json", Some("gzip"), b"not gzip".to_vec()).await;
    assert_eq!(resp.status(), 400);
    let resp = post(&url, "text/plain", None, b"x".to_vec()).await;
    assert_eq!(resp.status(), 415);
    // Whole requests: dropped as malformed, one each (their records are unknown).
    assert_eq!(h.http.dropped(DropReason::Malformed), 3);
    assert_eq!(h.http.decode_errors(), 0);

    // Raw bytes through a real gRPC client (grpcio), bypassing protobuf encoding.
    let code = r#"
import sys, grpc
ch = grpc.insecure_channel(sys.argv[1])
call = ch.unary_unary('/opentelemetry.proto.collector.logs.v1.LogsService/Export')
try:
    call(b'\xff\xff\xff\x0f', timeout=10)
    print('OK')
except grpc.RpcError as e:
    print(e.code().name)
"#;
    let grpcio = std::process::Command::new("python3")
        .args(["-c", "import grpc"])
        .status();
    if grpcio.map(|s| s.success()).unwrap_or(false) {
        let addr = h.server.grpc_addr.expect("grpc").to_string();
        let out = tokio::process::Command::new("python3")
            .args(["-c", code, &addr])
            .output()
            .await
            .expect("python3");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "INVALID_ARGUMENT"
        );
        assert_eq!(h.grpc.dropped(DropReason::Malformed), 1);
    } else {
        prereq::missing_tool(
            "python grpcio (the gRPC part of this test is skipped)",
            "pip install grpcio, which the OpenTelemetry SDK's gRPC exporter brings",
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_asks_clients_to_retry_and_counts_drops() {
    let h = Harness::start(1, 4 << 20).await;
    // Fill the single queue slot so every export finds the queue full.
    let url = format!("{}/v1/logs", h.http_url());
    let first = post(
        &url,
        "application/x-protobuf",
        None,
        logs_request(2, 0).encode_to_vec(),
    )
    .await;
    assert_eq!(first.status(), 200);
    let resp = post(
        &url,
        "application/x-protobuf",
        None,
        logs_request(5, 0).encode_to_vec(),
    )
    .await;
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(h.http.dropped(DropReason::QueueFull), 5);

    let mut client = LogsServiceClient::connect(h.grpc_url())
        .await
        .expect("connect");
    let err = client
        .export(logs_request(6, 0))
        .await
        .expect_err("queue full");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    use tonic_types::StatusExt;
    let retry = err
        .get_details_retry_info()
        .expect("RetryInfo detail makes it retryable");
    assert_eq!(retry.retry_delay, Some(std::time::Duration::from_secs(1)));
    assert_eq!(h.grpc.dropped(DropReason::QueueFull), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_are_refused_and_counted() {
    let h = Harness::start(64, 2048).await;
    let big = logs_request(200, 0).encode_to_vec();
    assert!(big.len() > 2048);
    let url = format!("{}/v1/logs", h.http_url());
    let resp = post(&url, "application/x-protobuf", None, big.clone()).await;
    assert_eq!(resp.status(), 413);
    // A small gzip body that inflates past the limit is refused too.
    let resp = post(&url, "application/x-protobuf", Some("gzip"), gzip(&big)).await;
    assert_eq!(resp.status(), 413);
    assert_eq!(h.http.dropped(DropReason::TooLarge), 2);

    // gRPC: tonic's own refusal (OUT_OF_RANGE) would be retried by OTLP clients, though
    // the request can never fit; it is final instead (RESOURCE_EXHAUSTED, no RetryInfo).
    use tonic_types::StatusExt;
    let mut client = LogsServiceClient::connect(h.grpc_url())
        .await
        .expect("connect");
    let err = client
        .export(logs_request(200, 0))
        .await
        .expect_err("too large");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.get_details_retry_info().is_none(), "{err:?}");
    assert!(err.message().contains("max_request_bytes"), "{err:?}");
    assert_eq!(h.grpc.dropped(DropReason::TooLarge), 1);
    // A gzip message under the limit that inflates past it: refused and counted too.
    assert!(gzip(&big).len() < 2048);
    let mut client = client.send_compressed(tonic::codec::CompressionEncoding::Gzip);
    let err = client
        .export(logs_request(200, 0))
        .await
        .expect_err("too large once inflated");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    assert!(err.get_details_retry_info().is_none(), "{err:?}");
    assert_eq!(h.grpc.dropped(DropReason::TooLarge), 2);
    assert_eq!(h.grpc.received() + h.http.received(), 0);
}

/// One gRPC request of a raw length-prefixed frame over HTTP/2 (what no client library
/// sends: a compressed flag over bytes that are not gzip); the `grpc-status` answered.
async fn raw_grpc_status(addr: std::net::SocketAddr, frame: Vec<u8>) -> i32 {
    use tonic::codegen::http;
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (client, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let mut client = client.ready().await.expect("h2 ready");
    let req = http::Request::post(format!(
        "http://{addr}/opentelemetry.proto.collector.logs.v1.LogsService/Export"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .header("grpc-encoding", "gzip")
    .body(())
    .expect("request");
    let (resp, mut send) = client.send_request(req, false).expect("send");
    send.send_data(frame.into(), true).expect("body");
    let (parts, mut body) = resp.await.expect("response").into_parts();
    let in_trailers = match parts.headers.get("grpc-status") {
        Some(_) => None,
        None => {
            // Trailers follow the response message, which must be read first.
            while let Some(chunk) = body.data().await {
                let n = chunk.expect("data").len();
                let _ = body.flow_control().release_capacity(n);
            }
            body.trailers().await.expect("trailers")
        }
    };
    let status = parts
        .headers
        .get("grpc-status")
        .or_else(|| in_trailers.as_ref().and_then(|t| t.get("grpc-status")))
        .expect("grpc-status");
    status.to_str().expect("ascii").parse().expect("a code")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_grpc_gzip_frame_is_invalid_argument_and_counted() {
    let h = Harness::start(64, 4 << 20).await;
    let junk = b"this is not gzip".to_vec();
    let mut frame = vec![1u8];
    frame.extend_from_slice(&(junk.len() as u32).to_be_bytes());
    frame.extend_from_slice(&junk);
    let code = raw_grpc_status(h.server.grpc_addr.expect("grpc"), frame).await;
    assert_eq!(code, tonic::Code::InvalidArgument as i32);
    assert_eq!(h.grpc.dropped(DropReason::Malformed), 1);
    // A valid gzip frame of a valid request still goes through the same path.
    let body = gzip(&logs_request(3, 0).encode_to_vec());
    let mut frame = vec![1u8];
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    let code = raw_grpc_status(h.server.grpc_addr.expect("grpc"), frame).await;
    assert_eq!(code, tonic::Code::Ok as i32);
    assert_eq!(
        (h.grpc.received(), h.grpc.dropped(DropReason::Malformed)),
        (3, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vector_flat_json_arrays_and_ndjson_are_accepted() {
    let mut h = Harness::start(64, 4 << 20).await;
    // Vector's `http` sink, codec json: an array per batch; VRL-built fields nest.
    let array = r#"[
      {"timestamp":"2024-05-01T12:00:00.000000500Z","service":{"name":"vec"},"process":{"pid":31},
       "thread":{"id":32},"syscall":{"name":"read","duration_ns":900}},
      {"timestamp":"2024-05-01T12:00:01Z","service.name":"vec","process.pid":31,
       "thread.id":33,"syscall.name":"write","syscall.duration_ns":"50"}
    ]"#;
    let resp = post(
        &format!("{}/v1/syscalls", h.http_url()),
        "application/json",
        None,
        array.into(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let ndjson = "{\"timestamp\":1,\"thread.id\":34,\"process.pid\":31,\"service.name\":\"vec\",\"syscall.name\":\"futex\",\"syscall.duration_ns\":7}\n";
    let resp = post(
        &format!("{}/v1/syscalls", h.http_url()),
        "application/x-ndjson",
        None,
        ndjson.into(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    // The same array on the OTLP logs path is recognised as flat events too.
    let resp = post(
        &format!("{}/v1/logs", h.http_url()),
        "application/json",
        None,
        array.into(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let batches = h.drain();
    let events: Vec<SyscallEvent> = batches
        .iter()
        .flat_map(|b| b.events.iter().copied())
        .collect();
    assert_eq!(events.len(), 5);
    assert!(batches
        .iter()
        .all(|b| b.process.service_name.as_deref() == Some("vec") && b.process.pid == Some(31)));
    // 2024-05-01T12:00:00Z = 1714564800 s since the epoch.
    assert_eq!(
        (events[0].tid, events[0].ts_ns, events[0].duration_ns),
        (32, 1_714_564_800_000_000_500, 900)
    );
    assert_eq!(
        (events[1].tid, events[1].ts_ns, events[1].duration_ns),
        (33, 1_714_564_801_000_000_000, 50)
    );
    assert_eq!(
        (events[2].tid, events[2].ts_ns, events[2].syscall),
        (34, 1, SyscallId::from_name("futex"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_ends_both_servers() {
    let h = Harness::start(4, 4 << 20).await;
    let addr = h.server.http_addr.expect("http");
    h.server.stop();
    tokio::time::timeout(std::time::Duration::from_secs(10), h.server.wait())
        .await
        .expect("servers stop")
        .expect("clean stop");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener closed"
    );
}
