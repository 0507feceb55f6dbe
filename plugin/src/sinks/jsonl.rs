//! JSON-lines sink: one `faultline_engine::Report` per line (the stable report schema),
//! flushed after each line so `tail -f` and log shippers see reports as they happen.

use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use faultline_engine::Report;

use crate::pipeline::report_sink::{ReportSink, SinkError};

/// Writes reports as JSON lines to stdout or a file.
pub struct JsonLinesSink {
    out: Box<dyn Write + Send>,
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
                let f = OpenOptions::new().create(true).append(true).open(p)?;
                Ok(Self::new(Box::new(BufWriter::new(f))))
            }
            _ => Ok(Self::new(Box::new(io::stdout()))),
        }
    }

    /// Writes to any writer (tests use a buffer or pipe).
    pub fn new(out: Box<dyn Write + Send>) -> Self {
        Self { out }
    }

    fn write(&mut self, report: &Report) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, report)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
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
