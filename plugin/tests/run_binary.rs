//! `faultline run` as a real process: HTTP endpoints, a replayed trace flowing through the
//! engine, on-demand triggers, and a clean SIGTERM shutdown that flushes the final reports.

mod perf_support;
mod prereq;
mod run_support;
#[path = "../../wasm-guest/tests/common/traces.rs"]
mod traces;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use faultline_engine::Report;
use perf_support::perf_usable;
use run_support::{final_reports, http, sample, signal, signal_group, start, wait_exit};

/// `perf script` text: `threads` threads of `mariadbd` each calling read (NR 0) every
/// 20 ms for `seconds` of trace time, 1 ms per call. Returns (text, events, last ts ns).
fn synthetic_perf_trace(threads: u32, seconds: u64) -> (String, u64, u64) {
    let mut out = String::new();
    let mut events = 0;
    let start_ns = 1_000_000_000_000u64;
    let step_ns = 20_000_000u64;
    let mut last = 0;
    for i in 0..(seconds * 1_000_000_000 / step_ns) {
        for t in 0..threads {
            let enter = start_ns + i * step_ns + u64::from(t) * 1_000;
            let exit = enter + 1_000_000;
            let tid = 2000 + t;
            out.push_str(&format!(
                "        mariadbd 1000/{tid}  {}.{:09}: raw_syscalls:sys_enter: NR 0 (3, 7f00, 10, 0, 0, 0)\n",
                enter / 1_000_000_000,
                enter % 1_000_000_000
            ));
            out.push_str(&format!(
                "        mariadbd 1000/{tid}  {}.{:09}:  raw_syscalls:sys_exit: NR 0 = 16\n",
                exit / 1_000_000_000,
                exit % 1_000_000_000
            ));
            events += 2;
            last = exit;
        }
    }
    (out, events, last)
}

fn write_config(dir: &Path, trace: &Path, jsonl: &Path) -> std::path::PathBuf {
    let cfg = dir.join("faultline.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[engine]
kind = "native"
[pipeline]
idle_seconds = 0.2
[sources.otlp]
enabled = false
[sources.replay]
enabled = true
path = "{}"
[sinks.prometheus]
listen = "127.0.0.1:0"
[sinks.json]
enabled = true
path = "{}"
"#,
            trace.display(),
            jsonl.display()
        ),
    )
    .unwrap();
    cfg
}

