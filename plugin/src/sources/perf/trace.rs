//! [`PerfTraceReader`]: `perf trace` text (one line per finished call, with its duration)
//! → `Complete` events.
//!
//! Line shapes (timestamps and durations in milliseconds, microsecond resolution):
//! ```text
//!    884666.297 ( 0.005 ms): ls/12973 mmap(len: 8192, ...)       = 0x7fbca9766000
//!       0.770 (         ): sh/12976 vfork()                       ...          <- unfinished
//!       0.770 ( 1.334 ms): sh/12976  ... [continued]: vfork())   = 12977      <- its end
//!     102.236 (         ): sleep/12977 exit_group()               = ?          <- never returns
//!          ? (         ): sh/12976  ... [continued]: execve())   = 0          <- began before tracing
//! ```
//! An unfinished line is skipped: its `[continued]` line repeats the entry time and has the
//! duration. A continuation without entry time (`?`) cannot be placed and is skipped too.
//! `perf trace` prints thread ids only, so batches are grouped by command name and events
//! carry `pid = tid`. Failed calls show as `-1 ENOENT (...)`: `ret` is then -1, not -errno.

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use faultline_engine::{SyscallEvent, SyscallId};
use memchr::memmem;

use super::batcher::{Batcher, Owner};
use super::{DecodeLog, LostLog};
use crate::model::EventBatch;
use crate::pipeline::telemetry::SourceStats;
use crate::sources::input::{open_counted, ByteCounter};
use crate::sources::lines::read_line_capped;
use crate::sources::{BatchReader, SourceError};

/// Source name in metric labels and batches.
pub const SOURCE: &str = "perf";

/// One decoded `perf trace` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceLine<'a> {
    pub comm: &'a [u8],
    pub tid: u32,
    pub name: &'a [u8],
    pub ts_ns: u64,
    pub duration_ns: u64,
    pub ret: Option<i64>,
}

/// What a `perf trace` line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceParsed<'a> {
    Call(TraceLine<'a>),
    /// Blank, unfinished (completed by a later line), or without an entry time.
    Skip,
    /// `LOST <n> events!`: the kernel ring buffer overflowed and `n` events never arrived.
    Lost(u64),
    Malformed,
}

/// Parses one `perf trace` line.
pub fn parse_trace_line(line: &[u8]) -> TraceParsed<'_> {
    let line = trim(line);
    if line.is_empty() || line.first() == Some(&b'#') {
        return TraceParsed::Skip;
    }
    if let Some(rest) = line.strip_prefix(b"LOST ") {
        return rest
            .strip_suffix(b" events!")
            .and_then(digits_u64)
            .map_or(TraceParsed::Malformed, TraceParsed::Lost);
    }
    parse_inner(line).unwrap_or(TraceParsed::Malformed)
}

fn parse_inner(line: &[u8]) -> Option<TraceParsed<'_>> {
    let open = memchr::memchr(b'(', line)?;
    let ts_tok = trim(line.get(..open)?);
    let close = open + memchr::memchr(b')', line.get(open..)?)?;
    let dur_tok = trim(line.get(open + 1..close)?);
    let rest = trim(line.get(close + 1..)?.strip_prefix(b":")?);

    let (comm, tid, call) = split_thread(rest)?;
    let call = trim(call);
    let continued = call.strip_prefix(b"... [continued]:");
    let call = trim(continued.unwrap_or(call));
    let name_end = memchr::memchr(b'(', call)?;
    let name = trim(call.get(..name_end)?);
    if name.is_empty() || !name.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_') {
        return None;
    }

    if ts_tok == b"?" {
        return Some(TraceParsed::Skip);
    }
    let ts_ns = parse_ms(ts_tok)?;
    let ret = match memmem::rfind(call, b" = ") {
        Some(eq) => parse_ret(trim(call.get(eq + 3..)?))?,
        None if call.ends_with(b"...") => return Some(TraceParsed::Skip),
        // perf sometimes prints nothing after `=` (seen for getppid).
        None if call
            .strip_suffix(b"=")
            .is_some_and(|c| trim(c).ends_with(b")")) =>
        {
            None
        }
        None => return None,
    };
    let duration_ns = if dur_tok.is_empty() {
        0
    } else {
        parse_ms(trim(dur_tok.strip_suffix(b"ms")?))?
    };
    Some(TraceParsed::Call(TraceLine {
        comm,
        tid,
        name,
        ts_ns,
        duration_ns,
        ret,
    }))
}

/// `comm/tid rest`: the tid is the first `/<digits> ` (a comm may itself contain `/`).
fn split_thread(s: &[u8]) -> Option<(&[u8], u32, &[u8])> {
    let mut from = 0;
    while let Some(off) = memchr::memchr(b'/', s.get(from..)?) {
        let slash = from + off;
        let after = s.get(slash + 1..)?;
        let digits = after.iter().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 && after.get(digits) == Some(&b' ') {
            let tid = std::str::from_utf8(after.get(..digits)?)
                .ok()?
                .parse()
                .ok()?;
            return Some((s.get(..slash)?, tid, after.get(digits + 1..)?));
        }
        from = slash + 1;
    }
    None
}

