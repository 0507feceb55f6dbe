//! End-to-end OTLP/gRPC throughput of `faultline run`, printed as a table
//! (run: `cargo bench -p faultline --bench otlp`).
//!
//! The real binary runs as a child process (`[engine] kind = "native"`, then `"wasm"`), so
//! its peak RSS (VmHWM) and CPU time are its own. A tonic client in this process sends
//! `LogsService/Export` requests that were protobuf-encoded before timing (one request =
//! one process, ~100 threads, 20 syscall names, the attributes of docs/otlp-mapping.md),
//! several in flight over two HTTP/2 connections. The clock stops when the engine has
//! ingested every accepted batch (`faultline_analysis_duration_seconds_count` in
//! /metrics); `faultline_engine_events_total` then confirms every accepted event reached
//! the engine. A queue-full answer (RESOURCE_EXHAUSTED) is retried after 2 ms and counted.
//!
//! Issue target: ≥ 1 M events/s on this 2-core machine. The client shares those 2 cores
//! (its own work is one thread), and so do other processes: medians of a few fresh runs.
//! So the table also gives the CPU time of server and client per run, and the rate two
//! otherwise idle cores would sustain at that cost (2 cores × events / CPU seconds, an
//! upper bound that assumes the work spreads over both cores).
//!
//! Knobs: `FL_BENCH_QUICK=1` one native run; `FL_BENCH_OTLP_REQUESTS` (default 500) and
//! `FL_BENCH_OTLP_RECORDS` (records per request, default 4000, at most 4096 so a request is
//! one engine batch); `FL_BENCH_OTLP_IN_FLIGHT` (default 8); `FL_BENCH_FAULTLINE_BIN` runs
//! another `faultline` build (before/after comparisons).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes};
use faultline_engine::SyscallId;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Status};

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
const REPS: usize = 3;
const THREADS: u32 = 100;
const CONNECTIONS: usize = 2;
/// Trace-time spacing of consecutive records (200 k calls/s over the 100 threads).
const RECORD_SPACING_NS: u64 = 5_000;
const T0_NS: u64 = 1_763_800_000_000_000_000;
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(2);
const MAX_BATCH: usize = 4096;

/// (name, typical duration ns, relative weight): a database-like mix.
const SYSCALLS: [(&str, u64, u32); 20] = [
    ("read", 2_000, 20),
    ("write", 3_000, 15),
    ("pread64", 8_000, 10),
    ("pwrite64", 9_000, 8),
    ("futex", 20_000, 12),
    ("epoll_wait", 50_000, 5),
    ("recvfrom", 1_500, 6),
    ("sendto", 2_500, 6),
    ("poll", 30_000, 3),
    ("fsync", 400_000, 2),
    ("fdatasync", 300_000, 2),
    ("openat", 6_000, 2),
    ("close", 1_000, 2),
    ("lseek", 500, 2),
    ("mmap", 4_000, 1),
    ("munmap", 4_000, 1),
    ("nanosleep", 100_000, 1),
    ("sched_yield", 800, 1),
    ("io_submit", 7_000, 1),
    ("io_getevents", 60_000, 1),
];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn quick() -> bool {
    std::env::var_os("FL_BENCH_QUICK").is_some()
}

/// Deterministic xorshift: the same requests every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn kv(key: &str, v: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

