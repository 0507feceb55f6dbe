//! `faultline run` wiring: sources → bounded queue → engine thread → sinks, plus the HTTP
//! endpoint, and an orderly shutdown (stop sources, drain the queue, finish the engine,
//! flush the sinks) when the shutdown future resolves.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::engine_task::{EngineTask, EngineTaskSummary};
use super::latest::{LatestReports, LatestReportsSink};
use super::queue;
use super::report_sink::ReportSink;
use super::router::Router;
use super::silence::SilenceWatch;
use super::source_tasks::{start_otlp, start_pull_sources};
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
pub async fn run(
    cfg: Config,
    shutdown: impl Future<Output = ()>,
    on_listening: Option<OnListening>,
) -> Result<RunSummary, RunError> {
    let telemetry = Arc::new(Telemetry::default());
    let engine = build_engine(&cfg, &telemetry)?;
    let router = Router::new(&cfg.targets, cfg.analysis.max_targets);
    let mut target_params = Vec::with_capacity(cfg.targets.len());
    for (i, t) in cfg.targets.iter().enumerate() {
        target_params.push((
            t.name.trim().to_owned(),
            t.effective_params(&cfg.analysis, i)?,
        ));
    }
    let sinks = build_sinks(&cfg, &telemetry)?;

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
    let engine_thread = std::thread::Builder::new()
        .name("faultline-engine".into())
        .spawn(move || task.run(handle, rx, cmd_rx))
        .map_err(|source| RunError::Io {
            what: "engine thread".into(),
            source,
        })?;

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

    shutdown.await;
    tracing::info!("shutting down: stopping sources, draining the queue");
    let limit = Duration::from_secs_f64(cfg.pipeline.shutdown_timeout_seconds);
    // Every step that fails is logged where it happens and makes the run fail at the end.
    let mut failed = Vec::new();
    let mut fail = |what: String| {
        tracing::warn!("{what}");
        failed.push(what);
    };
    stop_sources.store(true, Ordering::Relaxed);
    if let Some(server) = otlp_server {
        server.stop();
        match tokio::time::timeout(limit, server.wait()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => fail(format!("OTLP receiver stopped with an error: {e}")),
            Err(_) => fail(format!("OTLP receiver did not stop in time ({limit:?})")),
        }
    }
    for s in &sources {
        s.stop();
    }
    for s in sources {
        match tokio::time::timeout(limit, s.task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => fail(format!("a source task ended abnormally: {e}")),
            Err(_) => fail(format!("a source did not stop in time ({limit:?})")),
        }
    }
    // Last sender gone: the engine thread drains what is queued, finishes and flushes.
    drop(tx);
    let joined = tokio::time::timeout(
        limit,
        tokio::task::spawn_blocking(move || engine_thread.join()),
    )
    .await;
    let summary = match joined {
        Ok(Ok(Ok(summary))) => Some(summary),
        Ok(_) => {
            fail("the engine thread panicked; final reports may be missing".into());
            None
        }
        Err(_) => {
            fail(format!(
                "the engine did not drain the queue and finish within {limit:?}; final reports may be missing"
            ));
            None
        }
    };
    // The engine thread has dropped its handle: push the last metrics and verdict logs.
    if let Some(sink) = sinks.otlp {
        match Arc::into_inner(sink) {
            Some(sink) => match tokio::time::timeout(limit, sink.shutdown()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => fail(format!("OTLP sink failed to push its final metrics: {e}")),
                Err(_) => fail(format!(
                    "OTLP sink did not push its final metrics within {limit:?}"
                )),
            },
            // The engine thread still runs and holds it: flushing now would race with it.
            None => fail("OTLP sink not flushed: the engine thread still holds it".into()),
        }
    }
    // The HTTP endpoint stops last, so `/report` showed the final reports until now.
    if let Some((stop, task)) = http {
        let _ = stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
    }
    match summary {
        Some(engine) if failed.is_empty() => Ok(RunSummary { engine }),
        _ => Err(RunError::ShutdownIncomplete(failed)),
    }
}

/// The sinks the engine thread feeds, and the shared pieces the runner keeps.
struct Sinks {
    list: Vec<Box<dyn ReportSink>>,
    latest: Arc<LatestReports>,
    exporter: Option<Arc<PrometheusExporter>>,
    /// Kept to flush it after the engine thread has finished.
    otlp: Option<Arc<OtlpSink>>,
}

fn build_sinks(cfg: &Config, telemetry: &Arc<Telemetry>) -> Result<Sinks, RunError> {
    let latest = Arc::new(LatestReports::new(cfg.analysis.max_targets));
    let mut list: Vec<Box<dyn ReportSink>> = vec![Box::new(LatestReportsSink(latest.clone()))];
    let exporter = if cfg.sinks.prometheus.enabled {
        let (sink, exporter) = prometheus::new(&cfg.sinks.prometheus, telemetry.clone());
        list.push(Box::new(sink));
        Some(exporter)
    } else {
        None
    };
    if cfg.sinks.json.enabled {
        let path = cfg.sinks.json.path.as_deref();
        let sink = JsonLinesSink::open(path, telemetry.clone())
            .map_err(|source| RunError::Io {
                what: path.map_or("stdout".into(), |p| p.display().to_string()),
                source,
            })?
            // The final reports are written within the shutdown's limit, or it fails.
            .with_shutdown_wait(Duration::from_secs_f64(
                cfg.pipeline.shutdown_timeout_seconds,
            ));
        list.push(Box::new(sink));
    }
    let otlp = if cfg.sinks.otlp.enabled {
        let sink = OtlpSink::start(cfg.sinks.otlp.exporter.clone(), telemetry.clone())
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
