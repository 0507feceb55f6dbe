//! The JSON sink's writer thread: takes encoded lines off the queue and writes each one
//! whole, so that only this thread waits when the reader of the output stalls.

use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::time::Instant;

use super::reopen::ReopeningFile;
use super::{Shared, SINK};
use crate::pipeline::engine_task::ENGINE_WARN_EVERY;
use crate::pipeline::telemetry::Telemetry;
use crate::pipeline::warn_limit::WarnLimit;

/// Where the lines go.
pub(super) enum Destination {
    /// Stdout, or a test's writer.
    Stream(Box<dyn Write + Send>),
    /// A file that follows log rotation.
    File(ReopeningFile),
}

/// Writes until the queue is closed and empty, or the shutdown stops waiting.
pub(super) fn run(
    lines: Receiver<Vec<u8>>,
    dest: Destination,
    shared: &Shared,
    telemetry: &Telemetry,
) {
    // Set however the thread ends, so the shutdown's wait ends with it (even on a panic).
    let _stopped = StopGuard(shared);
    let mut out = Lines {
        dest,
        at_line_start: true,
    };
    let mut write_warnings = WarnLimit::new(ENGINE_WARN_EVERY);
    let mut reopen_warnings = WarnLimit::new(ENGINE_WARN_EVERY);
    while let Ok(line) = lines.recv() {
        if shared.abandoned.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = out.follow_rotation() {
            if let Some(suppressed) = reopen_warnings.occurred(Instant::now()) {
                tracing::warn!(
                    error = %e,
                    suppressed,
                    "JSON sink: cannot reopen its file after rotation, still writing to the old one"
                );
            }
        }
        let result = out.write_report(&line);
        if let Err(e) = &result {
            // Counted before the line is marked done, so whoever waits for it sees the count.
            telemetry.add_sink_error(SINK);
            if let Some(suppressed) = write_warnings.occurred(Instant::now()) {
                tracing::warn!(
                    error = %e,
                    suppressed,
                    "JSON sink failed to write a report (failures: faultline_sink_errors_total{{sink=\"json\"}})"
                );
            }
        }
        shared.line_done(result.is_ok());
    }
}

struct StopGuard<'a>(&'a Shared);

impl Drop for StopGuard<'_> {
    fn drop(&mut self) {
        self.0.stopped();
    }
}

/// Whole lines to a destination.
struct Lines {
    dest: Destination,
    /// False after a write that failed part-way through a line: the next report then
    /// starts with a newline, so the fragment does not swallow it (each whole line parses).
    at_line_start: bool,
}

impl Lines {
    fn out(&mut self) -> &mut dyn Write {
        match &mut self.dest {
            Destination::Stream(w) => w,
            Destination::File(f) => f,
        }
    }

    /// Reopens a rotated file; a new file starts with a whole line whatever the old had.
    fn follow_rotation(&mut self) -> io::Result<()> {
        if let Destination::File(f) = &mut self.dest {
            if f.follow_rotation()? {
                tracing::info!(path = %f.path().display(), "JSON sink: file rotated, reopened");
                self.at_line_start = true;
            }
        }
        Ok(())
    }

    /// One encoded report (ending in a newline), then a flush.
    fn write_report(&mut self, line: &[u8]) -> io::Result<()> {
        if self.at_line_start {
            self.write_line(line)?;
        } else {
            // One buffer, so the newline and the report go out in one write when they can.
            let mut buf = Vec::with_capacity(line.len() + 1);
            buf.push(b'\n');
            buf.extend_from_slice(line);
            self.write_line(&buf)?;
        }
        self.out().flush()
    }

    /// `write_all`, remembering whether what went out ends a line.
    fn write_line(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.out().write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    // A writer claiming more than it was given is broken; treat it as all.
                    let (written, rest) = buf.split_at(n.min(buf.len()));
                    self.at_line_start = written.last() == Some(&b'\n');
                    buf = rest;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
