//! `faultline run` wiring: sources → bounded queue → engine thread → sinks, plus the HTTP
//! endpoint, and an orderly shutdown (stop sources, drain the queue, finish the engine,
//! flush the sinks) when the shutdown future resolves or the engine thread dies.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::engine_task::{EngineCommand, EngineTask, EngineTaskSummary};
use super::latest::{LatestReports, LatestReportsSink};
use super::queue;
use super::report_sink::ReportSink;
use super::router::Router;
use super::silence::SilenceWatch;
use super::source_tasks::{start_otlp, start_pull_sources, PullSource};
use super::telemetry::Telemetry;
use crate::config::{Config, ConfigError};
use crate::engine_host::{self, EngineHost};
use crate::sinks::http::{self, HttpState};
use crate::sinks::jsonl::JsonLinesSink;
use crate::sinks::otlp::OtlpSink;
use crate::sinks::prometheus::{self, PrometheusExporter};
use crate::sources::lttng::reader as lttng_reader;
use crate::sources::otlp;
use crate::sources::perf::{live as perf_live, script as perf_script};

/// Commands queued towards the engine from HTTP (`/trigger`); small, callers get 503 when full.
const COMMAND_QUEUE: usize = 16;

/// Why `run` could not start or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot start the engine: {0}")]
    Engine(String),
    #[error("cannot listen on {addr} (sinks.prometheus.listen): {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot open {what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0} is not available in this build yet")]
    Unsupported(&'static str),
    #[error(transparent)]
    Otlp(#[from] otlp::OtlpSourceError),
    #[error("cannot start the OTLP sink: {0}")]
    OtlpSink(String),
    /// Shutdown steps that failed or exceeded `shutdown_timeout_seconds`, in order: the
    /// exit must not be 0 when final reports or metrics may not have reached their sinks.
    #[error("shutdown incomplete, reports or metrics may be lost: {}", .0.join("; "))]
    ShutdownIncomplete(Vec<String>),
    /// The engine thread ended while faultline ran (a panic), then the shutdown steps
    /// that failed: nothing was analysed any more, so the run stops and fails, and a
    /// supervisor (`Restart=on-failure`) starts it again.
    #[error("the engine thread ended unexpectedly, faultline stopped: {}", .0.join("; "))]
    EngineDied(Vec<String>),
}

/// What a run did, for the final log line and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    pub engine: EngineTaskSummary,
}

/// The silent-target watch `cfg` asks for (see [`super::silence`]): off when
/// `pipeline.silent_after_seconds` is 0 or no live capture hands over records promptly.
fn silence_watch(cfg: &Config) -> Option<SilenceWatch> {
    let after = cfg.pipeline.silent_after_seconds;
    if after <= 0.0 {
        return None;
    }
    let sources = watched_sources(cfg, || {
        perf_live::delivers_promptly(&perf_live::RecordOptions::default())
    });
    (!sources.is_empty()).then(|| {
        SilenceWatch::new(
            Duration::from_secs_f64(after),
            sources,
            cfg.analysis.max_targets,
        )
    })
}

/// The source labels whose silence means the target's: the live perf capture when this
/// perf hands over a quiet target's records within seconds (`perf_prompt`) and no replay
/// shares its label, and an LTTng live session. A recorded trace's pauses are its
/// reader's; an OTLP exporter that stopped looks like a target that stopped.
fn watched_sources(cfg: &Config, perf_prompt: impl FnOnce() -> bool) -> Vec<&'static str> {
    let s = &cfg.sources;
    let mut out = Vec::new();
    if s.perf.enabled && !s.replay.enabled {
        if perf_prompt() {
            out.push(perf_script::SOURCE);
        } else {
            tracing::info!(
                "silent targets are not watched for perf: this perf hands over a quiet target's records only when its buffer half fills"
            );
        }
    }
    if s.lttng.enabled && s.lttng.relayd_url.is_some() {
        out.push(lttng_reader::SOURCE);
    }
    out
}