#[test]
fn replayed_trace_reaches_metrics_report_trigger_and_final_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.txt");
    let jsonl = dir.path().join("reports.jsonl");
    let (text, events, last_ns) = synthetic_perf_trace(8, 30);
    std::fs::write(&trace, text).unwrap();
    let cfg = write_config(dir.path(), &trace, &jsonl);
    let mut run = start(&["run", "--config", cfg.to_str().unwrap()], &[]);

    let (status, body) = http(run.addr, "GET", "/healthz");
    assert_eq!((status, body.trim()), (200, "ok"));

    // Every event of the trace is decoded and reaches the engine.
    let deadline = Instant::now() + Duration::from_secs(60);
    let metrics = loop {
        let (status, body) = http(run.addr, "GET", "/metrics");
        assert_eq!(status, 200);
        let received = sample(&body, r#"faultline_events_received_total{source="perf"}"#);
        let ingested = sample(&body, "faultline_engine_events_total");
        if received == Some(events as f64) && ingested == Some(events as f64) {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "events never all arrived: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(metrics.trim_end().ends_with("# EOF"));
    assert_eq!(
        sample(
            &metrics,
            r#"faultline_events_dropped_total{source="perf",reason="no_target"}"#
        ),
        Some(0.0)
    );
    assert!(sample(&metrics, "faultline_analysis_duration_seconds_count").unwrap_or(0.0) >= 1.0);

    // /report is always a JSON array of reports (cadence reports may or may not be due yet).
    let (status, body) = http(run.addr, "GET", "/report");
    assert_eq!(status, 200);
    let reports: Vec<Report> = serde_json::from_str(&body).expect("report schema");
    assert!(reports.iter().all(|r| r.target == "mariadbd"), "{body}");

    // On-demand diagnosis of the discovered target, and a clear 404 for an unknown one.
    let (status, body) = http(
        run.addr,
        "POST",
        &format!("/trigger?target=mariadbd&at_ns={}", last_ns - 5_000_000_000),
    );
    assert_eq!(status, 200, "{body}");
    let triggered: Report = serde_json::from_str(&body).expect("trigger returns a report");
    assert_eq!(triggered.target, "mariadbd");
    assert_eq!(
        serde_json::to_value(triggered.trigger).unwrap(),
        "on_demand"
    );
    let (status, _) = http(run.addr, "POST", "/trigger?target=nope&at_ns=1");
    assert_eq!(status, 404);
    let (status, _) = http(run.addr, "POST", "/trigger?target=mariadbd");
    assert_eq!(status, 400, "at_ns is required");

    signal(&run.child, "-TERM");
    let status = wait_exit(&mut run.child, Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
    let log: Vec<String> = run.log.try_iter().collect();
    assert!(log.iter().any(|l| l.contains("SIGTERM")), "{log:?}");

    // The JSON-lines file holds the on-demand report and, last, the final flush.
    let lines: Vec<Report> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is a report"))
        .collect();
    assert!(lines
        .iter()
        .any(|r| serde_json::to_value(r.trigger).unwrap() == "on_demand"));
    let last = lines.last().expect("final report flushed");
    assert_eq!(last.target, "mariadbd");
    assert_eq!(serde_json::to_value(last.trigger).unwrap(), "end_of_stream");
}

#[test]
fn without_a_config_file_env_overrides_apply_and_sigint_exits_cleanly() {
    let mut run = start(
        &["run"],
        &[
            ("FAULTLINE_SINKS__PROMETHEUS__LISTEN", "127.0.0.1:0"),
            ("FAULTLINE_SOURCES__OTLP__ENABLED", "false"),
        ],
    );
    assert!(run.addr.ip().is_loopback());
    let (status, body) = http(run.addr, "GET", "/metrics");
    assert_eq!(status, 200);
    assert_eq!(sample(&body, "faultline_targets"), Some(0.0));
    // The default queue, idle.
    assert_eq!(
        sample(&body, "faultline_queue_capacity_batches"),
        Some(256.0)
    );
    assert_eq!(sample(&body, "faultline_queue_batches"), Some(0.0));
    let (status, body) = http(run.addr, "GET", "/report");
    assert_eq!((status, body.as_str()), (200, "[]"));
    let (status, _) = http(run.addr, "GET", "/nope");
    assert_eq!(status, 404);
    signal(&run.child, "-INT");
    let status = wait_exit(&mut run.child, Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
}

/// `--log-format json` (or `FAULTLINE_LOG_FORMAT=json`): every log line is one JSON object
/// with the event's fields at the top level, for a log shipper to parse without a regex.
#[test]
fn json_logs_are_one_object_per_line_with_the_fields_at_the_top() {
    for (args, env) in [
        (vec!["run", "--log-format", "json"], None),
        (vec!["run"], Some(("FAULTLINE_LOG_FORMAT", "json"))),
    ] {
        let mut vars = vec![
            ("FAULTLINE_SINKS__PROMETHEUS__LISTEN", "127.0.0.1:0"),
            ("FAULTLINE_SOURCES__OTLP__ENABLED", "false"),
            ("FAULTLINE_ENGINE__KIND", "native"),
        ];
        vars.extend(env);
        let mut run = start(&args, &vars);
        signal(&run.child, "-INT");
        let status = wait_exit(&mut run.child, Duration::from_secs(30));
        assert!(status.success(), "exit status {status}");
        let lines: Vec<String> = run.log.try_iter().collect();
        assert!(!lines.is_empty(), "{args:?}: no log after startup");
        let mut stopped = None;
        for line in &lines {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{args:?}: not a JSON line ({e}): {line}"));
            for key in ["timestamp", "level", "message", "target"] {
                assert!(v.get(key).is_some(), "{args:?}: no `{key}` in {line}");
            }
            if v["message"] == "stopped" {
                stopped = Some(v);
            }
        }
        let stopped = stopped.unwrap_or_else(|| panic!("{args:?}: no `stopped` line: {lines:?}"));
        assert_eq!(stopped["events"], 0, "fields flattened, typed: {stopped}");
    }
}

#[test]
fn an_invalid_config_stops_startup_with_the_key_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[pipeline]\nqueue_capacity = 0\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(["run", "--config", cfg.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pipeline.queue_capacity"), "{err}");
}

/// A port another process holds (validation cannot know): the error names the key to change.
#[test]
fn a_port_in_use_stops_startup_with_the_listeners_key_named() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = held.local_addr().unwrap().to_string();
    for (var, key) in [
        (
            "FAULTLINE_SINKS__PROMETHEUS__LISTEN",
            "sinks.prometheus.listen",
        ),
        ("FAULTLINE_SOURCES__OTLP__GRPC", "sources.otlp.grpc"),
        ("FAULTLINE_SOURCES__OTLP__HTTP", "sources.otlp.http"),
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_faultline"));
        cmd.arg("run")
            .env("FAULTLINE_ENGINE__KIND", "native")
            .env("FAULTLINE_SINKS__PROMETHEUS__LISTEN", "127.0.0.1:0")
            .env("FAULTLINE_SOURCES__OTLP__GRPC", "127.0.0.1:0")
            .env("FAULTLINE_SOURCES__OTLP__HTTP", "127.0.0.1:0")
            .env(var, &port);
        let out = cmd.output().unwrap();
        assert!(!out.status.success(), "{key}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key) && err.contains(&port), "{key}: {err}");
    }
}

/// A `faultline run` config reading LTTng input `source` (a `[sources.lttng]` key) with
/// `extra` sections, its final reports written to `jsonl`.
fn lttng_config(dir: &Path, source: &str, extra: &str, jsonl: &Path) -> std::path::PathBuf {
    let cfg = dir.join("faultline.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[engine]
kind = "native"
[pipeline]
idle_seconds = 0.2
{extra}
[sources.otlp]
enabled = false
[sources.lttng]
enabled = true
{source}
[sinks.prometheus]
listen = "127.0.0.1:0"
[sinks.json]
enabled = true
path = "{}"
"#,
            jsonl.display()
        ),
    )
    .unwrap();
    cfg
}

/// Waits until the LTTng events `run` received stop growing and are each analysed or
/// counted as dropped (nothing is lost silently); answers how many there were.
fn settled_lttng_events(run: &run_support::Running) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = None;
    loop {
        let (_, body) = http(run.addr, "GET", "/metrics");
        let received = sample(&body, r#"faultline_events_received_total{source="lttng"}"#);
        let analysed = sample(&body, "faultline_engine_events_total").unwrap_or(0.0);
        let dropped: f64 = ["queue_full", "too_large", "no_target", "capped"]
            .iter()
            .filter_map(|r| {
                sample(
                    &body,
                    &format!(r#"faultline_events_dropped_total{{source="lttng",reason="{r}"}}"#),
                )
            })
            .sum();
        if let Some(n) = received {
            if n > 0.0 && last == Some(n) && analysed + dropped == n {
                return n;
            }
        }
        last = received;
        assert!(
            Instant::now() < deadline,
            "LTTng events never settled: {body}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_real_lttng_trace_flows_through_babeltrace2_into_final_reports() {
    let Some(trace) = traces::get("lttng/bug446190") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("reports.jsonl");
    let source = format!("trace_dir = \"{}\"", trace.display());
    let cfg = lttng_config(dir.path(), &source, "", &jsonl);
    let run = start(&["run", "--config", cfg.to_str().unwrap()], &[]);

    let received = settled_lttng_events(&run);
    assert!(received > 1000.0, "only {received} events decoded");
    // A recorded trace read to its end is done, not a live capture gone down.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut log: Vec<String> = Vec::new();
    while !log.iter().any(|l| l.contains("lttng source finished")) {
        assert!(
            Instant::now() < deadline,
            "the source never finished: {log:#?}"
        );
        log.extend(run.log.try_iter());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(http(run.addr, "GET", "/healthz"), (200, "ok\n".to_owned()));
    let (_, body) = http(run.addr, "GET", "/metrics");
    assert_eq!(
        sample(&body, r#"faultline_source_up{source="lttng"}"#),
        None
    );

    let finals = final_reports(run, &jsonl);
    assert!(!finals.is_empty(), "no final reports");
    // One final report per discovered target (process name), each for a distinct target.
    let mut names: Vec<&str> = finals.iter().map(|r| r.target.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), finals.len());
    assert!(names.iter().all(|n| !n.is_empty()));
}

/// A relay daemon collects the sessions of many hosts: a live session's processes are the
/// traced host's (its address says which), so another host's form `NAME@HOST` targets,
/// and this host's keep their names. The relay daemon is stood in for by a `babeltrace2`
/// first on `PATH` that reads a real recorded trace (with the real babeltrace2) when asked
/// for the live session.
#[test]
fn a_relay_daemons_session_of_another_host_is_that_hosts_processes() {
    let Some(trace) = traces::get("lttng/bug446190") else {
        return;
    };
    let Ok(real) = which("babeltrace2") else {
        prereq::missing_tool("babeltrace2", "apt-get install babeltrace2");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let shim = bin.join("babeltrace2");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\ncase \"$*\" in *lttng-live*) exec {real} --clock-seconds --no-delta '{}';; esac\nexec {real} \"$@\"\n",
            trace.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let targets_of_session_on = |host: &str| -> Vec<String> {
        let run_dir = dir.path().join(host);
        std::fs::create_dir(&run_dir).unwrap();
        let jsonl = run_dir.join("reports.jsonl");
        let source = format!("relayd_url = \"net://relay:5344/host/{host}/session\"");
        let cfg = lttng_config(&run_dir, &source, "host_name = \"node-7\"", &jsonl);
        let run = start(
            &["run", "--config", cfg.to_str().unwrap()],
            &[("PATH", &path)],
        );
        assert!(settled_lttng_events(&run) > 1000.0);
        let mut names: Vec<String> = final_reports(run, &jsonl)
            .into_iter()
            .map(|r| r.target)
            .collect();
        names.sort_unstable();
        names
    };
    let here = targets_of_session_on("node-7");
    assert!(
        !here.is_empty() && here.iter().all(|n| !n.contains('@')),
        "{here:?}"
    );
    let there = targets_of_session_on("db-2");
    let mut expected: Vec<String> = here.iter().map(|n| format!("{n}@db-2")).collect();
    expected.sort_unstable();
    assert_eq!(there, expected);
}

/// `tool`'s path on `PATH`.
fn which(tool: &str) -> Result<String, String> {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map_err(|e| e.to_string())?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && !path.is_empty() {
        Ok(path)
    } else {
        Err(format!("{tool} not found"))
    }
}

/// The replay source reads its trace through a FIFO the test feeds: the first half of the
/// trace's lines at once, then, once SIGTERM was sent, the rest slowly (64 KiB every 5 ms,
/// seconds of input). So the signal lands mid-replay however fast this machine reads, and a
/// source that stops on it closes its input with input left: the writer sees the pipe
/// break, and the source logs fewer batches than the whole trace makes (counted by reading
/// it with the same reader).
#[test]
fn sigterm_mid_replay_stops_the_source_and_still_flushes_final_reports() {
    use std::io::{BufRead, Write};
    use std::os::unix::fs::OpenOptionsExt;
    use std::sync::{mpsc, Arc};

    use faultline::pipeline::telemetry::SourceStats;
    use faultline::sources::perf::PerfScriptReader;
    use faultline::sources::BatchReader;
    use faultline_engine::syscalls::Arch;

    let Some(trace) = traces::get("perf-faults/mariadb_cpu_cap/trace.txt.zst") else {
        return;
    };
    // The whole trace as the replay source reads it: the batches a replay to the end
    // logs, and its events (one per line).
    let stats = Arc::new(SourceStats::new("perf"));
    let mut whole = PerfScriptReader::open(&trace, Arch::X86_64, stats.clone()).expect("open");
    let mut whole_batches = 0u64;
    while whole.next_batch().expect("read the trace").is_some() {
        whole_batches += 1;
    }
    assert_eq!(stats.decode_errors(), 0);
    let lines = stats.received();
    let first_part = lines / 2;

    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("trace.txt");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let jsonl = dir.path().join("reports.jsonl");
    let cfg = write_config(dir.path(), &fifo, &jsonl);

    // Feeds the FIFO; returns (lines written whole, whether the reader closed it first).
    let (go, wait_for_go) = mpsc::channel::<()>();
    let writer = {
        let (fifo, trace) = (fifo.clone(), trace.clone());
        std::thread::spawn(move || -> (u64, bool) {
            // Non-blocking until faultline opens the FIFO for reading (ENXIO before), so a
            // faultline that never does cannot hang this thread; blocking writes after.
            let deadline = Instant::now() + Duration::from_secs(60);
            let out = loop {
                match std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&fifo)
                {
                    Ok(f) => break f,
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => panic!("faultline never opened its input: {e}"),
                }
            };
            {
                use std::os::fd::AsRawFd;
                let fd = out.as_raw_fd();
                // SAFETY: fcntl(2) on a descriptor this thread owns.
                unsafe {
                    let flags = libc::fcntl(fd, libc::F_GETFL);
                    libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
                }
            }
            let mut out = std::io::BufWriter::with_capacity(64 << 10, out);
            let mut input = faultline::sources::input::open(&trace).expect("open the trace");
            let (mut written, mut line) = (0u64, Vec::new());
            let broken = |e: std::io::Error| {
                assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
            };
            loop {
                line.clear();
                if input.read_until(b'\n', &mut line).expect("read the trace") == 0 {
                    return (written, out.flush().map_err(broken).is_err());
                }
                if written == first_part {
                    if let Err(e) = out.flush() {
                        broken(e);
                        return (written, true);
                    }
                    // Until SIGTERM was sent (or the test gave up).
                    let _ = wait_for_go.recv();
                }
                let full = out.buffer().len() + line.len() > out.capacity();
                if let Err(e) = out.write_all(&line) {
                    broken(e);
                    return (written, true);
                }
                written += 1;
                if full && written > first_part {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        })
    };

    let mut run = start(&["run", "--config", cfg.to_str().unwrap()], &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = http(run.addr, "GET", "/metrics");
        if sample(&body, r#"faultline_events_received_total{source="perf"}"#).unwrap_or(0.0) > 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "no events: {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(&run.child, "-TERM");
    let _ = go.send(());
    let status = wait_exit(&mut run.child, Duration::from_secs(60));
    let (written, closed) = writer.join().expect("the writer");
    assert!(status.success(), "exit status {status}");
    let log: Vec<String> = run.log.try_iter().collect();
    let finished = log
        .iter()
        .find(|l| l.contains("replay source finished"))
        .unwrap_or_else(|| panic!("the replay source logs its end: {log:#?}"));
    eprintln!("{finished}; {written} of {lines} lines written, {whole_batches} batches in all");
    assert!(
        closed && written < lines,
        "the source read its input to the end ({written} of {lines} lines written): {finished}"
    );
    let batches: u64 = finished
        .split("batches=")
        .nth(1)
        .and_then(|b| b.split_whitespace().next())
        .and_then(|b| b.parse().ok())
        .expect("batch count in the log line");
    assert!(
        batches < whole_batches,
        "the source was not stopped early: {finished} (the whole trace makes {whole_batches})"
    );
    let last: Report = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .last()
        .map(|l| serde_json::from_str(l).expect("report line"))
        .expect("a final report");
    assert_eq!(last.target, "mariadbd");
    assert_eq!(serde_json::to_value(last.trigger).unwrap(), "end_of_stream");
}

/// A source stuck in a read (its input never ends, as a `perf script` or babeltrace2 that
/// will not exit) holds its queue sender past its stop timeout. The engine is stopped all
/// the same: the final reports go out, and the exit says a step timed out.
#[test]
fn a_source_that_does_not_stop_still_lets_the_final_reports_out_and_exits_1() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("trace.txt");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    // Read and write: neither this open nor faultline's blocks, and faultline never sees
    // the end of the input while it is open.
    let mut input = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .expect("FIFO opens");
    let (text, _, _) = synthetic_perf_trace(4, 30);
    let (close_tx, close) = std::sync::mpsc::channel::<()>();
    let (written_tx, written) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        input.write_all(text.as_bytes()).expect("trace written");
        let _ = written_tx.send(());
        let _ = close.recv();
    });
    let jsonl = dir.path().join("reports.jsonl");
    let cfg = write_config(dir.path(), &fifo, &jsonl);
    let toml = std::fs::read_to_string(&cfg).unwrap().replace(
        "idle_seconds = 0.2",
        "idle_seconds = 0.2\nshutdown_timeout_seconds = 1",
    );
    std::fs::write(&cfg, toml).unwrap();
    let mut run = start(&["run", "--config", cfg.to_str().unwrap()], &[]);
    written
        .recv_timeout(Duration::from_secs(60))
        .expect("faultline read the trace");
    // The last of the pipe reaches the engine; the source then waits in a read.
    std::thread::sleep(Duration::from_secs(1));
    signal(&run.child, "-TERM");
    let status = wait_exit(&mut run.child, Duration::from_secs(30));
    let _ = close_tx.send(());
    writer.join().expect("writer thread");
    let log: Vec<String> = run.log.try_iter().collect();
    assert_eq!(status.code(), Some(1), "{status}: {log:#?}");
    assert!(
        log.iter()
            .any(|l| l.contains("a source did not stop in time")),
        "{log:#?}"
    );
    assert!(!log.iter().any(|l| l.contains("did not drain")), "{log:#?}");
    let finals: Vec<String> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Report>(l).expect("report line"))
        .filter(|r| serde_json::to_value(r.trigger).unwrap() == "end_of_stream")
        .map(|r| r.target)
        .collect();
    assert_eq!(finals, vec!["mariadbd".to_owned()], "{log:#?}");
}

/// A config in `dir` with the live perf source on `what` (`pids = [..]` or
/// `command = [..]`), the native engine, metrics on a free port, and `extra` sections.
fn live_perf_config(dir: &Path, what: &str, extra: &str) -> std::path::PathBuf {
    let cfg = dir.join("faultline.toml");
    std::fs::write(
        &cfg,
        format!(
            "[engine]\nkind = \"native\"\n[sources.otlp]\nenabled = false\n\
             [sources.perf]\nenabled = true\n{what}\n\
             [sinks.prometheus]\nlisten = \"127.0.0.1:0\"\n{extra}"
        ),
    )
    .unwrap();
    cfg
}

/// A live perf capture of a quiet process: the reader is blocked on perf's silent pipe
/// when SIGTERM comes, so shutdown must end the capture itself (it once timed out after
/// 10 s and the engine thread panicked as the runtime went away).
#[test]
fn sigterm_with_a_live_perf_source_on_a_quiet_process_exits_cleanly() {
    if !perf_usable() {
        return;
    }
    let mut quiet = Command::new("sleep").arg("120").spawn().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("reports.jsonl");
    let cfg = live_perf_config(
        dir.path(),
        &format!("pids = [{}]", quiet.id()),
        &format!(
            "[sinks.json]\nenabled = true\npath = \"{}\"\n",
            jsonl.display()
        ),
    );
    let mut run = start(&["run", "--config", cfg.to_str().unwrap()], &[]);
    // perf needs a moment to attach; the source is then blocked on its quiet output.
    std::thread::sleep(Duration::from_secs(2));
    // (No bound on how long it takes: a shutdown step past its timeout fails the run,
    // which `status.success()` checks, and wall time on a shared machine is noise.)
    signal(&run.child, "-TERM");
    let status = wait_exit(&mut run.child, Duration::from_secs(30));
    let _ = quiet.kill();
    let _ = quiet.wait();
    let log: Vec<String> = run.log.try_iter().collect();
    assert!(status.success(), "exit status {status}: {log:#?}");
    assert!(
        log.iter().any(|l| l.contains("perf source finished")),
        "the perf source ends: {log:#?}"
    );
    assert!(!log.iter().any(|l| l.contains("did not stop in time")));
}

/// The live perf source's pids also get their network namespace's TCP segments once a
/// second (`sources.perf.tcp_segments`, on by default): a source of its own, routed to the
/// process's target like its perf records, that ends with the agent.
#[test]
fn a_live_perf_source_also_samples_its_processes_tcp_segments() {
    if !perf_usable() {
        return;
    }
    let mut quiet = Command::new("sleep").arg("120").spawn().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = live_perf_config(dir.path(), &format!("pids = [{}]", quiet.id()), "");
    let mut run = start(&["run", "--config", cfg.to_str().unwrap()], &[]);
    let received = |addr| {
        let (_, body) = http(addr, "GET", "/metrics");
        let got = sample(
            &body,
            r#"faultline_events_received_total{source="tcp_segments"}"#,
        );
        (got.unwrap_or(0.0), body)
    };
    // A baseline, then a record a second.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (mut got, mut body) = received(run.addr);
    while got < 2.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        (got, body) = received(run.addr);
    }
    signal(&run.child, "-TERM");
    let status = wait_exit(&mut run.child, Duration::from_secs(30));
    let _ = quiet.kill();
    let _ = quiet.wait();
    let log: Vec<String> = run.log.try_iter().collect();
    assert!(got >= 2.0, "{body}\n{log:#?}");
    // Routed like the process's perf records (to the automatic target `sleep`).
    let dropped = sample(
        &body,
        r#"faultline_events_dropped_total{source="tcp_segments",reason="no_target"}"#,
    );
    assert_eq!(dropped.unwrap_or(0.0), 0.0, "{body}");
    assert!(status.success(), "exit status {status}: {log:#?}");
    assert!(
        log.iter()
            .any(|l| l.contains("tcp_segments source finished")),
        "{log:#?}"
    );
}

/// A live perf capture whose process exits ends on its own: the agent goes on serving,
/// but it watches nothing. `/healthz` and `faultline_source_up` must say so, where a log
/// line alone said it before.
#[test]
fn a_live_capture_that_ends_on_its_own_shows_in_healthz_and_source_up() {
    if !perf_usable() {
        return;
    }
    // Lives until the capture was seen up, then is killed: a process that exits after a
    // set time could be gone before a loaded machine got that far.
    let mut brief = Command::new("sleep").arg("600").spawn().unwrap();
    /// Killed however the test ends.
    struct Killed<'a>(&'a mut std::process::Child);
    impl Drop for Killed<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let brief_pid = brief.id();
    let brief = Killed(&mut brief);
    let dir = tempfile::tempdir().unwrap();
    let cfg = live_perf_config(dir.path(), &format!("pids = [{brief_pid}]"), "");
    let mut run = start(&["run", "--config", cfg.to_str().unwrap()], &[]);
    let up = |addr| {
        let (_, body) = http(addr, "GET", "/metrics");
        sample(&body, r#"faultline_source_up{source="perf"}"#)
    };
    // The sources start once the endpoint listens.
    let deadline = Instant::now() + Duration::from_secs(10);
    while up(run.addr).is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(up(run.addr), Some(1.0));
    assert_eq!(http(run.addr, "GET", "/healthz"), (200, "ok\n".to_owned()));
    // perf record -p ends once its only process has exited.
    drop(brief);
    let deadline = Instant::now() + Duration::from_secs(20);
    while up(run.addr) != Some(0.0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let log: Vec<String> = run.log.try_iter().collect();
    assert_eq!(up(run.addr), Some(0.0), "{log:#?}");
    let (status, body) = http(run.addr, "GET", "/healthz");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("live source ended: perf"), "{body}");
    assert!(
        log.iter().any(|l| l.contains("capture ended on its own")),
        "{log:#?}"
    );
    // Shutting down after it is still clean.
    signal(&run.child, "-TERM");
    let status = wait_exit(&mut run.child, Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
}

/// Waits for a stderr line containing `needle`; the lines seen are returned either way.
fn wait_log(run: &run_support::Running, needle: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        if let Ok(line) = run.log.recv_timeout(Duration::from_millis(100)) {
            let found = line.contains(needle);
            seen.push(line);
            if found {
                return seen;
            }
        }
    }
    panic!("no log line with `{needle}`: {seen:#?}");
}

#[test]
fn sighup_shuts_down_like_sigterm_with_the_final_reports() {
    let mut run = start(
        &["run"],
        &[
            ("FAULTLINE_SINKS__PROMETHEUS__LISTEN", "127.0.0.1:0"),
            ("FAULTLINE_SOURCES__OTLP__ENABLED", "false"),
            ("FAULTLINE_ENGINE__KIND", "native"),
        ],
    );
    signal(&run.child, "-HUP");
    let status = wait_exit(&mut run.child, Duration::from_secs(30));
    let log: Vec<String> = run.log.try_iter().collect();
    assert!(status.success(), "exit status {status}: {log:#?}");
    assert!(
        log.iter().any(|l| l.contains("SIGHUP received")),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|l| l.contains("engine finished")),
        "the orderly shutdown ran: {log:#?}"
    );
}

#[test]
fn a_second_signal_during_a_slow_shutdown_exits_at_once() {
    use std::os::unix::process::ExitStatusExt;
    // A collector that accepts connections and never answers: the final OTLP push hangs
    // until the OTel SDK gives up (5 s, its own shutdown limit), while the second signal
    // follows the first within milliseconds. Without the forced exit, the run ends with
    // status 1 (the failed push) instead.
    let black_hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", black_hole.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("faultline.toml");
    std::fs::write(
        &cfg,
        format!(
            "[engine]\nkind = \"native\"\n[pipeline]\nshutdown_timeout_seconds = 600\n\
             [sources.otlp]\nenabled = false\n\
             [sinks.prometheus]\nlisten = \"127.0.0.1:0\"\n\
             [sinks.otlp]\nenabled = true\nprotocol = \"http\"\nendpoint = \"{endpoint}\"\n\
             timeout_seconds = 600\ninterval_seconds = 600\n"
        ),
    )
    .unwrap();
    let mut run = start(&["run", "--config", cfg.to_str().unwrap()], &[]);
    signal(&run.child, "-TERM");
    let mut log = wait_log(&run, "shutting down", Duration::from_secs(30));
    signal(&run.child, "-INT");
    let status = wait_exit(&mut run.child, Duration::from_secs(30));
    log.extend(run.log.try_iter());
    assert_eq!(status.code(), Some(130), "{status:?}: {log:#?}");
    assert_eq!(status.signal(), None, "exited, not killed");
    assert!(
        log.iter()
            .any(|l| l.contains("SIGINT received during shutdown: exiting at once")),
        "{log:#?}"
    );
    drop(black_hole);
}

/// A signal while the (WASM) engine is still starting is taken at once, so a second one
/// exits at once. Before, the signals were first read once the engine had started, and a
/// repeated signal of one kind had merged with the first by then (a clean, slow exit).
#[test]
fn two_signals_during_startup_exit_at_once() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    let mut child = Command::new(env!("CARGO_BIN_EXE_faultline"))
        .args(["run"])
        .env("RUST_LOG", "info")
        .env("FAULTLINE_SINKS__PROMETHEUS__LISTEN", "127.0.0.1:0")
        .env("FAULTLINE_SOURCES__OTLP__ENABLED", "false")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn faultline");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr piped"))
        .lines()
        .map_while(Result::ok);
    let mut log = Vec::new();
    let mut wait_for = |needle: &str, log: &mut Vec<String>| {
        for line in lines.by_ref() {
            let found = line.contains(needle);
            log.push(line);
            if found {
                return;
            }
        }
        panic!("no `{needle}` in {log:#?}");
    };
    // The handlers are installed before this line, and the engine starts after it.
    wait_for("faultline starting", &mut log);
    signal(&child, "-TERM");
    wait_for("SIGTERM received: shutting down", &mut log);
    // Taken while the engine was starting (the WASM guest compiles for seconds in a
    // debug build), not after.
    assert!(
        !log.iter().any(|l| l.contains("engine started")),
        "{log:#?}"
    );
    signal(&child, "-TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    log.extend(lines);
    assert_eq!(status.code(), Some(143), "{status:?}: {log:#?}");
    assert_eq!(status.signal(), None, "exited, not killed");
    assert!(
        log.iter()
            .any(|l| l.contains("SIGTERM received during shutdown: exiting at once")),
        "{log:#?}"
    );
}

/// A Ctrl-C in faultline's terminal reaches its whole process group. The capture tools
/// run in groups of their own, so only faultline gets it and stops them in order: before,
/// `perf script` died of the SIGINT, perf record of the broken pipe, and a normal stop
/// was logged as a failed source (losing what was in the pipe and perf's loss tally).
#[test]
fn ctrl_c_to_the_process_group_stops_a_live_perf_capture_cleanly() {
    if !perf_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = live_perf_config(dir.path(), "command = [\"sleep\", \"120\"]", "");
    let mut run = start(&["run", "--config", cfg.to_str().unwrap()], &[]);
    // perf needs a moment to attach.
    std::thread::sleep(Duration::from_secs(2));
    signal_group(&run.child, "-INT");
    let status = wait_exit(&mut run.child, Duration::from_secs(30));
    let log: Vec<String> = run.log.try_iter().collect();
    assert!(status.success(), "exit status {status}: {log:#?}");
    assert!(
        !log.iter()
            .any(|l| l.contains("source failed") || l.contains("ended on its own")),
        "{log:#?}"
    );
    assert!(
        log.iter().any(|l| l.contains("perf source finished")),
        "{log:#?}"
    );
}
