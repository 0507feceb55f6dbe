//! Starting the configured sources of `faultline run`: pull sources (replay, live perf,
//! LTTng) on the blocking pool with backpressure, and the OTLP receiver, each feeding the
//! engine queue through its own [`BatchSender`] so drops are counted per source.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use faultline_engine::syscalls::Arch;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::queue::BatchSender;
use super::runner::RunError;
use super::telemetry::{DropReason, LiveSource, SourceRun, SourceStats, Telemetry};
use crate::config::{Config, ConfigError, ReplayFormat};
use crate::model::EventBatch;
use crate::sources::child::ChildStopper;
use crate::sources::lttng::{self, reader as lttng_reader};
use crate::sources::on_host::OnHost;
use crate::sources::otlp::{self, OtlpServer};
use crate::sources::perf::live::{self as perf_live, PerfTarget};
use crate::sources::perf::{parse_arch, script as perf_script, PerfScriptReader};
use crate::sources::tcp_segments::{self, TcpSegmentsReader};
use crate::sources::{BatchReader, SourceError};

/// A running pull source.
pub struct PullSource {
    pub task: JoinHandle<()>,
    /// Stops the processes feeding it (live tools, babeltrace2); empty for files.
    producers: ChildStopper,
    /// Its run state, when it is a live capture.
    live: Option<Arc<LiveSource>>,
}

impl PullSource {
    /// Asks the source to end: terminates its live tools (the reader then drains what was
    /// captured and sees the end of the stream); file sources stop at their next batch.
    pub fn stop(&self) {
        // First, so the capture's end reads as our stop, not as the source going down.
        if let Some(live) = &self.live {
            live.set_run(SourceRun::Stopped);
        }
        self.producers.terminate();
    }
}