/// Called once the HTTP endpoint is bound, with its real address (port 0 resolved).
pub type OnListening = Box<dyn FnOnce(SocketAddr) + Send>;

/// Runs the pipeline described by `cfg` until `shutdown` resolves, then shuts down in order.
/// Ends early, with [`RunError::EngineDied`], when the engine thread dies.
pub async fn run(
    cfg: Config,
    shutdown: impl Future<Output = ()>,
    on_listening: Option<OnListening>,
) -> Result<RunSummary, RunError> {
    let telemetry = Arc::new(Telemetry::default());
    let engine = build_engine(&cfg, &telemetry)?;
    run_engine(cfg, engine, telemetry, shutdown, on_listening).await
}

/// [`run`] with its engine built: the seam tests stand a failing engine in through.
async fn run_engine(
    cfg: Config,
    engine: Box<dyn EngineHost>,
    telemetry: Arc<Telemetry>,
    shutdown: impl Future<Output = ()>,
    on_listening: Option<OnListening>,
) -> Result<RunSummary, RunError> {
    let local_host = crate::host_name::resolve(cfg.pipeline.host_name.as_deref())
        .map_err(|why| {
            tracing::warn!(
                "{why}: records of any host go to the targets of this host's processes, and the OTLP push says host.name=unknown (set [pipeline].host_name)"
            )
        })
        .ok();
    if let Some(name) = &local_host {
        let from = match cfg.pipeline.host_name {
            Some(_) => "pipeline.host_name",
            None => crate::host_name::FILE,
        };
        tracing::info!(host = %name, from, "this host's name: records of other hosts form NAME@HOST targets");
    }
    let router =
        Router::new(&cfg.targets, cfg.analysis.max_targets).with_local_host(local_host.clone());
    let mut target_params = Vec::with_capacity(cfg.targets.len());
    for (i, t) in cfg.targets.iter().enumerate() {
        target_params.push((
            t.name.trim().to_owned(),
            t.effective_params(&cfg.analysis, i)?,
        ));
    }
    let sinks = build_sinks(&cfg, &telemetry, local_host.as_deref())?;

    let (tx, rx) = queue::bounded(cfg.pipeline.queue_capacity);
    let (cmd_tx, cmd_rx) = mpsc::channel(COMMAND_QUEUE);
    let idle = Duration::from_secs_f64(cfg.pipeline.idle_seconds);
    let task = EngineTask::new(
        engine,
        router,
        target_params,
        sinks.list,
        telemetry.clone(),
        idle,
        Duration::from_secs_f64(cfg.pipeline.trigger_wait_seconds),
    )
    .map_err(|e| RunError::Engine(e.to_string()))?
    .with_reorder(cfg.pipeline.reorder_seconds);
    let task = match silence_watch(&cfg) {
        Some(w) => task.with_silence_watch(w),
        None => task,
    };
    let engine_alive = task.alive_flag();
    let handle = Handle::current();
    let (ended_tx, ended) = oneshot::channel::<()>();
    let engine_thread = std::thread::Builder::new()
        .name("faultline-engine".into())
        .spawn(move || {
            // Dropped however the thread ends, a panic included: that wakes the runner.
            let _ended = ended_tx;
            task.run(handle, rx, cmd_rx)
        })
        .map_err(|source| RunError::Io {
            what: "engine thread".into(),
            source,
        })?;
    let stop_engine_tx = cmd_tx.clone();

    let http = match sinks.exporter {
        Some(exporter) => {
            exporter.watch_queue(tx.downgrade());
            let state = HttpState {
                exporter,
                latest: sinks.latest,
                commands: cmd_tx,
                engine_alive,
            };
            Some(start_http(&cfg, state, on_listening).await?)
        }
        None => None,
    };

    let stop_sources = Arc::new(AtomicBool::new(false));
    let sources = start_pull_sources(&cfg, &tx, &telemetry, &stop_sources)?;
    let otlp_server = start_otlp(&cfg, &tx, &telemetry).await?;

    // Before the shutdown the engine thread ends only by a panic. Faultline then analyses
    // nothing any more: it stops and fails, so that its supervisor restarts it.
    let engine_died = tokio::select! {
        () = shutdown => false,
        _ = ended => true,
    };
    if engine_died {
        tracing::error!(
            "the engine thread ended while faultline ran (see the panic above): nothing is analysed any more; shutting down"
        );
    }
    tracing::info!("shutting down: stopping sources, draining the queue");
    let limit = Duration::from_secs_f64(cfg.pipeline.shutdown_timeout_seconds);
    let mut failed = FailedSteps::default();
    stop_sources.store(true, Ordering::Relaxed);
    stop_all_sources(otlp_server, sources, limit, &mut failed).await;
    drop(tx);
    let summary = stop_engine(engine_thread, &stop_engine_tx, limit, &mut failed).await;
    // Side by side: a reader of the JSON lines that stalls must not hold the OTLP push.
    let (otlp, json) = tokio::join!(
        flush_otlp(sinks.otlp, limit),
        finish_json(sinks.json, limit)
    );
    for step in [otlp, json].into_iter().flatten() {
        failed.add(step);
    }
    // The HTTP endpoint stops last, so `/report` showed the final reports until now.
    if let Some((stop, task)) = http {
        let _ = stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
    }
    match summary {
        _ if engine_died => Err(RunError::EngineDied(failed.0)),
        Some(engine) if failed.0.is_empty() => Ok(RunSummary { engine }),
        _ => Err(RunError::ShutdownIncomplete(failed.0)),
    }
}

