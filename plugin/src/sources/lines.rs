//! Line-by-line decoding shared by the text readers (`perf script`, babeltrace2 text):
//! whole lines are decoded in place in the input's buffer (no copy per line); only a line
//! that straddles two buffer fills is assembled in a side buffer.
//!
//! A line is at most [`MAX_LINE_BYTES`]: a longer one (a corrupt file, a runaway writer)
//! is skipped up to its newline without being buffered and counted as undecodable, so
//! memory never grows with the input.
//!
//! A read error (a truncated `.gz`/`.zst` file, a tool that failed) ends the input like
//! its end does: the events decoded before it are handed out first, and only then the
//! error, so they reach the engine instead of vanishing with the dropped reader.

use std::io::{self, BufRead};

use super::perf::batcher::Batcher;
use super::SourceError;
use crate::model::EventBatch;

/// The longest line decoded; far above any real trace line (a few hundred bytes).
pub(crate) const MAX_LINE_BYTES: usize = 1 << 20;
/// Bytes of an over-long line kept to show in the warning about it.
const SHOWN_BYTES: usize = 256;

/// Appends the rest of the current line (through its newline, or to the end of input) to
/// `line`, unless that makes it longer than [`MAX_LINE_BYTES`]: then `line` keeps only
/// its first bytes (for the log), the rest is skipped, and `overlong` is set. Returns
/// the bytes consumed (0 at the end of input).
pub(crate) fn read_line_capped<R: BufRead + ?Sized>(
    input: &mut R,
    line: &mut Vec<u8>,
    overlong: &mut bool,
) -> io::Result<usize> {
    let mut consumed = 0;
    loop {
        let buf = match input.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let (part, complete) = match memchr::memchr(b'\n', buf) {
            Some(i) => (i + 1, true),
            None => (buf.len(), buf.is_empty()),
        };
        if !*overlong {
            if line.len() + part > MAX_LINE_BYTES {
                *overlong = true;
                line.truncate(SHOWN_BYTES);
            } else {
                // Grow by doubling, but never past the cap.
                let need = line.len() + part;
                if need > line.capacity() {
                    let target = line
                        .capacity()
                        .saturating_mul(2)
                        .clamp(need, MAX_LINE_BYTES);
                    line.reserve_exact(target - line.len());
                }
                line.extend_from_slice(buf.get(..part).unwrap_or_default());
            }
        }
        input.consume(part);
        consumed += part;
        if complete {
            return Ok(consumed);
        }
    }
}

/// What a text reader does with one line, and where its events wait for a full batch.
pub(crate) trait LineDecoder {
    /// Decodes line `line_no` (with its trailing newline, if any).
    fn line(&mut self, line_no: u64, line: &[u8]);
    /// The batcher the decoded events go to.
    fn batcher(&mut self) -> &mut Batcher;
    /// Line `line_no` was over [`MAX_LINE_BYTES`] and skipped; `head` is its start.
    /// Counted as an undecodable line.
    fn line_too_long(&mut self, line_no: u64, head: &[u8]);
    /// The input ended, or failed (after its last line, before the held events are
    /// flushed).
    fn at_end(&mut self) {}
}

/// A buffered text input with its position; drives a [`LineDecoder`] batch by batch.
pub(crate) struct LineInput<R> {
    input: R,
    /// A line that straddled two buffer fills.
    line: Vec<u8>,
    /// `line` passed [`MAX_LINE_BYTES`]: the rest of it is skipped.
    overlong: bool,
    line_no: u64,
    bytes: u64,
    eof: bool,
    /// The read error that ended the input, reported once the events before it are out.
    failed: Option<io::Error>,
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
            overlong: false,
            line_no: 0,
            bytes: 0,
            eof: false,
            failed: None,
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

    /// Ends the input on read error `e`: the held events become ready batches, handed out
    /// before the error. A line cut by the error is dropped undecoded: its tail (a return
    /// value, a syscall number) may be missing, which would decode into a wrong event.
    fn fail(&mut self, decoder: &mut impl LineDecoder, e: io::Error) {
        self.eof = true;
        self.failed = Some(e);
        self.line.clear();
        self.overlong = false;
        decoder.at_end();
        decoder.batcher().flush_all();
    }

