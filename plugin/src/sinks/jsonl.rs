//! JSON-lines sink: one `faultline_engine::Report` per line (the stable report schema),
//! flushed after each line so `tail -f` and log shippers see reports as they happen.
//!
//! The engine thread only encodes a report and queues the line; a writer thread of the
//! sink's own (`writer`) writes it. A reader of stdout that stalls (a pipe to a hung log
//! shipper, Docker's blocking log driver) then blocks that thread alone: were the engine
//! to block, its queue would fill and the sources would drop events, firing the wrong
//! alerts. Nothing is lost silently, everything lands in
//! `faultline_sink_errors_total{sink="json"}`:
//! - a report that finds the queue full is refused by [`ReportSink::publish`], which the
//!   engine task counts and warns about (rate-limited);
//! - a failed write is counted and warned about (rate-limited) by the writer thread, and
//!   never leaves a torn line that the next report would be appended to;
//! - reports still queued when the sink is dropped (shutdown) are written within a bounded
//!   wait ([`JsonLinesSink::with_shutdown_wait`]); those left are counted and logged.
//!
//! A file follows log rotation (`reopen`).

mod reopen;
mod writer;

use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use faultline_engine::Report;

use crate::pipeline::report_sink::{ReportSink, SinkError};
use crate::pipeline::telemetry::Telemetry;
use reopen::ReopeningFile;
use writer::Destination;

/// Reports waiting for the writer thread at most. Enough to ride out a reader that
/// pauses for a while (four cadence rounds of the default 64 targets), small enough that
/// a reader that never comes back holds a few MB (a report line is tens of KB at most)
/// instead of all memory; past it, reports are dropped and counted.
pub const QUEUE_REPORTS: usize = 256;

/// How long dropping the sink waits for the queued reports unless told otherwise: the
/// default `pipeline.shutdown_timeout_seconds` (`faultline run` passes the configured one).
pub const DEFAULT_SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// The sink's name in logs and in `faultline_sink_errors_total`.
const SINK: &str = "json";

/// What became of the reports published so far (for tests and the shutdown log).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JsonSinkStats {
    /// Written whole and flushed.
    pub written: u64,
    /// Whose write or flush failed.
    pub failed: u64,
    /// Refused by `publish` because the queue was full or the writer was gone.
    pub dropped: u64,
    /// Queued, or being written.
    pub pending: u64,
}

/// Progress counters, shared by the engine thread (queueing) and the writer thread.
#[derive(Debug, Default)]
struct Counts {
    accepted: u64,
    written: u64,
    failed: u64,
    dropped: u64,
    /// The writer thread ended (queue closed and drained, abandoned, or a panic).
    stopped: bool,
}

impl Counts {
    fn stats(&self) -> JsonSinkStats {
        JsonSinkStats {
            written: self.written,
            failed: self.failed,
            dropped: self.dropped,
            pending: self
                .accepted
                .saturating_sub(self.written)
                .saturating_sub(self.failed),
        }
    }
}

/// State both threads see; the condition variable lets the shutdown (and tests) wait for
/// the writer without polling.
#[derive(Debug, Default)]
struct Shared {
    counts: Mutex<Counts>,
    /// Notified whenever the writer finishes a line or stops.
    progress: Condvar,
    /// The shutdown stopped waiting: the writer must not write what it still holds, which
    /// is already counted as lost.
    abandoned: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Counts> {
        // Counters stay meaningful after a panic elsewhere: keep using them.
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The writer finished one line (`ok`: written whole and flushed).
    fn line_done(&self, ok: bool) {
        let mut c = self.lock();
        if ok {
            c.written += 1;
        } else {
            c.failed += 1;
        }
        drop(c);
        self.progress.notify_all();
    }

    fn stopped(&self) {
        self.lock().stopped = true;
        self.progress.notify_all();
    }

    /// Waits until `done` holds or `timeout` passes; whether it holds.
    fn wait_until(&self, timeout: Duration, done: impl Fn(&Counts) -> bool) -> bool {
        let (counts, _) = self
            .progress
            .wait_timeout_while(self.lock(), timeout, |c| !done(c))
            .unwrap_or_else(PoisonError::into_inner);
        done(&counts)
    }
}

/// Writes reports as JSON lines to stdout or a file, from a thread of its own.
pub struct JsonLinesSink {
    /// `None` once closed, which tells the writer to finish what it holds and stop.
    queue: Option<SyncSender<Vec<u8>>>,
    shared: Arc<Shared>,
    writer: Option<JoinHandle<()>>,
    telemetry: Arc<Telemetry>,
    shutdown_wait: Duration,
}

impl std::fmt::Debug for JsonLinesSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonLinesSink")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl JsonLinesSink {
    /// Appends to `path` (reopened when log rotation moves or deletes it), or writes to
    /// stdout when it is `None` or `-`. Write failures are counted in `telemetry`.
    pub fn open(path: Option<&Path>, telemetry: Arc<Telemetry>) -> io::Result<Self> {
        match path {
            Some(p) if p != Path::new("-") => {
                let file = ReopeningFile::open(p, reopen::CHECK_EVERY)?;
                Self::start(Destination::File(file), telemetry)
            }
            _ => Self::start(Destination::Stream(Box::new(io::stdout())), telemetry),
        }
    }