/// One request of `records` log records, continuing the trace clock at `first_index`.
fn request(rng: &mut Rng, first_index: u64, records: usize) -> ExportLogsServiceRequest {
    let total_weight: u32 = SYSCALLS.iter().map(|s| s.2).sum();
    let log_records = (0..records as u64)
        .map(|i| {
            let mut pick = (rng.next() % u64::from(total_weight)) as u32;
            let (name, base, _) = SYSCALLS
                .iter()
                .find(|s| {
                    let hit = pick < s.2;
                    pick = pick.saturating_sub(s.2);
                    hit
                })
                .copied()
                .unwrap_or(SYSCALLS[0]);
            let tid = 1000 + (rng.next() % u64::from(THREADS)) as i64;
            // 0.5×–1.5× the typical duration.
            let duration = base / 2 + rng.next() % base.max(1);
            LogRecord {
                time_unix_nano: T0_NS + (first_index + i) * RECORD_SPACING_NS,
                attributes: vec![
                    kv("thread.id", Value::IntValue(tid)),
                    kv("syscall.name", Value::StringValue(name.into())),
                    kv("syscall.duration_ns", Value::IntValue(duration as i64)),
                    kv("syscall.ret", Value::IntValue((rng.next() % 4096) as i64)),
                ],
                ..Default::default()
            }
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", Value::StringValue("bench-db".into())),
                    kv("process.pid", Value::IntValue(4242)),
                    kv("host.name", Value::StringValue("bench-host".into())),
                ],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Sends already-encoded request bytes as they are; decodes the response normally.
#[derive(Clone, Copy)]
struct PreEncoded;
struct BytesEncoder;
struct ResponseDecoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for ResponseDecoder {
    type Item = ExportLogsServiceResponse;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        ExportLogsServiceResponse::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}

impl Codec for PreEncoded {
    type Encode = Bytes;
    type Decode = ExportLogsServiceResponse;
    type Encoder = BytesEncoder;
    type Decoder = ResponseDecoder;
    fn encoder(&mut self) -> BytesEncoder {
        BytesEncoder
    }
    fn decoder(&mut self) -> ResponseDecoder {
        ResponseDecoder
    }
}

/// The faultline child and the addresses it logged.
struct Server {
    child: Child,
    grpc: SocketAddr,
    metrics: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(engine: &str) -> Result<Server, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let cfg = dir.path().join("faultline.toml");
    // Idle collection rarely fires mid-run, so analysis-call counts stay batch counts.
    let toml = format!(
        "[engine]\nkind = \"{engine}\"\n[pipeline]\nidle_seconds = 1.0\n\
         [sources.otlp]\ngrpc = \"127.0.0.1:0\"\n\
         [sinks.prometheus]\nlisten = \"127.0.0.1:0\"\n"
    );
    std::fs::write(&cfg, toml).map_err(|e| e.to_string())?;
    // FL_BENCH_FAULTLINE_BIN compares another build (e.g. a copy from before a change).
    let bin = std::env::var_os("FL_BENCH_FAULTLINE_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_faultline").into());
    let mut child = Command::new(bin)
        .args(["run", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start faultline: {e}"))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let (tx, rx) = mpsc::channel::<String>();
    // Keeps draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let addr = |line: &str, key: &str| -> Option<SocketAddr> {
        line.split(key)
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let (mut grpc, mut metrics) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while grpc.is_none() || metrics.is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("faultline did not start: {}", seen.join("\n")));
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                grpc = grpc.or(addr(&line, "grpc_address="));
                metrics = metrics.or(addr(&line, "metrics_address="));
                seen.push(line);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Ok(Some(st)) = child.try_wait() {
                    return Err(format!("faultline exited ({st}): {}", seen.join("\n")));
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(format!("faultline closed stderr: {}", seen.join("\n")))
            }
        }
    }
    match (grpc, metrics) {
        (Some(grpc), Some(metrics)) => Ok(Server {
            child,
            grpc,
            metrics,
            _dir: dir,
        }),
        _ => Err("no addresses".into()),
    }
}

/// Sum of every sample whose name+labels start with `prefix`.
fn sample(body: &str, prefix: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn scrape(http: &reqwest::Client, addr: SocketAddr) -> String {
    match http.get(format!("http://{addr}/metrics")).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with(field))?.to_owned();
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// User+system CPU seconds of `pid` (clock ticks are 100 Hz on Linux).
fn proc_cpu_seconds(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the `(comm)`; utime and stime are fields 14 and 15.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
            Some(ticks as f64 / 100.0)
        })
        .unwrap_or(f64::NAN)
}

