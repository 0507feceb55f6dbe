//! JSON-lines sink: one `faultline_engine::Report` per line (the stable report schema),
//! flushed after each line so `tail -f` and log shippers see reports as they happen. A
//! failed write is counted by the engine task (`faultline_sink_errors_total{sink="json"}`)
//! and never leaves a torn line that the next report would be appended to.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::Path;

use faultline_engine::Report;

use crate::pipeline::report_sink::{ReportSink, SinkError};

/// Writes reports as JSON lines to stdout or a file.
pub struct JsonLinesSink {
    out: Box<dyn Write + Send>,
    /// False after a write that failed part-way through a line: the next report then
    /// starts with a newline, so the fragment does not swallow it (each whole line parses).
    at_line_start: bool,
}

impl std::fmt::Debug for JsonLinesSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonLinesSink").finish_non_exhaustive()
    }
}

impl JsonLinesSink {
    /// Appends to `path`, or writes to stdout when it is `None` or `-`.
    pub fn open(path: Option<&Path>) -> io::Result<Self> {
        match path {
            Some(p) if p != Path::new("-") => {
                // Unbuffered: each report is already one write of a whole line; a buffer
                // would split long lines across writes and keep a failed one's rest.
                let f = OpenOptions::new().create(true).append(true).open(p)?;
                Ok(Self::new(Box::new(f)))
            }
            _ => Ok(Self::new(Box::new(io::stdout()))),
        }
    }

    /// Writes to any writer (tests use a buffer or pipe).
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        Self {
            out,
            at_line_start: true,
        }
    }

    fn write(&mut self, report: &Report) -> io::Result<()> {
        // Serialised first, so a report that cannot be encoded writes nothing.
        let mut line = Vec::with_capacity(4096);
        if !self.at_line_start {
            line.push(b'\n');
        }
        serde_json::to_writer(&mut line, report)?;
        line.push(b'\n');
        self.write_line(&line)?;
        self.out.flush()
    }

    /// `write_all`, remembering whether what went out ends a line.
    fn write_line(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.out.write(buf) {
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

impl ReportSink for JsonLinesSink {
    fn name(&self) -> &'static str {
        "json"
    }

    fn publish(&mut self, report: &Report) -> Result<(), SinkError> {
        self.write(report).map_err(|e| SinkError {
            sink: "json",
            message: e.to_string(),
        })
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        self.out.flush().map_err(|e| SinkError {
            sink: "json",
            message: e.to_string(),
        })
    }
}