    /// Writes to any writer: the seam tests use to stand in a buffer or a stalled reader.
    pub fn new(out: Box<dyn Write + Send>, telemetry: Arc<Telemetry>) -> io::Result<Self> {
        Self::start(Destination::Stream(out), telemetry)
    }

    fn start(dest: Destination, telemetry: Arc<Telemetry>) -> io::Result<Self> {
        let (queue, lines) = mpsc::sync_channel(QUEUE_REPORTS);
        let shared = Arc::new(Shared::default());
        let writer = {
            let shared = shared.clone();
            let telemetry = telemetry.clone();
            std::thread::Builder::new()
                .name("faultline-json".into())
                .spawn(move || writer::run(lines, dest, &shared, &telemetry))?
        };
        Ok(Self {
            queue: Some(queue),
            shared,
            writer: Some(writer),
            telemetry,
            shutdown_wait: DEFAULT_SHUTDOWN_WAIT,
        })
    }

    /// How long dropping the sink waits for the queued reports to be written: the
    /// shutdown's final reports matter, but a reader that never comes back must not keep
    /// the process from exiting.
    pub fn with_shutdown_wait(mut self, wait: Duration) -> Self {
        self.shutdown_wait = wait;
        self
    }

    /// Counts of what became of the reports published so far.
    pub fn stats(&self) -> JsonSinkStats {
        self.shared.lock().stats()
    }

    /// Waits up to `timeout` until every queued report is written (or failed); whether
    /// they all are. For callers that need the output now, e.g. to read it back.
    pub fn wait_written(&self, timeout: Duration) -> bool {
        self.shared
            .wait_until(timeout, |c| c.stats().pending == 0 || c.stopped)
            && self.stats().pending == 0
    }

    /// Queues one encoded line without blocking; a full queue drops it (the error says so).
    fn enqueue(&mut self, line: Vec<u8>) -> Result<(), SinkError> {
        let Some(queue) = &self.queue else {
            return Err(sink_error("closed".into()));
        };
        // Held across `try_send` (which never blocks) so the writer cannot count a line
        // done before it is counted accepted: `pending` never goes negative.
        let mut counts = self.shared.lock();
        match queue.try_send(line) {
            Ok(()) => {
                counts.accepted += 1;
                Ok(())
            }
            Err(TrySendError::Full(_)) => {
                counts.dropped += 1;
                Err(sink_error(format!(
                    "{QUEUE_REPORTS} reports already wait for the writer (is the reader of the output stalled?): report dropped"
                )))
            }
            Err(TrySendError::Disconnected(_)) => {
                counts.dropped += 1;
                Err(sink_error(
                    "the writer thread is gone: report dropped".into(),
                ))
            }
        }
    }
}

impl ReportSink for JsonLinesSink {
    fn name(&self) -> &'static str {
        SINK
    }

    fn publish(&mut self, report: &Report) -> Result<(), SinkError> {
        // Encoded here, so a report that cannot be encoded fails at once and writes nothing.
        let mut line = Vec::with_capacity(4096);
        serde_json::to_writer(&mut line, report).map_err(|e| sink_error(e.to_string()))?;
        line.push(b'\n');
        self.enqueue(line)
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        // The writer flushes after each line. Waiting for it here (the engine flushes when
        // idle) would tie the engine to the reader again; the wait is at drop.
        Ok(())
    }
}