/// One run's numbers.
struct RunResult {
    events_per_s: f64,
    mb_per_s: f64,
    requests_per_s: f64,
    queue_full_retries: u64,
    dropped: f64,
    engine_events: f64,
    accepted: f64,
    server_cpu_s: f64,
    client_cpu_s: f64,
    elapsed_s: f64,
    peak_rss_mib: f64,
}

async fn run_once(
    engine: &str,
    requests: &Arc<Vec<Bytes>>,
    records: usize,
    in_flight: usize,
) -> Result<RunResult, String> {
    let server = start_server(engine)?;
    let pid = server.child.id();
    let url = format!("http://{}", server.grpc);
    let mut channels = Vec::new();
    for _ in 0..CONNECTIONS {
        let ch = Channel::from_shared(url.clone())
            .map_err(|e| e.to_string())?
            .connect()
            .await
            .map_err(|e| format!("connect: {e}"))?;
        channels.push(ch);
    }
    let http = reqwest::Client::new();
    // The generated client once, untimed: the receiver answers a real OTel client.
    let mut probe = LogsServiceClient::new(channels[0].clone());
    probe
        .export(ExportLogsServiceRequest::default())
        .await
        .map_err(|e| format!("probe export failed: {e}"))?;

    let before = scrape(&http, server.metrics).await;
    let calls_before = sample(&before, "faultline_analysis_duration_seconds_count");
    let cpu_before = proc_cpu_seconds(pid);
    let client_cpu_before = proc_cpu_seconds(std::process::id());

    let next = Arc::new(AtomicUsize::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..in_flight {
        let mut grpc = tonic::client::Grpc::new(channels[i % CONNECTIONS].clone());
        let (next, retries, requests) = (next.clone(), retries.clone(), requests.clone());
        tasks.push(tokio::spawn(async move {
            let path = PathAndQuery::from_static(EXPORT_PATH);
            loop {
                let idx = next.fetch_add(1, Ordering::Relaxed);
                let Some(body) = requests.get(idx) else {
                    return Ok::<(), String>(());
                };
                loop {
                    grpc.ready().await.map_err(|e| e.to_string())?;
                    let req = tonic::Request::new(body.clone());
                    match grpc.unary(req, path.clone(), PreEncoded).await {
                        Ok(resp) => {
                            if let Some(p) = resp.into_inner().partial_success {
                                if p.rejected_log_records > 0 {
                                    return Err(format!("rejected: {}", p.error_message));
                                }
                            }
                            break;
                        }
                        Err(s) if s.code() == Code::ResourceExhausted => {
                            retries.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(QUEUE_FULL_BACKOFF).await;
                        }
                        Err(s) => return Err(format!("export failed: {s}")),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    let sent_done = started.elapsed();
    // Every request is one batch (≤ 4096 records, one process): wait until each was analysed.
    let expected_calls = calls_before + requests.len() as f64;
    let deadline = Instant::now() + Duration::from_secs(60);
    let body = loop {
        let body = scrape(&http, server.metrics).await;
        if sample(&body, "faultline_analysis_duration_seconds_count") >= expected_calls {
            break body;
        }
        if Instant::now() > deadline {
            return Err(format!("engine never caught up: {body}"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let elapsed = started.elapsed().max(sent_done);
    let cpu = proc_cpu_seconds(pid) - cpu_before;
    let client_cpu = proc_cpu_seconds(std::process::id()) - client_cpu_before;
    let received = sample(
        &body,
        r#"faultline_events_received_total{source="otlp_grpc"}"#,
    );
    let dropped = sample(
        &body,
        r#"faultline_events_dropped_total{source="otlp_grpc""#,
    );
    let accepted = received - dropped;
    // Engine counters are refreshed every second or when idle: untimed confirmation.
    let mut engine_events = 0.0;
    let confirm = Instant::now() + Duration::from_secs(5);
    while Instant::now() < confirm {
        let b = scrape(&http, server.metrics).await;
        engine_events = sample(&b, "faultline_engine_events_total");
        if engine_events >= accepted {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let peak_rss_mib = proc_status_kib(pid, "VmHWM:") as f64 / 1024.0;
    let bytes: usize = requests.iter().map(Bytes::len).sum();
    let secs = elapsed.as_secs_f64();
    let unique = (requests.len() * records) as f64;
    Ok(RunResult {
        events_per_s: unique / secs,
        mb_per_s: bytes as f64 / 1e6 / secs,
        requests_per_s: requests.len() as f64 / secs,
        queue_full_retries: retries.load(Ordering::Relaxed),
        dropped,
        engine_events,
        accepted,
        server_cpu_s: cpu,
        client_cpu_s: client_cpu,
        elapsed_s: secs,
        peak_rss_mib,
    })
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let n_requests = env_usize("FL_BENCH_OTLP_REQUESTS", 500);
    let records = env_usize("FL_BENCH_OTLP_RECORDS", 4000).clamp(1, MAX_BATCH);
    let in_flight = env_usize("FL_BENCH_OTLP_IN_FLIGHT", 8).max(1);
    for (name, _, _) in SYSCALLS {
        assert_ne!(SyscallId::from_name(name), SyscallId::UNKNOWN, "{name}");
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let requests: Arc<Vec<Bytes>> = Arc::new(
        (0..n_requests)
            .map(|i| {
                let r = request(&mut rng, (i * records) as u64, records);
                Bytes::from(r.encode_to_vec())
            })
            .collect(),
    );
    let bytes: usize = requests.iter().map(Bytes::len).sum();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("tokio runtime: {e}"),
    };
    println!(
        "OTLP/gRPC end to end: {n_requests} requests × {records} log records ({:.1} MB protobuf, \
         {:.0} B/record), {in_flight} in flight over {CONNECTIONS} connections, {THREADS} threads, \
         {} syscall names; client = 1 thread sharing the machine's {} cores; median of {} fresh runs",
        bytes as f64 / 1e6,
        bytes as f64 / (n_requests * records) as f64,
        SYSCALLS.len(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        if quick() { 1 } else { REPS },
    );
    // Other processes on the machine depress the rate; say how busy it was.
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average before the runs: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!();
    println!("| engine | M events/s | MB/s | requests/s | queue-full retries | dropped events | engine events / accepted | server CPU s (per M events) | client CPU s | idle 2-core ceiling M ev/s | run s | peak RSS MiB |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let engines: &[&str] = if quick() {
        &["native"]
    } else {
        &["native", "wasm"]
    };
    let mut native_rate = f64::NAN;
    for engine in engines {
        let mut runs = Vec::new();
        for _ in 0..if quick() { 1 } else { REPS } {
            match rt.block_on(run_once(engine, &requests, records, in_flight)) {
                Ok(r) => runs.push(r),
                Err(e) => {
                    println!("| {engine} | failed: {e} |");
                    break;
                }
            }
        }
        if runs.is_empty() {
            continue;
        }
        let m = |f: fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
        let rate = m(|r| r.events_per_s);
        if *engine == "native" {
            native_rate = rate;
        }
        let events_m = (n_requests * records) as f64 / 1e6;
        // What two otherwise idle cores would sustain at the measured CPU cost per event.
        let ceiling = 2.0 * events_m / m(|r| r.server_cpu_s + r.client_cpu_s);
        println!(
            "| {engine} | {:.2} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} / {:.0} | {:.2} ({:.2}) | {:.2} | {:.2} | {:.2} | {:.1} |",
            rate / 1e6,
            m(|r| r.mb_per_s),
            m(|r| r.requests_per_s),
            m(|r| r.queue_full_retries as f64),
            m(|r| r.dropped),
            m(|r| r.engine_events),
            m(|r| r.accepted),
            m(|r| r.server_cpu_s),
            m(|r| r.server_cpu_s) / events_m,
            m(|r| r.client_cpu_s),
            ceiling,
            m(|r| r.elapsed_s),
            m(|r| r.peak_rss_mib),
        );
    }
    println!();
    let verdict = if native_rate >= 1e6 { "PASS" } else { "FAIL" };
    println!(
        "target ≥ 1 M events/s end to end (native): {:.2} M — {verdict}",
        native_rate / 1e6
    );
}