    /// Decodes lines into `decoder` until a batch is ready (returned) or the input ends.
    /// After a read error, the batches decoded before it come first, then the error once.
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
            if let Some(e) = self.failed.take() {
                return Err(io_err(e));
            }
            if self.eof {
                return Ok(None);
            }
            if !self.line.is_empty() {
                // Finish a line that straddled two buffer fills.
                let n = match read_line_capped(&mut self.input, &mut self.line, &mut self.overlong)
                {
                    Ok(n) => n,
                    Err(e) => {
                        self.fail(decoder, e);
                        continue;
                    }
                };
                self.bytes += n as u64;
                self.line_no += 1;
                if std::mem::take(&mut self.overlong) {
                    decoder.line_too_long(self.line_no, &self.line);
                } else {
                    decoder.line(self.line_no, &self.line);
                }
                self.line.clear();
                continue;
            }
            if self.live && decoder.batcher().has_pending() {
                // Everything read so far is decoded; the next read may block for long.
                decoder.batcher().flush_all();
                continue;
            }
            // Fast path: parse whole lines in place in the input's buffer (no copy).
            let buf = match self.input.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.fail(decoder, e);
                    continue;
                }
            };
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
                let line = buf.get(used..end).unwrap_or_default();
                if line.len() > MAX_LINE_BYTES {
                    decoder.line_too_long(self.line_no, line.get(..SHOWN_BYTES).unwrap_or(line));
                } else {
                    decoder.line(self.line_no, line);
                }
                used = end;
                if decoder.batcher().has_ready() {
                    break;
                }
            }
            if used == 0 {
                // No complete line buffered: keep the fragment, read_line_capped completes it.
                if buf.len() > MAX_LINE_BYTES {
                    self.overlong = true;
                    self.line
                        .extend_from_slice(buf.get(..SHOWN_BYTES).unwrap_or(buf));
                } else {
                    self.line.extend_from_slice(buf);
                }
                used = buf.len();
            }
            self.bytes += used as u64;
            self.input.consume(used);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::telemetry::SourceStats;
    use std::io::BufReader;
    use std::sync::Arc;

    /// Records what it was handed.
    struct Seen {
        batcher: Batcher,
        lines: Vec<(u64, Vec<u8>)>,
        too_long: Vec<(u64, usize)>,
    }

    impl LineDecoder for Seen {
        fn line(&mut self, line_no: u64, line: &[u8]) {
            self.lines.push((line_no, line.to_vec()));
            let event = faultline_engine::SyscallEvent::enter(
                1,
                1,
                faultline_engine::SyscallId::UNKNOWN,
                line_no,
            );
            self.batcher
                .push(crate::sources::perf::batcher::Owner::Comm(b"t"), event);
        }
        fn line_too_long(&mut self, line_no: u64, head: &[u8]) {
            self.too_long.push((line_no, head.len()));
        }
        fn batcher(&mut self) -> &mut Batcher {
            &mut self.batcher
        }
    }

    #[test]
    fn an_over_long_line_is_skipped_without_being_buffered() {
        let mut text = b"first\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', 3 * MAX_LINE_BYTES));
        text.extend_from_slice(b"\nthird\nlast");
        // Small buffer fills, as from a pipe: the long line straddles many of them.
        let input = BufReader::with_capacity(4096, &text[..]);
        let mut lines = LineInput::new(input, "test");
        let mut seen = Seen {
            batcher: Batcher::new("perf", Arc::new(SourceStats::new("perf"))),
            lines: Vec::new(),
            too_long: Vec::new(),
        };
        while lines.next_batch(&mut seen).unwrap().is_some() {}
        let decoded: Vec<_> = seen.lines.iter().map(|(n, l)| (*n, &l[..])).collect();
        assert_eq!(
            decoded,
            [
                (1, &b"first\n"[..]),
                (3, &b"third\n"[..]),
                (4, &b"last"[..])
            ]
        );
        assert_eq!(seen.too_long, [(2, SHOWN_BYTES)]);
        assert!(
            lines.line.capacity() <= MAX_LINE_BYTES,
            "{}",
            lines.line.capacity()
        );
        assert_eq!(lines.bytes(), text.len() as u64);
    }

    fn seen() -> Seen {
        Seen {
            batcher: Batcher::new("perf", Arc::new(SourceStats::new("perf"))),
            lines: Vec::new(),
            too_long: Vec::new(),
        }
    }

    /// Hands out its text, then fails as a truncated compressed file does.
    struct Truncated(&'static [u8]);

    impl io::Read for Truncated {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "cut short"));
            }
            let n = self.0.len().min(buf.len());
            let (head, rest) = self.0.split_at(n);
            buf[..n].copy_from_slice(head);
            self.0 = rest;
            Ok(n)
        }
    }

    #[test]
    fn events_decoded_before_a_read_error_are_handed_out_before_it() {
        // Cut at a line end (the error comes on a fresh fill) and inside a line (it comes
        // while a straddling line is completed; that cut line is not decoded).
        for text in [&b"one\ntwo\n"[..], b"one\ntwo\nthr"] {
            let input = BufReader::with_capacity(4096, Truncated(text));
            let mut lines = LineInput::new(input, "test");
            let mut seen = seen();
            let batch = lines
                .next_batch(&mut seen)
                .unwrap()
                .expect("the decoded events");
            assert_eq!(batch.events.len(), 2);
            let err = lines.next_batch(&mut seen).unwrap_err().to_string();
            assert!(err.contains("cut short") && err.contains("test"), "{err}");
            assert!(lines.next_batch(&mut seen).unwrap().is_none());
            assert_eq!(seen.lines.len(), 2);
        }
    }

    #[test]
    fn an_over_long_line_in_one_buffer_is_skipped_too() {
        let mut text = b"first\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', MAX_LINE_BYTES + 1));
        text.extend_from_slice(b"\n");
        let mut lines = LineInput::new(&text[..], "test");
        let mut seen = Seen {
            batcher: Batcher::new("perf", Arc::new(SourceStats::new("perf"))),
            lines: Vec::new(),
            too_long: Vec::new(),
        };
        while lines.next_batch(&mut seen).unwrap().is_some() {}
        assert_eq!(seen.lines.len(), 1);
        assert_eq!(seen.too_long, [(2, SHOWN_BYTES)]);
    }
}