/// Shutdown steps that failed or ran out of time, in order; each is logged when it
/// happens and makes the run fail at the end.
#[derive(Default)]
struct FailedSteps(Vec<String>);

impl FailedSteps {
    fn add(&mut self, what: String) {
        tracing::warn!("{what}");
        self.0.push(what);
    }
}

/// Stops the OTLP receiver, then the pull sources, waiting up to `limit` for each. One
/// that does not stop in time is left running: the engine stops taking its batches.
async fn stop_all_sources(
    otlp_server: Option<otlp::OtlpServer>,
    sources: Vec<PullSource>,
    limit: Duration,
    failed: &mut FailedSteps,
) {
    if let Some(server) = otlp_server {
        server.stop();
        match tokio::time::timeout(limit, server.wait()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.add(format!("OTLP receiver stopped with an error: {e}")),
            Err(_) => failed.add(format!("OTLP receiver did not stop in time ({limit:?})")),
        }
    }
    for s in &sources {
        s.stop();
    }
    for s in sources {
        match tokio::time::timeout(limit, s.task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed.add(format!("a source task ended abnormally: {e}")),
            Err(_) => failed.add(format!("a source did not stop in time ({limit:?})")),
        }
    }
}

/// Tells the engine to stop taking batches and waits, up to `limit` in all, for it to
/// drain the queue, finish and end; its summary when it did. Waiting for the last queue
/// sender to go instead would wait for ever on a source that did not stop (a `perf
/// script` or babeltrace2 that will not exit, a stuck OTLP request), and lose every
/// final report although the engine could finish with what it has.
async fn stop_engine(
    thread: std::thread::JoinHandle<EngineTaskSummary>,
    commands: &mpsc::Sender<EngineCommand>,
    limit: Duration,
    failed: &mut FailedSteps,
) -> Option<EngineTaskSummary> {
    let deadline = tokio::time::Instant::now() + limit;
    // Refused only once the thread is gone (a panic), which its join reports.
    let _ = tokio::time::timeout_at(deadline, commands.send(EngineCommand::Stop)).await;
    let joined =
        tokio::time::timeout_at(deadline, tokio::task::spawn_blocking(move || thread.join())).await;
    match joined {
        Ok(Ok(Ok(summary))) => {
            if summary.finish_failed {
                failed.add(
                    "the engine failed to finish: the final end_of_stream reports are lost".into(),
                );
            }
            Some(summary)
        }
        Ok(_) => {
            failed.add("the engine thread panicked; final reports may be missing".into());
            None
        }
        Err(_) => {
            failed.add(format!(
                "the engine did not drain the queue and finish within {limit:?}; final reports may be missing"
            ));
            None
        }
    }
}