/// Starts every enabled source; each gets its own [`BatchSender`] (its drops are counted
/// against it) and stops when `stop` is set or its input ends.
pub fn start_pull_sources(
    cfg: &Config,
    tx: &mpsc::Sender<EventBatch>,
    telemetry: &Arc<Telemetry>,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<PullSource>, RunError> {
    let mut handles = Vec::new();
    let s = &cfg.sources;
    if s.perf.enabled {
        let target = if !s.perf.pids.is_empty() {
            PerfTarget::Pids(s.perf.pids.clone())
        } else if let Some(cg) = &s.perf.cgroup {
            PerfTarget::Cgroup(cg.clone())
        } else {
            PerfTarget::Command(s.perf.command.clone())
        };
        let stats = telemetry.source(perf_script::SOURCE);
        let opts = perf_live::RecordOptions {
            cpu_time: s.perf.cpu_time,
            counters: s.perf.counters,
            ..perf_live::RecordOptions::default()
        };
        let reader = perf_live::spawn_script_with(&target, host_arch()?, stats.clone(), opts)
            .map_err(|e| source_error("sources.perf", &e))?;
        tracing::info!(?target, "live perf source started");
        let producers = reader.get_ref().stopper();
        handles.push(spawn_pull(
            Box::new(reader),
            producers,
            tx,
            stats,
            stop,
            "perf",
            Some(telemetry),
        ));
        // The traced processes' TCP counters, read from /proc: ends with `stop` (it has no
        // producers), and is no live capture whose end would be a fault.
        if s.perf.tcp_segments {
            let stats = telemetry.source(tcp_segments::SOURCE);
            match TcpSegmentsReader::for_target(&target, stats.clone(), stop.clone()) {
                Some(reader) => {
                    tracing::info!("TCP segment sampling started");
                    handles.push(spawn_pull(
                        Box::new(reader),
                        ChildStopper::default(),
                        tx,
                        stats,
                        stop,
                        tcp_segments::SOURCE,
                        None,
                    ));
                }
                None => tracing::info!(
                    "TCP segments are sampled for `pids` or a `cgroup` only, not for a command"
                ),
            }
        }
    }
    if s.lttng.enabled {
        let input = match (&s.lttng.relayd_url, &s.lttng.trace_dir) {
            (Some(url), _) => url.clone(),
            (None, Some(dir)) => dir.display().to_string(),
            (None, None) => {
                return Err(
                    ConfigError::invalid("sources.lttng", "needs relayd_url or trace_dir").into(),
                )
            }
        };
        let stats = telemetry.source(lttng_reader::SOURCE);
        let reader = lttng::open(&input, host_arch()?, stats.clone())
            .map_err(|e| source_error("sources.lttng", &e))?;
        tracing::info!(%input, "LTTng source started");
        let producers = reader.get_ref().stopper();
        // A relay daemon's session is the traced host's kernel: its processes are that
        // host's (the router tells another host's apart from this one's).
        let reader: Box<dyn BatchReader> = match lttng::live_url::parse(&input) {
            Ok(url) => Box::new(OnHost::new(Box::new(reader), url.traced_host)),
            Err(_) => Box::new(reader),
        };
        // Live only when read from a relay daemon: a recorded trace ends when it is read.
        let live = s.lttng.relayd_url.is_some().then_some(telemetry);
        handles.push(spawn_pull(
            reader, producers, tx, stats, stop, "lttng", live,
        ));
    }
    if s.replay.enabled {
        let path = s
            .replay
            .path
            .clone()
            .ok_or_else(|| ConfigError::invalid("sources.replay.path", "required"))?;
        let arch = parse_arch(&s.replay.arch)
            .ok_or_else(|| ConfigError::invalid("sources.replay.arch", "unknown architecture"))?;
        let stats = telemetry.source("perf");
        let reader: Box<dyn BatchReader> = match s.replay.format {
            ReplayFormat::Perf => Box::new(
                PerfScriptReader::open(&path, arch, stats.clone())
                    .map_err(|e| source_error(&path.display().to_string(), &e))?,
            ),
        };
        handles.push(spawn_pull(
            reader,
            ChildStopper::default(),
            tx,
            stats,
            stop,
            "replay",
            None,
        ));
    }
    Ok(handles)
}

/// Runs a pull source on the blocking pool until its input ends, or `stop` is set for a
/// source without live `producers` (those end when [`PullSource::stop`] terminates them,
/// so what they captured up to then still reaches the engine). `live`: the telemetry to
/// register it in when it is a live capture, whose end while faultline runs is a fault.
#[allow(clippy::too_many_arguments)]
fn spawn_pull(
    reader: Box<dyn BatchReader>,
    producers: ChildStopper,
    tx: &mpsc::Sender<EventBatch>,
    stats: Arc<SourceStats>,
    stop: &Arc<AtomicBool>,
    name: &'static str,
    live: Option<&Arc<Telemetry>>,
) -> PullSource {
    let live = live.map(|t| t.start_live(name));
    let sender = BatchSender::new(tx.clone(), stats);
    let file_stop = producers.is_empty().then(|| stop.clone());
    let shutting_down = stop.clone();
    let state = live.clone();
    let task = tokio::task::spawn_blocking(move || {
        let why = pull(reader, &sender, file_stop.as_deref(), name);
        let Some(state) = state else {
            return;
        };
        // Once shutdown began, however the capture ended is our doing (a Ctrl-C reaches
        // the tools too, and may end them before we do).
        let why = if shutting_down.load(Ordering::Relaxed) {
            SourceRun::Stopped
        } else {
            why
        };
        state.set_run(why);
        if state.is_down() {
            tracing::error!(
                "the live {name} capture ended on its own: its targets are no longer watched \
                 (/healthz reports it; restart faultline once the cause is fixed)"
            );
        }
    });
    PullSource {
        task,
        producers,
        live,
    }
}

/// Pull source loop: backpressure (a full queue) slows the reader instead of dropping.
/// Returns how it ended.
fn pull(
    mut reader: Box<dyn BatchReader>,
    sender: &BatchSender,
    stop: Option<&AtomicBool>,
    name: &str,
) -> SourceRun {
    let mut batches = 0u64;
    let why = loop {
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            break SourceRun::Stopped;
        }
        match reader.next_batch() {
            Ok(Some(b)) => {
                let events = b.events.len() as u64;
                // Closed only when the engine side is shutting down: it stopped taking
                // batches once the sources had their time, so this one came too late.
                // The queue refused it like a full one, and it is counted as such.
                if sender.blocking_send(b).is_err() {
                    sender.stats().add_dropped(DropReason::QueueFull, events);
                    break SourceRun::Stopped;
                }
                batches += 1;
            }
            Ok(None) => break SourceRun::Ended,
            Err(e) => {
                tracing::error!(error = %e, "{name} source failed");
                break SourceRun::Failed;
            }
        }
    };
    tracing::info!(batches, "{name} source finished");
    why
}

