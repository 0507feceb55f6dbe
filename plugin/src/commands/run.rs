//! `faultline run`: the long-lived plugin; the binary edge around [`crate::pipeline::runner`].

use std::path::Path;

use anyhow::Context;

use crate::config;
use crate::pipeline::runner;

/// Loads the config (built-in defaults without a file), runs until SIGTERM, SIGINT or
/// SIGHUP, and returns once the final reports are flushed. An engine thread that dies
/// ends the run too, with an error: a supervisor restarts faultline on the exit status.
pub fn run(config_path: Option<&Path>) -> anyhow::Result<()> {
    run_with(config_path, None, LogFormat::Text)
}

/// How log lines are written: for a terminal and journald, or for a log shipper that
/// parses them (every field a JSON key, no regex to keep in step with the messages).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// [`run`] with an explicit log filter (`--log-level`, e.g. `debug` or
/// `faultline=debug,info`), which wins over `RUST_LOG`, and a log line format.
pub fn run_with(
    config_path: Option<&Path>,
    log_level: Option<&str>,
    log_format: LogFormat,
) -> anyhow::Result<()> {
    init_logging(log_level, log_format)?;
    let cfg = config::load(config_path).map_err(|e| match config_path {
        Some(p) => anyhow::anyhow!("{}: {e}", p.display()),
        None => anyhow::anyhow!("{e}"),
    })?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("faultline-rt")
        .build()
        .context("cannot start the async runtime")?;
    let result = rt.block_on(async {
        let shutdown = shutdown_signal().await?;
        // After the signal handlers: from here a signal stops the run, however early.
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            config = %config_path.map_or("built-in defaults".into(), |p| p.display().to_string()),
            "faultline starting"
        );
        runner::run(cfg, shutdown, None)
            .await
            .map_err(anyhow::Error::from)
    });
    // A live reader blocked on a silent child process must not keep us from exiting.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    let summary = result?;
    tracing::info!(
        events = summary.engine.events,
        reports = summary.engine.reports,
        "stopped"
    );
    Ok(())
}

/// Logs go to stderr (stdout may carry JSON-lines reports); `--log-level`, else `RUST_LOG`,
/// else `info`.
fn init_logging(level: Option<&str>, format: LogFormat) -> anyhow::Result<()> {
    let filter = match level {
        Some(l) => tracing_subscriber::EnvFilter::try_new(l)
            .with_context(|| format!("invalid log level `{l}`"))?,
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
    };
    // Another caller (tests, the CLI) may have installed a subscriber already; keep theirs.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        // Fields at the top level (`{"level":..,"message":..,"lost":..}`), not nested.
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    Ok(())
}

/// Resolves on the first SIGTERM, SIGINT or SIGHUP. SIGHUP is a shutdown too: its default
/// action would kill the process without its final reports (a closed terminal or a
/// supervisor's hangup). Once shutdown has begun, a second signal exits at once: an
/// operator who repeats it does not want to wait for the shutdown timeouts.
///
/// The signals are read by a task of their own from the moment this returns, not when the
/// returned future is first polled: the runner polls it only once started, and two
/// signals during a slow start (a WASM engine compiling) must still count as two (a
/// `Signal` keeps one pending delivery per kind, so a repeated Ctrl-C would merge).
async fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    let mut signals = Signals::install()?;
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let first = signals.next().await;
        tracing::info!("{first} received: shutting down (send another signal to exit at once)");
        let _ = first_tx.send(());
        let second = signals.next().await;
        tracing::error!(
            "{second} received during shutdown: exiting at once without waiting for the final reports"
        );
        // The capture tools run in their own process groups: stop them, or a quiet
        // target's perf would outlive faultline.
        crate::sources::child::terminate_all();
        std::process::exit(forced_exit_code(second));
    });
    Ok(async move {
        // An error means the task is gone with the runtime: no signal will come.
        if first_rx.await.is_err() {
            std::future::pending::<()>().await;
        }
    })
}

/// The exit status of a forced exit: 128 + the signal's number, as a shell reports a
/// process killed by it (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
fn forced_exit_code(signal: &str) -> i32 {
    128 + match signal {
        "SIGHUP" => 1,
        "SIGINT" => 2,
        _ => 15,
    }
}

/// The signals that stop `faultline run`.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            term: signal(SignalKind::terminate()).context("cannot install SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("cannot install SIGINT handler")?,
            hup: signal(SignalKind::hangup()).context("cannot install SIGHUP handler")?,
        })
    }

    /// The next signal's name; never resolves once the runtime is going away (`recv`
    /// returns `None` then, which is no signal).
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            Some(()) = self.term.recv() => "SIGTERM",
            Some(()) = self.int.recv() => "SIGINT",
            Some(()) = self.hup.recv() => "SIGHUP",
            else => std::future::pending().await,
        }
    }
}
