//! Sources: everything that turns outside input into [`EventBatch`]es.
//!
//! Pull sources (recorded files, `perf`/`babeltrace2` output, stdin) implement
//! [`BatchReader`] so the same decoder serves offline `analyze` and live `run`;
//! push sources (OTLP) feed a [`crate::pipeline::queue::BatchSender`] directly.
//! [`tcp_segments`] is a pull source of its own: it samples the live perf source's
//! processes' TCP counters from `/proc`.

pub mod child;
pub mod input;
pub(crate) mod lines;
pub mod lttng;
pub mod on_host;
pub mod otlp;
pub mod perf;
pub mod tcp_segments;

use crate::model::EventBatch;

/// Most events a source puts in one batch, so queue capacity bounds memory.
pub const MAX_BATCH_EVENTS: usize = 4096;

/// A failure that stops a source (bad lines are counted as decode errors instead).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("I/O error reading {what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("external tool `{tool}` failed: {message}")]
    Tool { tool: String, message: String },
}

/// A decoder that yields batches until its input ends.
pub trait BatchReader: Send {
    /// The next batch, `Ok(None)` at end of input. Undecodable records are counted in the
    /// source's [`crate::pipeline::telemetry::SourceStats`] and skipped, not returned as errors.
    fn next_batch(&mut self) -> Result<Option<EventBatch>, SourceError>;

    /// Bytes of input consumed so far (for progress bars); 0 when unknown.
    fn bytes_read(&self) -> u64 {
        0
    }
}