/// Pushes the OTLP sink's last metrics and verdict logs within `limit`; the failure, if
/// any. Only once the engine thread has ended: flushing while it publishes would race.
async fn flush_otlp(sink: Option<Arc<OtlpSink>>, limit: Duration) -> Option<String> {
    // Not configured: nothing to wait for.
    let shared = sink?;
    let Some(sink) = Arc::into_inner(shared) else {
        // The engine thread still runs and holds it: flushing now would race with it.
        return Some("OTLP sink not flushed: the engine thread still holds it".into());
    };
    match tokio::time::timeout(limit, sink.shutdown()).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("OTLP sink failed to push its final metrics: {e}")),
        Err(_) => Some(format!(
            "OTLP sink did not push its final metrics within {limit:?}"
        )),
    }
}

/// Waits up to `limit` for the JSON sink to write the reports it holds, the final ones
/// included; the failure, if any. Here rather than in the sink's drop on the engine
/// thread: there, a stalled reader held the thread's end, and with it the OTLP push.
async fn finish_json(sink: Option<Arc<Mutex<JsonLinesSink>>>, limit: Duration) -> Option<String> {
    // Not configured: nothing to wait for.
    let shared = sink?;
    let Some(sink) = Arc::into_inner(shared) else {
        // The engine thread still runs and holds it: flushing now would race with it.
        return Some("JSON sink not flushed: the engine thread still holds it".into());
    };
    let sink = sink.into_inner().unwrap_or_else(PoisonError::into_inner);
    let waited = tokio::task::spawn_blocking(move || {
        let written = sink.wait_written(limit);
        let pending = sink.stats().pending;
        // Its drop counts and logs what is left; after a wait in vain, without waiting again.
        drop(if written {
            sink
        } else {
            sink.with_shutdown_wait(Duration::ZERO)
        });
        (written, pending)
    })
    .await;
    match waited {
        Ok((true, _)) => None,
        Ok((false, pending)) => Some(format!(
            "JSON sink did not write {pending} final report(s) within {limit:?} (is the reader of its output stalled?)"
        )),
        Err(e) => Some(format!("JSON sink's final wait failed: {e}")),
    }
}

/// The sinks the engine thread feeds, and the shared pieces the runner keeps.
struct Sinks {
    list: Vec<Box<dyn ReportSink>>,
    latest: Arc<LatestReports>,
    exporter: Option<Arc<PrometheusExporter>>,
    /// Kept to flush it after the engine thread has finished.
    otlp: Option<Arc<OtlpSink>>,
    /// Kept to wait for its final lines after the engine thread has finished.
    json: Option<Arc<Mutex<JsonLinesSink>>>,
}

/// `host`: this host's name, for the OTLP push's resource (`unknown` without one).
fn build_sinks(
    cfg: &Config,
    telemetry: &Arc<Telemetry>,
    host: Option<&str>,
) -> Result<Sinks, RunError> {
    let latest = Arc::new(LatestReports::new(cfg.analysis.max_targets));
    let mut list: Vec<Box<dyn ReportSink>> = vec![Box::new(LatestReportsSink(latest.clone()))];
    let exporter = if cfg.sinks.prometheus.enabled {
        let (sink, exporter) = prometheus::new(&cfg.sinks.prometheus, telemetry.clone());
        list.push(Box::new(sink));
        Some(exporter)
    } else {
        None
    };
    let json = if cfg.sinks.json.enabled {
        let path = cfg.sinks.json.path.as_deref();
        let sink = JsonLinesSink::open(path, telemetry.clone())
            .map_err(|source| RunError::Io {
                what: path.map_or("stdout".into(), |p| p.display().to_string()),
                source,
            })?
            // Bounded by the shutdown's limit however it is dropped (see `finish_json`).
            .with_shutdown_wait(Duration::from_secs_f64(
                cfg.pipeline.shutdown_timeout_seconds,
            ));
        let sink = Arc::new(Mutex::new(sink));
        list.push(Box::new(SharedJsonSink(sink.clone())));
        Some(sink)
    } else {
        None
    };
    let otlp = if cfg.sinks.otlp.enabled {
        let host = host.unwrap_or("unknown").to_owned();
        let sink = OtlpSink::start(cfg.sinks.otlp.exporter.clone(), host, telemetry.clone())
            .map_err(|e| RunError::OtlpSink(e.to_string()))?;
        tracing::info!(endpoint = %cfg.sinks.otlp.exporter.endpoint(), "pushing OTLP metrics");
        let sink = Arc::new(sink);
        list.push(Box::new(SharedOtlpSink(sink.clone())));
        Some(sink)
    } else {
        None
    };
    Ok(Sinks {
        list,
        latest,
        exporter,
        otlp,
        json,
    })
}