/// `884666.297` milliseconds (any fraction length up to 6 digits) to nanoseconds.
fn parse_ms(tok: &[u8]) -> Option<u64> {
    let (int, frac) = match memchr::memchr(b'.', tok) {
        Some(dot) => (tok.get(..dot)?, tok.get(dot + 1..)?),
        None => (tok, &b""[..]),
    };
    if frac.len() > 6 || int.is_empty() {
        return None;
    }
    let mut ns = digits_u64(int)?.checked_mul(1_000_000)?;
    let mut scale = 100_000u64;
    for &c in frac {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        ns = ns.checked_add(u64::from(d) * scale)?;
        scale /= 10;
    }
    Some(ns)
}

/// `= 4`, `= -1 ENOENT (...)`, `= 0x7f...`, `= 12977 (sleep)`, or `= ?` (no return).
fn parse_ret(s: &[u8]) -> Option<Option<i64>> {
    let tok = s.split(|c| *c == b' ').next()?;
    if tok == b"?" || tok.is_empty() {
        return Some(None);
    }
    if let Some(hex) = tok.strip_prefix(b"0x") {
        let v = u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
        return Some(Some(v as i64));
    }
    Some(Some(std::str::from_utf8(tok).ok()?.parse().ok()?))
}

fn digits_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

fn trim(s: &[u8]) -> &[u8] {
    s.trim_ascii()
}

/// Reads `perf trace` output into per-command batches of `Complete` events.
pub struct PerfTraceReader<R> {
    input: R,
    batcher: Batcher,
    stats: Arc<SourceStats>,
    line: Vec<u8>,
    /// The current line passed the length cap (see [`read_line_capped`]).
    overlong: bool,
    line_no: u64,
    bytes: u64,
    eof: bool,
    /// The read error that ended the input, reported once the events before it are out
    /// (a truncated file must not lose what was decoded up to the cut).
    failed: Option<std::io::Error>,
    log: DecodeLog,
    lost: LostLog,
    /// Raw (still compressed) bytes read, when given: what progress compares with the
    /// file size.
    raw_bytes: Option<ByteCounter>,
}

impl<R: BufRead + Send> PerfTraceReader<R> {
    /// A reader of `perf trace` text from `input`.
    pub fn new(input: R, stats: Arc<SourceStats>) -> Self {
        Self {
            input,
            batcher: Batcher::new(SOURCE, stats.clone()),
            stats,
            line: Vec::with_capacity(512),
            overlong: false,
            line_no: 0,
            bytes: 0,
            eof: false,
            failed: None,
            log: DecodeLog::new(SOURCE),
            lost: LostLog::new(SOURCE),
            raw_bytes: None,
        }
    }

    /// A reader whose [`BatchReader::bytes_read`] reports `counter` (raw file bytes from
    /// [`open_counted`]) instead of text bytes, so progress compares with the file size
    /// of a compressed trace too.
    pub fn with_progress(input: R, stats: Arc<SourceStats>, counter: ByteCounter) -> Self {
        let mut reader = Self::new(input, stats);
        reader.raw_bytes = Some(counter);
        reader
    }
}

impl PerfTraceReader<Box<dyn BufRead + Send>> {
    /// Opens a recorded `perf trace` text file (plain, `.zst`, `.gz`, or `-` for stdin)
    /// without sniffing its format: the caller said what it is.
    pub fn open(path: &Path, stats: Arc<SourceStats>) -> Result<Self, SourceError> {
        let (input, counter) = open_counted(path)?;
        Ok(Self::with_progress(input, stats, counter))
    }
}

impl<R> PerfTraceReader<R> {
    /// The input, e.g. a [`crate::sources::input::ChildOutput`] whose process id a host
    /// records to stop a live capture.
    pub fn get_ref(&self) -> &R {
        &self.input
    }

    /// Events perf reported lost so far (`LOST <n> events!` lines; also counted as drops).
    pub fn lost_events(&self) -> u64 {
        self.lost.events()
    }
}

