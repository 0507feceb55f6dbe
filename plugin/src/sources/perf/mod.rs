//! The perf sources: `perf script` text of syscall tracepoints, `perf trace` text, and live
//! capture by running `perf` as a child process whose output goes through the same readers.

pub mod batcher;
pub mod live;
pub mod script;
pub mod script_line;
pub mod tally;
pub mod trace;

pub use script::PerfScriptReader;
pub use trace::PerfTraceReader;

use faultline_engine::syscalls::Arch;

use crate::pipeline::telemetry::{DropReason, SourceStats};

/// Bad input lines logged in full before the log goes quiet (the counter keeps counting).
const LOGGED_BAD_LINES: u64 = 5;

/// Rate-limits warnings about undecodable lines: a corrupt file must not flood the log,
/// yet the first few examples (with line numbers) are what a user needs to see.
#[derive(Debug)]
pub struct DecodeLog {
    source: &'static str,
    logged: u64,
}

impl DecodeLog {
    pub fn new(source: &'static str) -> Self {
        Self { source, logged: 0 }
    }

    /// Records one bad line; warns for the first few only.
    pub fn bad_line(&mut self, line_no: u64, line: &[u8]) {
        if self.logged < LOGGED_BAD_LINES {
            let shown: String = String::from_utf8_lossy(line)
                .trim_end()
                .chars()
                .take(200)
                .collect();
            tracing::warn!(source = self.source, line_no, line = %shown, "undecodable line skipped");
        } else if self.logged == LOGGED_BAD_LINES {
            tracing::warn!(
                source = self.source,
                "more undecodable lines; only counting them from now on"
            );
        }
        self.logged += 1;
    }

    /// Records one line over the length cap (`head` is its start); warns like [`Self::bad_line`].
    pub fn too_long(&mut self, line_no: u64, head: &[u8]) {
        if self.logged < LOGGED_BAD_LINES {
            tracing::warn!(
                source = self.source,
                line_no,
                max_bytes = crate::sources::lines::MAX_LINE_BYTES,
                "line longer than the cap skipped"
            );
        }
        self.bad_line(line_no, head);
    }
}

/// Rate-limits warnings about events the kernel lost (ring-buffer overruns): the first
/// few lost records are logged with their counts, later ones only counted, so a capture
/// that overruns all day warns without flooding the log.
#[derive(Debug)]
pub struct LostLog {
    source: &'static str,
    records: u64,
    events: u64,
}

impl LostLog {
    pub fn new(source: &'static str) -> Self {
        Self {
            source,
            records: 0,
            events: 0,
        }
    }

    /// Counts `lost` events into `stats` (reason `kernel_lost`) and warns about the first few.
    pub fn lost(&mut self, stats: &SourceStats, lost: u64) {
        stats.add_dropped(DropReason::KernelLost, lost);
        self.records += 1;
        self.events = self.events.saturating_add(lost);
        if self.records <= LOGGED_BAD_LINES {
            tracing::warn!(
                source = self.source,
                lost,
                lost_total = self.events,
                "the tracer lost events (its kernel ring buffer overran); analysis sees a thinned stream"
            );
        } else if self.records == LOGGED_BAD_LINES + 1 {
            tracing::warn!(
                source = self.source,
                "more lost-event records; only counting them from now on (faultline_events_dropped_total{{reason=\"kernel_lost\"}})"
            );
        }
    }

    /// Events reported lost so far.
    pub fn events(&self) -> u64 {
        self.events
    }
}

/// Parses an architecture name as given on the command line or in config
/// (`x86_64`/`amd64`, `aarch64`/`arm64`).
pub fn parse_arch(name: &str) -> Option<Arch> {
    match name.to_ascii_lowercase().as_str() {
        "x86_64" | "x86-64" | "amd64" => Some(Arch::X86_64),
        "aarch64" | "arm64" => Some(Arch::Aarch64),
        _ => None,
    }
}