/// Live sources trace this machine, so syscall numbers are this machine's.
fn host_arch() -> Result<Arch, RunError> {
    parse_arch(std::env::consts::ARCH).ok_or(RunError::Unsupported(
        "live tracing on this CPU architecture",
    ))
}

fn source_error(what: &str, e: &SourceError) -> RunError {
    RunError::Io {
        what: what.to_owned(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Starts the OTLP receiver (gRPC and HTTP) when enabled; each front end gets its own
/// sender so drops are labelled `otlp_grpc` / `otlp_http`.
pub async fn start_otlp(
    cfg: &Config,
    tx: &mpsc::Sender<EventBatch>,
    telemetry: &Arc<Telemetry>,
) -> Result<Option<OtlpServer>, RunError> {
    if !cfg.sources.otlp.enabled {
        return Ok(None);
    }
    let grpc = BatchSender::new(tx.clone(), telemetry.source(otlp::GRPC_SOURCE));
    let http = BatchSender::new(tx.clone(), telemetry.source(otlp::HTTP_SOURCE));
    // Stopped explicitly through `OtlpServer::stop` during the ordered shutdown.
    let server = otlp::start(
        &cfg.sources.otlp.receiver,
        grpc,
        http,
        std::future::pending(),
    )
    .await?;
    if let Some(a) = server.grpc_addr {
        tracing::info!(grpc_address = %a, "OTLP/gRPC receiver listening");
    }
    if let Some(a) = server.http_addr {
        tracing::info!(http_address = %a, "OTLP/HTTP receiver listening");
    }
    Ok(Some(server))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProcessInfo;
    use crate::pipeline::queue;
    use faultline_engine::syscalls::SyscallId;
    use faultline_engine::SyscallEvent;

    /// Hands out `left` batches of 10 events, then ends.
    struct Batches {
        left: u32,
    }

    impl BatchReader for Batches {
        fn next_batch(&mut self) -> Result<Option<EventBatch>, SourceError> {
            if self.left == 0 {
                return Ok(None);
            }
            self.left -= 1;
            let read = SyscallId::from_name("read");
            let events = (0..10)
                .map(|i| SyscallEvent::complete(7, 7, read, i * 1_000, 100))
                .collect();
            Ok(Some(EventBatch {
                source: "replay",
                process: ProcessInfo::default(),
                events,
            }))
        }
    }

    #[test]
    fn a_batch_read_after_the_engine_stopped_taking_them_is_counted_as_dropped() {
        let telemetry = Telemetry::default();
        let stats = telemetry.source("perf");
        let (tx, mut rx) = queue::bounded(4);
        // The engine's stop closes the queue from its side while the source still reads.
        rx.close();
        let sender = BatchSender::new(tx, stats.clone());
        let why = pull(Box::new(Batches { left: 3 }), &sender, None, "replay");
        assert_eq!(why, SourceRun::Stopped, "a closed queue ends the source");
        assert_eq!(
            stats.dropped(DropReason::QueueFull),
            10,
            "the one batch it tried"
        );
    }
}