impl<R: BufRead + Send> BatchReader for PerfTraceReader<R> {
    fn next_batch(&mut self) -> Result<Option<EventBatch>, SourceError> {
        loop {
            if let Some(batch) = self.batcher.pop_ready() {
                return Ok(Some(batch));
            }
            if let Some(source) = self.failed.take() {
                return Err(SourceError::Io {
                    what: "perf trace input".into(),
                    source,
                });
            }
            if self.eof {
                return Ok(None);
            }
            self.line.clear();
            let n = match read_line_capped(&mut self.input, &mut self.line, &mut self.overlong) {
                Ok(n) => n,
                Err(e) => {
                    // The held events go out first; a line cut by the error is dropped
                    // (its return value may be missing).
                    self.eof = true;
                    self.failed = Some(e);
                    self.batcher.flush_all();
                    continue;
                }
            };
            if n == 0 {
                self.eof = true;
                self.batcher.flush_all();
                continue;
            }
            self.bytes += n as u64;
            self.line_no += 1;
            if std::mem::take(&mut self.overlong) {
                self.stats.add_decode_errors(1);
                self.log.too_long(self.line_no, &self.line);
                continue;
            }
            match parse_trace_line(&self.line) {
                TraceParsed::Call(l) => {
                    let syscall = std::str::from_utf8(l.name)
                        .map(SyscallId::from_name)
                        .unwrap_or(SyscallId::UNKNOWN);
                    let mut event =
                        SyscallEvent::complete(l.tid, l.tid, syscall, l.ts_ns, l.duration_ns);
                    event.ret = l.ret;
                    self.batcher.push(Owner::Comm(l.comm), event);
                }
                TraceParsed::Skip => {}
                TraceParsed::Lost(n) => {
                    self.lost.lost(&self.stats, n);
                    // `perf trace` prints no time with it: the latest seen stands in.
                    self.batcher.mark_loss(None);
                }
                TraceParsed::Malformed => {
                    self.stats.add_decode_errors(1);
                    self.log.bad_line(self.line_no, &self.line);
                }
            }
        }
    }

    fn bytes_read(&self) -> u64 {
        self.raw_bytes.as_ref().map_or(self.bytes, ByteCounter::get)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(line: &str) -> TraceLine<'_> {
        match parse_trace_line(line.as_bytes()) {
            TraceParsed::Call(c) => c,
            other => panic!("{line:?} gave {other:?}"),
        }
    }

    #[test]
    fn an_over_long_line_is_skipped_and_counted() {
        let call = "884666.297 ( 0.005 ms): ls/12973 mmap(len: 8192) = 0x7f\n";
        let mut text = call.as_bytes().to_vec();
        text.extend(std::iter::repeat_n(
            b'x',
            2 * crate::sources::lines::MAX_LINE_BYTES,
        ));
        text.extend_from_slice(b"\n");
        text.extend_from_slice(call.as_bytes());
        let stats = Arc::new(SourceStats::new(SOURCE));
        let input = std::io::BufReader::with_capacity(4096, &text[..]);
        let mut r = PerfTraceReader::new(input, stats.clone());
        let mut events = 0;
        while let Some(b) = r.next_batch().unwrap() {
            events += b.events.len();
        }
        assert_eq!(events, 2);
        assert_eq!(stats.decode_errors(), 1);
        assert!(r.line.capacity() <= crate::sources::lines::MAX_LINE_BYTES);
    }

    #[test]
    fn finished_call() {
        let c = call("884666.297 ( 0.005 ms): ls/12973 mmap(len: 8192, prot: READ|WRITE, flags: PRIVATE|ANONYMOUS)           = 0x7fbca9766000");
        assert_eq!((c.comm, c.tid, c.name), (&b"ls"[..], 12973, &b"mmap"[..]));
        assert_eq!((c.ts_ns, c.duration_ns), (884_666_297_000, 5_000));
        assert_eq!(c.ret, Some(0x7fbc_a976_6000));
    }

    #[test]
    fn errors_continuations_and_no_return() {
        let c = call("   884666.308 ( 0.003 ms): ls/12973 access(filename: 0xa979a2a0, mode: R)  = -1 ENOENT (No such file or directory)");
        assert_eq!(c.ret, Some(-1));
        let c = call("     2.110 (100.367 ms): sh/12976  ... [continued]: wait4())            = 12977 (sleep)");
        assert_eq!(
            (c.name, c.duration_ns, c.ret),
            (&b"wait4"[..], 100_367_000, Some(12977))
        );
        let c = call("   102.236 (         ): sleep/12977 exit_group()                  = ?");
        assert_eq!((c.duration_ns, c.ret), (0, None));
        let c = call("1.0 ( 0.001 ms): kworker/u8:2/77 read(fd: 3) = 1");
        assert_eq!((c.comm, c.tid), (&b"kworker/u8:2"[..], 77));
    }

    /// The shape perf 6.1 `perf trace` prints when its ring buffer overruns.
    #[test]
    fn lost_lines_carry_their_count() {
        assert_eq!(
            parse_trace_line(b"LOST 2412 events!\n"),
            TraceParsed::Lost(2412)
        );
        assert_eq!(
            parse_trace_line(b"LOST many events!"),
            TraceParsed::Malformed
        );
    }

    #[test]
    fn unfinished_and_untimed_lines_are_skipped() {
        for l in [
            "     0.770 (         ): sh/12976 vfork()                                ...",
            "         ? (         ): sh/12976  ... [continued]: execve())            = 0",
            "",
        ] {
            assert_eq!(parse_trace_line(l.as_bytes()), TraceParsed::Skip, "{l}");
        }
        for l in [
            "garbage",
            "1.0 ( 0.1 ms): nocomm read() = 1",
            "x (1 ms): a/1 b() = 2",
        ] {
            assert_eq!(
                parse_trace_line(l.as_bytes()),
                TraceParsed::Malformed,
                "{l}"
            );
        }
    }
}