impl Drop for JsonLinesSink {
    fn drop(&mut self) {
        // Closing the queue lets the writer write what it holds, then stop.
        drop(self.queue.take());
        let finished = self.shared.wait_until(self.shutdown_wait, |c| c.stopped);
        if !finished {
            // The writer (blocked in a write) stops once that write returns or with the process.
            self.shared.abandoned.store(true, Ordering::Relaxed);
        }
        let lost = self.stats().pending;
        if lost > 0 {
            for _ in 0..lost {
                self.telemetry.add_sink_error(SINK);
            }
            tracing::warn!(
                lost,
                waited = ?self.shutdown_wait,
                "JSON sink: reports not written at shutdown, the reader of its output stalled (counted in faultline_sink_errors_total{{sink=\"json\"}})"
            );
        }
        if finished {
            if let Some(w) = self.writer.take() {
                // It has stopped; a panic in it was counted above as lost reports.
                let _ = w.join();
            }
        }
    }
}

fn sink_error(message: String) -> SinkError {
    SinkError {
        sink: SINK,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use faultline_engine::report::{
        DecisionPath, EngineCounters, OnsetDistribution, ThreadCounts, Trigger,
        REPORT_SCHEMA_VERSION,
    };
    use faultline_engine::{Params, Subsystem, Verdict};

    const WAIT: Duration = Duration::from_secs(30);

    fn report(target: &str) -> Report {
        // Through serde, so fields the engine adds later (`#[serde(default)]`) don't matter.
        let v = serde_json::json!({
            "schema_version": REPORT_SCHEMA_VERSION,
            "target": target,
            "trigger": Trigger::EndOfStream,
            "window_start_ns": 5,
            "window_end_ns": 10,
            "anomaly_onset_ns": null,
            "verdict": Verdict::None,
            "decided_by": DecisionPath::NoAnomaly,
            "impact_factor": 0.0,
            "impact_factor_filtered": null,
            "onset_dispersion_seconds": 0.0,
            "threads": ThreadCounts::default(),
            "onset_times_seconds": OnsetDistribution::default(),
            "top_syscalls_by_time": [],
            "top_syscalls_by_frequency": [],
            "subsystem": Subsystem::None,
            "hint": "",
            "syscalls": [],
            "events_analyzed": 0,
            "counters": EngineCounters::default(),
            "parameters": Params::default(),
        });
        serde_json::from_value(v).expect("a valid report")
    }

    /// The targets of the reports in the file at `path`, in order.
    fn targets_in(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .expect("readable")
            .lines()
            .map(|l| {
                serde_json::from_str::<Report>(l)
                    .expect("a whole report")
                    .target
            })
            .collect()
    }

    /// A file sink that checks for rotation before every line, so the tests need no sleep.
    fn file_sink(path: &Path) -> JsonLinesSink {
        let file = ReopeningFile::open(path, Duration::ZERO).expect("opens");
        JsonLinesSink::start(Destination::File(file), Arc::default()).expect("starts")
    }

    fn publish(sink: &mut JsonLinesSink, targets: &[&str]) {
        for t in targets {
            sink.publish(&report(t)).expect("queued");
        }
        assert!(sink.wait_written(WAIT));
    }

    #[test]
    fn after_a_rename_new_reports_go_to_a_new_file_at_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("reports.jsonl");
        let rotated = dir.path().join("reports.jsonl.1");
        let mut sink = file_sink(&path);
        publish(&mut sink, &["a", "b"]);
        // logrotate's `create` mode: rename, then (maybe) a new empty file.
        std::fs::rename(&path, &rotated).expect("renamed");
        publish(&mut sink, &["c", "d"]);
        drop(sink);
        assert_eq!(targets_in(&rotated), ["a", "b"]);
        assert_eq!(targets_in(&path), ["c", "d"]);
    }

    #[test]
    fn a_deleted_file_is_created_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("reports.jsonl");
        let mut sink = file_sink(&path);
        publish(&mut sink, &["a"]);
        std::fs::remove_file(&path).expect("deleted");
        publish(&mut sink, &["b", "c"]);
        drop(sink);
        assert_eq!(targets_in(&path), ["b", "c"]);
    }

    #[test]
    fn a_file_emptied_in_place_gets_the_next_report_at_its_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("reports.jsonl");
        let mut sink = file_sink(&path);
        publish(&mut sink, &["a", "b"]);
        // logrotate's `copytruncate` mode: same inode, emptied.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(0))
            .expect("truncated");
        publish(&mut sink, &["c"]);
        drop(sink);
        // Appending: no run of NULs up to the old length before the line.
        assert_eq!(targets_in(&path), ["c"]);
    }
}