/// Binds and serves `/metrics`, `/report`, `/healthz`, `/trigger` until told to stop.
async fn start_http(
    cfg: &Config,
    state: HttpState,
    on_listening: Option<OnListening>,
) -> Result<(watch::Sender<bool>, JoinHandle<()>), RunError> {
    let addr: SocketAddr = cfg.sinks.prometheus.listen.parse().map_err(|_| {
        ConfigError::invalid("sinks.prometheus.listen", "must be an `ip:port` address")
    })?;
    let (listener, local) = http::bind(addr).await.map_err(|source| RunError::Listen {
        addr: addr.to_string(),
        source,
    })?;
    tracing::info!(metrics_address = %local, "serving /metrics, /report, /healthz, /trigger");
    if let Some(f) = on_listening {
        f(local);
    }
    let (stop, stop_rx) = watch::channel(false);
    let until = wait_true(stop_rx);
    let task = tokio::spawn(async move {
        if let Err(e) = http::serve(listener, state, until).await {
            tracing::error!(error = %e, "HTTP server failed");
        }
    });
    Ok((stop, task))
}

async fn wait_true(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// The configured engine host (WASM sandbox by default).
fn build_engine(cfg: &Config, telemetry: &Arc<Telemetry>) -> Result<Box<dyn EngineHost>, RunError> {
    let host = engine_host::build_host(&cfg.engine, cfg.analysis.clone(), telemetry.clone())
        .map_err(|e| RunError::Engine(e.to_string()))?;
    tracing::info!(kind = host.kind().as_str(), "engine started");
    Ok(host)
}

/// The OTLP sink shared with the runner, which needs it back at exit to flush it.
struct SharedOtlpSink(Arc<OtlpSink>);

impl ReportSink for SharedOtlpSink {
    fn name(&self) -> &'static str {
        "otlp"
    }
    fn publish(
        &mut self,
        report: &faultline_engine::Report,
    ) -> Result<(), super::report_sink::SinkError> {
        self.0.publish(report);
        Ok(())
    }
    fn forget(&mut self, target: &str) {
        self.0.forget(target);
    }
}

/// The JSON-lines sink shared with the runner, which waits for its final lines itself
/// (see [`finish_json`]). Only the engine thread publishes: the lock is never contended.
struct SharedJsonSink(Arc<Mutex<JsonLinesSink>>);

