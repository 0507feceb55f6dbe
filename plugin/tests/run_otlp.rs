//! End to end through OTLP: the real OpenTelemetry Python SDK (integration-tests/otlp)
//! pushes syscall log records over gRPC and HTTP into a running `faultline run`; the
//! events are counted per receiver, routed by `service.name` (and `host.name`: another
//! host's processes of a service are another target), and the final reports of every
//! target are flushed as JSON lines on SIGTERM.

mod run_support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use faultline_engine::Report;
use run_support::{final_reports, http, http_with_body, sample, start_waiting};

/// Sends `threads` × `calls` syscall records of `service`'s process on `host` (`None`:
/// this host, as the SDK's host detector names it).
fn send(
    protocol: &str,
    endpoint: &str,
    (service, host): (&str, Option<&str>),
    threads: u32,
    calls: u32,
) {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../integration-tests/otlp/send_syscalls.py");
    let out = Command::new("python3")
        .arg(&script)
        .args([
            "--endpoint",
            endpoint,
            "--protocol",
            protocol,
            "--signal",
            "logs",
        ])
        .args(["--service", service, "--threads", &threads.to_string()])
        .args(["--calls", &calls.to_string(), "--noise", "3"])
        .args(host.map(|h| ["--host", h]).into_iter().flatten())
        .output()
        .expect("python3 (with the OpenTelemetry SDK, see scripts/setup.sh) must be installed");
    assert!(
        out.status.success(),
        "send_syscalls.py failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `faultline run` config: both OTLP receivers, the JSON sink, this host named
/// [`NODE`], and `targets` (none: one discovered target per service and host); answers it
/// and where the final reports go.
fn config(dir: &Path, targets: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let jsonl = dir.join("reports.jsonl");
    let cfg = dir.join("faultline.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[engine]
kind = "native"
[sources.otlp]
grpc = "127.0.0.1:0"
http = "127.0.0.1:0"
[sinks.prometheus]
listen = "127.0.0.1:0"
[sinks.json]
enabled = true
path = "{}"
# faultline in a container: the kernel's host name is not the node's its services report.
[pipeline]
host_name = "{NODE}"
{targets}"#,
            jsonl.display()
        ),
    )
    .unwrap();
    (cfg, jsonl)
}

/// What `[pipeline].host_name` names this host in these tests.
const NODE: &str = "node-7";

/// The kernel's host name, which the SDK's host detector reports.
fn kernel_host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name");
    name.trim().to_owned()
}

#[test]
fn otel_sdk_events_reach_the_engine_and_final_reports_are_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, jsonl) = config(dir.path(), "");
    let run = start_waiting(
        &["run", "--config", cfg.to_str().unwrap()],
        &[],
        &["metrics", "grpc", "http"],
    );
    let grpc = format!("http://{}", run.addresses["grpc"]);
    let http_ep = format!("http://{}", run.addresses["http"]);

    send("grpc", &grpc, ("checkout", Some(NODE)), 4, 50);
    // The SDK's host detector names the kernel's host: not this node, as configured.
    send("http", &http_ep, ("payments", None), 3, 40);
    // The same service on another host (a Collector gateway forwarding both): its tids
    // are the same numbers as this host's, its threads are other threads.
    send("grpc", &grpc, ("checkout", Some("db-2")), 2, 30);

    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (status, body) = http(run.addr, "GET", "/metrics");
        assert_eq!(status, 200);
        let g = sample(
            &body,
            r#"faultline_events_received_total{source="otlp_grpc"}"#,
        );
        let h = sample(
            &body,
            r#"faultline_events_received_total{source="otlp_http"}"#,
        );
        if g == Some(260.0) && h == Some(120.0) {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "OTLP events never all arrived: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        sample(
            &body,
            r#"faultline_events_dropped_total{source="otlp_grpc",reason="queue_full"}"#
        ),
        Some(0.0)
    );

    // An Alertmanager webhook: the firing alert's `target` label and `startsAt` (Unix time,
    // the clock OTLP events carry) ask for an on-demand diagnosis.
    let now = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S.%NZ"])
        .output()
        .expect("date");
    let now = String::from_utf8_lossy(&now.stdout).trim().to_owned();
    let webhook = format!(
        r#"{{"version":"4","status":"firing","receiver":"faultline","alerts":[
            {{"status":"firing","labels":{{"alertname":"Slow","target":"checkout"}},"startsAt":"{now}"}},
            {{"status":"resolved","labels":{{"target":"payments"}},"startsAt":"{now}"}},
            {{"status":"firing","labels":{{"alertname":"NoTarget"}},"startsAt":"{now}"}}]}}"#
    );
    let (status, body) = http_with_body(run.addr, "POST", "/trigger", &webhook);
    assert_eq!(status, 200, "{body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    let reports: Vec<Report> = serde_json::from_value(answer["reports"].clone()).unwrap();
    assert_eq!(reports.len(), 1, "{body}");
    assert_eq!(reports[0].target, "checkout");
    assert_eq!(
        answer["skipped"].as_array().map(Vec::len),
        Some(1),
        "{body}"
    );

    let finals = final_reports(run, &jsonl);
    let mut targets: Vec<&str> = finals.iter().map(|r| r.target.as_str()).collect();
    targets.sort_unstable();
    let payments = format!("payments@{}", kernel_host_name());
    assert_eq!(targets, ["checkout", "checkout@db-2", payments.as_str()]);
    let threads = |t: &str| finals.iter().find(|r| r.target == t).unwrap().threads.total;
    assert_eq!(threads("checkout"), 4);
    assert_eq!(threads("checkout@db-2"), 2);
}

/// Per-host calibration: a `[[targets]]` naming one host takes that host's processes of
/// the service under its own name and parameters; the service's other hosts stay apart,
/// each with the service's parameters.
#[test]
fn a_target_naming_its_host_takes_that_hosts_processes_with_its_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let targets = r#"
[[targets]]
name = "checkout-db-2"
service_names = ["checkout"]
hosts = ["db-2"]
alpha_seconds = 1.5
[[targets]]
name = "checkout"
service_names = ["checkout"]
alpha_seconds = 2.5
"#;
    let (cfg, jsonl) = config(dir.path(), targets);
    let run = start_waiting(
        &["run", "--config", cfg.to_str().unwrap()],
        &[],
        &["metrics", "grpc", "http"],
    );
    let grpc = format!("http://{}", run.addresses["grpc"]);
    send("grpc", &grpc, ("checkout", Some(NODE)), 4, 30);
    send("grpc", &grpc, ("checkout", Some("db-2")), 2, 30);
    send("grpc", &grpc, ("checkout", Some("db-3")), 3, 30);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = http(run.addr, "GET", "/metrics");
        let got = sample(
            &body,
            r#"faultline_events_received_total{source="otlp_grpc"}"#,
        );
        if got == Some(270.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "OTLP events never all arrived: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let finals = final_reports(run, &jsonl);
    let mut got: Vec<(&str, usize, f64)> = finals
        .iter()
        .map(|r| {
            let threads = r.threads.total as usize;
            (r.target.as_str(), threads, r.parameters.alpha_seconds)
        })
        .collect();
    got.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(
        got,
        [
            ("checkout", 4, 2.5),
            ("checkout-db-2", 2, 1.5),
            ("checkout@db-3", 3, 2.5)
        ]
    );
}
