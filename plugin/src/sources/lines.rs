//! Line-by-line decoding shared by the text readers (`perf script`, babeltrace2 text):
//! whole lines are decoded in place in the input's buffer (no copy per line); only a line
//! that straddles two buffer fills is assembled in a side buffer.

use std::io::BufRead;

use super::perf::batcher::Batcher;
use super::SourceError;
use crate::model::EventBatch;

/// What a text reader does with one line, and where its events wait for a full batch.
pub(crate) trait LineDecoder {
    /// Decodes line `line_no` (with its trailing newline, if any).
    fn line(&mut self, line_no: u64, line: &[u8]);
    /// The batcher the decoded events go to.
    fn batcher(&mut self) -> &mut Batcher;
    /// The input ended (after its last line, before the held events are flushed).
    fn at_end(&mut self) {}
}

/// A buffered text input with its position; drives a [`LineDecoder`] batch by batch.
pub(crate) struct LineInput<R> {
    input: R,
    /// A line that straddled two buffer fills.
    line: Vec<u8>,
    line_no: u64,
    bytes: u64,
    eof: bool,
    /// Flush held events whenever the input runs dry (live pipes: a quiet target's events
    /// must not wait for the next burst).
    live: bool,
    /// Names the input in I/O errors.
    what: &'static str,
}

impl<R: BufRead> LineInput<R> {
    pub(crate) fn new(input: R, what: &'static str) -> Self {
        Self {
            input,
            line: Vec::with_capacity(512),
            line_no: 0,
            bytes: 0,
            eof: false,
            live: false,
            what,
        }
    }

    pub(crate) fn set_live(&mut self, live: bool) {
        self.live = live;
    }

    pub(crate) fn get_ref(&self) -> &R {
        &self.input
    }

    /// Text bytes consumed so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Lines read so far.
    pub(crate) fn lines(&self) -> u64 {
        self.line_no
    }

    /// Decodes lines into `decoder` until a batch is ready (returned) or the input ends.
    pub(crate) fn next_batch(
        &mut self,
        decoder: &mut impl LineDecoder,
    ) -> Result<Option<EventBatch>, SourceError> {
        let what = self.what;
        let io_err = |source| SourceError::Io {
            what: what.into(),
            source,
        };
        loop {
            if let Some(batch) = decoder.batcher().pop_ready() {
                return Ok(Some(batch));
            }
            if self.eof {
                return Ok(None);
            }
            if !self.line.is_empty() {
                // Finish a line that straddled two buffer fills.
                let n = self
                    .input
                    .read_until(b'\n', &mut self.line)
                    .map_err(io_err)?;
                self.bytes += n as u64;
                self.line_no += 1;
                decoder.line(self.line_no, &self.line);
                self.line.clear();
                continue;
            }
            if self.live && decoder.batcher().has_pending() {
                // Everything read so far is decoded; the next read may block for long.
                decoder.batcher().flush_all();
                continue;
            }
            // Fast path: parse whole lines in place in the input's buffer (no copy).
            let buf = self.input.fill_buf().map_err(io_err)?;
            if buf.is_empty() {
                self.eof = true;
                decoder.at_end();
                decoder.batcher().flush_all();
                continue;
            }
            let mut used = 0;
            while let Some(nl) = buf.get(used..).and_then(|rest| memchr::memchr(b'\n', rest)) {
                let end = used + nl + 1;
                self.line_no += 1;
                decoder.line(self.line_no, buf.get(used..end).unwrap_or_default());
                used = end;
                if decoder.batcher().has_ready() {
                    break;
                }
            }
            if used == 0 {
                // No complete line buffered: keep the fragment, read_until completes it.
                self.line.extend_from_slice(buf);
                used = buf.len();
            }
            self.bytes += used as u64;
            self.input.consume(used);
        }
    }
}