impl SharedJsonSink {
    fn sink(&self) -> std::sync::MutexGuard<'_, JsonLinesSink> {
        // A panic while publishing leaves the sink usable: its state is its counters.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ReportSink for SharedJsonSink {
    fn name(&self) -> &'static str {
        self.sink().name()
    }
    fn publish(
        &mut self,
        report: &faultline_engine::Report,
    ) -> Result<(), super::report_sink::SinkError> {
        self.sink().publish(report)
    }
    fn flush(&mut self) -> Result<(), super::report_sink::SinkError> {
        self.sink().flush()
    }
    fn observe_engine_call(&mut self, seconds: f64) {
        self.sink().observe_engine_call(seconds);
    }
    fn observe_engine_counters(&mut self, counters: &faultline_engine::report::EngineCounters) {
        self.sink().observe_engine_counters(counters);
    }
    fn forget(&mut self, target: &str) {
        self.sink().forget(target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_host::EngineKind;
    use crate::sinks::otlp::OtlpProtocol;

    /// No source, no HTTP endpoint, the native engine: a run that ends as soon as asked.
    fn quiet_config() -> Config {
        let mut cfg = Config::default();
        cfg.engine.kind = EngineKind::Native;
        cfg.sources.otlp.enabled = false;
        cfg.sinks.prometheus.enabled = false;
        cfg
    }

    #[test]
    fn silent_targets_are_watched_only_for_prompt_live_captures() {
        let mut cfg = Config::default();
        assert!(watched_sources(&cfg, || true).is_empty(), "OTLP only");
        cfg.sources.perf.enabled = true;
        assert_eq!(watched_sources(&cfg, || true), vec!["perf"]);
        assert!(
            watched_sources(&cfg, || false).is_empty(),
            "perf without --control"
        );
        cfg.sources.replay.enabled = true;
        assert!(
            watched_sources(&cfg, || true).is_empty(),
            "a replay shares the label"
        );
        cfg.sources.lttng.enabled = true;
        cfg.sources.lttng.trace_dir = Some("/tmp/ctf".into());
        assert!(
            watched_sources(&cfg, || true).is_empty(),
            "an LTTng trace directory"
        );
        cfg.sources.lttng.relayd_url = Some("net://localhost/host/h/s".into());
        assert_eq!(watched_sources(&cfg, || true), vec!["lttng"]);
        cfg.pipeline.silent_after_seconds = 0.0;
        assert!(silence_watch(&cfg).is_none(), "turned off");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_clean_shutdown_succeeds() {
        run(quiet_config(), async {}, None)
            .await
            .expect("every shutdown step succeeded");
    }

    /// `perf script` text of four `mariadbd` threads calling read (NR 0) every 20 ms for
    /// 30 s of trace time, 1 ms per call: a target with a final report.
    fn perf_trace() -> String {
        let mut out = String::new();
        let start_ns = 1_000_000_000_000u64;
        for i in 0..1_500u64 {
            for t in 0..4u64 {
                let enter = start_ns + i * 20_000_000 + t * 1_000;
                let tid = 2000 + t;
                for (ts, what) in [
                    (enter, "raw_syscalls:sys_enter: NR 0 (3, 7f00, 10, 0, 0, 0)"),
                    (enter + 1_000_000, " raw_syscalls:sys_exit: NR 0 = 16"),
                ] {
                    let (s, ns) = (ts / 1_000_000_000, ts % 1_000_000_000);
                    out.push_str(&format!(
                        "        mariadbd 1000/{tid}  {s}.{ns:09}: {what}\n"
                    ));
                }
            }
        }
        out
    }

    /// [`quiet_config`] replaying the perf text at `path`, each shutdown step allowed 1 s.
    fn replaying(path: &std::path::Path) -> Config {
        let mut cfg = quiet_config();
        cfg.sources.replay.enabled = true;
        cfg.sources.replay.path = Some(path.to_owned());
        cfg.pipeline.shutdown_timeout_seconds = 1.0;
        cfg
    }

    fn mkfifo(path: &std::path::Path) {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("mkfifo runs");
        assert!(made.success(), "mkfifo {}", path.display());
    }

    /// The targets of the `end_of_stream` reports in the JSON lines at `path`.
    fn final_targets(path: &std::path::Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .expect("JSON lines")
            .lines()
            .map(|l| serde_json::from_str::<faultline_engine::Report>(l).expect("a report"))
            .filter(|r| r.trigger == faultline_engine::report::Trigger::EndOfStream)
            .map(|r| r.target)
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_source_that_does_not_stop_still_lets_the_final_reports_out() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("temp dir");
        let fifo = dir.path().join("trace.txt");
        mkfifo(&fifo);
        // Opened to read and write, so that neither this open nor the source's blocks, and
        // the source never sees the end while it is open: it stays in a read, as on a
        // `perf script` or babeltrace2 that will not exit, holding its queue sender.
        let mut input = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .expect("FIFO opens");
        let (written_tx, written) = oneshot::channel();
        let (close_tx, close) = std::sync::mpsc::channel::<()>();
        let writer = std::thread::spawn(move || {
            input
                .write_all(perf_trace().as_bytes())
                .expect("trace written");
            let _ = written_tx.send(());
            let _ = close.recv();
        });
        let jsonl = dir.path().join("reports.jsonl");
        let mut cfg = replaying(&fifo);
        cfg.sinks.json.enabled = true;
        cfg.sinks.json.path = Some(jsonl.clone());
        let shutdown = async {
            let _ = written.await;
            // The last of the pipe reaches the engine; the source then waits in a read.
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let result = run(cfg, shutdown, None).await;
        // Its end lets the source's read return, and the runtime end.
        let _ = close_tx.send(());
        writer.join().expect("writer thread");
        match result {
            Err(RunError::ShutdownIncomplete(steps)) => assert!(
                steps.len() == 1 && steps[0].contains("a source did not stop in time"),
                "{steps:?}"
            ),
            other => panic!("expected the source's timeout only, got {other:?}"),
        }
        assert_eq!(final_targets(&jsonl), vec!["mariadbd".to_owned()]);
    }

    /// A stand-in OTLP/HTTP collector: takes every push, counts the metric ones.
    async fn collector() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a free port");
        let addr = listener.local_addr().expect("bound address");
        let pushes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = pushes.clone();
        let metrics = move || {
            counted.fetch_add(1, Ordering::Relaxed);
            // An empty protobuf message: the default (full success) answer.
            async { Vec::<u8>::new() }
        };
        let app = axum::Router::new()
            .route("/v1/metrics", axum::routing::post(metrics))
            .route(
                "/v1/logs",
                axum::routing::post(|| async { Vec::<u8>::new() }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), pushes)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_json_reader_does_not_cancel_the_final_otlp_push() {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let trace = dir.path().join("trace.txt");
        std::fs::write(&trace, perf_trace()).expect("trace written");
        let out = dir.path().join("reports.fifo");
        mkfifo(&out);
        // The reader of the JSON lines: it never reads, and its pipe is full already, so
        // the sink's first line blocks its writer for good.
        let mut stalled = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&out)
            .expect("FIFO opens");
        loop {
            match stalled.write(&[b'\n'; 4096]) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("filling the pipe: {e}"),
            }
        }
        let (endpoint, pushes) = collector().await;
        let mut cfg = replaying(&trace);
        cfg.sinks.json.enabled = true;
        cfg.sinks.json.path = Some(out.clone());
        cfg.sinks.otlp.enabled = true;
        cfg.sinks.otlp.exporter.protocol = OtlpProtocol::Http;
        cfg.sinks.otlp.exporter.endpoint = Some(endpoint);
        // Only the final push, at shutdown.
        cfg.sinks.otlp.exporter.interval_seconds = 600;
        let shutdown = tokio::time::sleep(Duration::from_millis(1_500));
        let result = run(cfg, shutdown, None).await;
        drop(stalled);
        match result {
            // Before, the sink's wait held the engine thread past its join, which left
            // the OTLP sink unflushed and was logged as an engine that did not drain.
            Err(RunError::ShutdownIncomplete(steps)) => assert!(
                steps.len() == 1 && steps[0].contains("JSON sink did not write"),
                "{steps:?}"
            ),
            other => panic!("expected the JSON sink's timeout only, got {other:?}"),
        }
        assert!(
            pushes.load(Ordering::Relaxed) >= 1,
            "the final OTLP push reached the collector"
        );
    }

    /// An engine without targets that panics on its first batch (an engine bug) or fails
    /// its `finish` (a guest trapping in `fl_finish`).
    struct Faulty {
        panics_on_ingest: bool,
    }

    impl EngineHost for Faulty {
        fn kind(&self) -> EngineKind {
            EngineKind::Native
        }
        fn set_target_params(
            &mut self,
            _: &str,
            _: faultline_engine::Params,
        ) -> Result<(), engine_host::HostError> {
            Ok(())
        }
        fn clear_target_params(&mut self, _: &str) -> Result<(), engine_host::HostError> {
            Ok(())
        }
        fn ingest(
            &mut self,
            _: &str,
            _: &[faultline_engine::SyscallEvent],
        ) -> Result<(), engine_host::HostError> {
            assert!(!self.panics_on_ingest, "engine bug (test double)");
            Ok(())
        }
        fn trigger(
            &mut self,
            _: &str,
            _: u64,
        ) -> Result<Option<faultline_engine::Report>, engine_host::HostError> {
            Ok(None)
        }
        fn advance(
            &mut self,
            _: &str,
            _: u64,
            _: faultline_engine::Stillness,
        ) -> Result<(), engine_host::HostError> {
            Ok(())
        }
        fn forget(&mut self, _: &str) -> Result<(), engine_host::HostError> {
            Ok(())
        }
        fn take_reports(
            &mut self,
        ) -> Result<Vec<faultline_engine::Report>, engine_host::HostError> {
            Ok(Vec::new())
        }
        fn finish(&mut self) -> Result<Vec<faultline_engine::Report>, engine_host::HostError> {
            Err(engine_host::HostError::Trap {
                call: "fl_finish",
                message: "out of fuel (test double)".into(),
            })
        }
        fn calibrate(
            &mut self,
            _: &str,
            _: Option<u64>,
        ) -> Result<Option<faultline_engine::report::Calibration>, engine_host::HostError> {
            Ok(None)
        }
        fn counters(
            &mut self,
        ) -> Result<faultline_engine::report::EngineCounters, engine_host::HostError> {
            Ok(Default::default())
        }
        fn state_bytes(&mut self) -> Result<usize, engine_host::HostError> {
            Ok(0)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_finish_fails_the_run() {
        let engine = Box::new(Faulty {
            panics_on_ingest: false,
        });
        let telemetry = Arc::new(Telemetry::default());
        match run_engine(quiet_config(), engine, telemetry, async {}, None).await {
            Err(RunError::ShutdownIncomplete(steps)) => assert!(
                steps.iter().any(|s| s.contains("failed to finish")),
                "{steps:?}"
            ),
            other => panic!("expected a failed shutdown, got {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_engine_thread_that_dies_ends_the_run_with_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let trace = dir.path().join("trace.txt");
        std::fs::write(&trace, perf_trace()).expect("trace written");
        let engine = Box::new(Faulty {
            panics_on_ingest: true,
        });
        let telemetry = Arc::new(Telemetry::default());
        // Never asked to stop: only the engine's end can end the run.
        let running = run_engine(
            replaying(&trace),
            engine,
            telemetry.clone(),
            std::future::pending(),
            None,
        );
        let result = tokio::time::timeout(Duration::from_secs(60), running)
            .await
            .expect("the run ended when its engine thread died");
        match result {
            Err(RunError::EngineDied(steps)) => {
                assert!(steps.iter().any(|s| s.contains("panicked")), "{steps:?}")
            }
            other => panic!("expected the engine's death, got {other:?}"),
        }
        assert!(!telemetry.engine_up(), "shown as down meanwhile");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_final_otlp_push_that_fails_fails_the_run() {
        // A port nobody listens on any more: the final push is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut cfg = quiet_config();
        cfg.sinks.otlp.enabled = true;
        cfg.sinks.otlp.exporter.protocol = OtlpProtocol::Http;
        cfg.sinks.otlp.exporter.endpoint = Some(format!("http://127.0.0.1:{port}"));
        cfg.sinks.otlp.exporter.timeout_seconds = 1;
        match run(cfg, async {}, None).await {
            Err(RunError::ShutdownIncomplete(steps)) => {
                assert!(steps.iter().any(|s| s.contains("OTLP sink")), "{steps:?}")
            }
            other => panic!("expected a failed shutdown, got {other:?}"),
        }
    }
}
