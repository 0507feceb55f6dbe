//! [`PerfScriptReader`]: `perf script` text of syscall tracepoints → per-process batches.

use crate::sources::lines::{LineDecoder, LineInput};
use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use faultline_engine::syscalls::Arch;
use faultline_engine::{PerfCounters, SyscallEvent, SyscallId};

use super::batcher::{Batcher, Owner};
use super::script_line::{Call, Counter, CounterLine, Half, LineParser, Parsed, ScriptLine};
use super::{tally, DecodeLog, LostLog};
use crate::model::EventBatch;
use crate::pipeline::telemetry::SourceStats;
use crate::sources::input::{open_counted, ByteCounter, StderrTail};
use crate::sources::{BatchReader, SourceError};

/// Source name in metric labels and batches.
pub const SOURCE: &str = "perf";

/// Reads `perf script` output (`raw_syscalls:sys_enter`/`sys_exit`, or the per-call
/// `syscalls:sys_enter_<name>`/`sys_exit_<name>` tracepoints) from any buffered text.
///
/// Emits `Enter`/`Exit` halves (the engine pairs them per thread). With the default field
/// set perf prints no process id; events then carry `pid = tid` and batches are grouped by
/// command name with `ProcessInfo::pid = None`.
pub struct PerfScriptReader<R> {
    input: LineInput<R>,
    arch: Arch,
    parser: LineParser,
    batcher: Batcher,
    stats: Arc<SourceStats>,
    log: DecodeLog,
    lost: LostLog,
    raw_bytes: Option<ByteCounter>,
    /// Sample lines seen (decoded or not), to set against perf's end-of-run tally.
    samples: u64,
    /// `perf script`'s stderr, when live: its tally completes the loss count at the end.
    tool_stderr: Option<StderrTail>,
}

impl PerfScriptReader<Box<dyn BufRead + Send>> {
    /// Opens a recorded `perf script` text file (plain, `.zst`, `.gz`, or `-` for stdin);
    /// [`BatchReader::bytes_read`] then counts file bytes, comparable with the file size.
    pub fn open(path: &Path, arch: Arch, stats: Arc<SourceStats>) -> Result<Self, SourceError> {
        let (input, counter) = open_counted(path)?;
        Ok(Self::with_progress(input, arch, stats, counter))
    }
}

impl<R: BufRead + Send> PerfScriptReader<R> {
    /// A reader of `input`, naming syscall numbers with `arch`'s table (perf prints numbers
    /// of the traced machine, so this must match where the trace was recorded).
    pub fn new(input: R, arch: Arch, stats: Arc<SourceStats>) -> Self {
        Self {
            input: LineInput::new(input, "perf script input"),
            arch,
            parser: LineParser::new(),
            batcher: Batcher::new(SOURCE, stats.clone()),
            stats,
            log: DecodeLog::new(SOURCE),
            lost: LostLog::new(SOURCE),
            raw_bytes: None,
            samples: 0,
            tool_stderr: None,
        }
    }

    /// A reader whose [`BatchReader::bytes_read`] reports `counter` (raw file bytes from
    /// [`open_counted`]) instead of decompressed text bytes.
    pub fn with_progress(
        input: R,
        arch: Arch,
        stats: Arc<SourceStats>,
        counter: ByteCounter,
    ) -> Self {
        let mut reader = Self::new(input, arch, stats);
        reader.raw_bytes = Some(counter);
        reader
    }

    /// Marks the input as a live stream: held events are emitted each time the buffered
    /// input is used up, instead of waiting for full batches or a second of trace time.
    pub fn live(mut self) -> Self {
        self.input.set_live(true);
        self
    }

    /// Reads `perf script`'s end-of-run tally from `stderr` when the stream ends, and counts
    /// the events lost that the stream never reported (see [`tally`]) as `kernel_lost`.
    pub fn with_tool_stderr(mut self, stderr: StderrTail) -> Self {
        self.tool_stderr = Some(stderr);
        self
    }

    /// Counts the loss only perf's tally knows of; once, when the stream has ended.
    fn count_unreported_loss(&mut self) {
        let Some(stderr) = self.tool_stderr.take() else {
            return;
        };
        let Some(processed) = stderr.get().and_then(|e| tally::processed_samples(e)) else {
            return;
        };
        let unreported = tally::unreported_loss(processed, self.samples, self.lost.events());
        if unreported > 0 {
            tracing::warn!(
                source = SOURCE,
                unreported,
                processed,
                "perf's end-of-run tally shows events lost that the kernel never reported (an overrun at the end of the capture); counted as kernel_lost"
            );
            self.lost.lost(&self.stats, unreported);
        }
    }

    /// The input, e.g. a [`crate::sources::input::ChildOutput`] whose process ids a host
    /// records to stop a live capture (the reader blocks while the tool is quiet).
    pub fn get_ref(&self) -> &R {
        self.input.get_ref()
    }

    /// Decompressed text bytes consumed so far (for throughput figures).
    pub fn text_bytes(&self) -> u64 {
        self.input.bytes()
    }

    /// Lines read so far.
    pub fn lines(&self) -> u64 {
        self.input.lines()
    }

    /// Events perf reported lost so far (`PERF_RECORD_LOST` lines and, once a live capture
    /// ended, the rest of perf's tally; also counted as drops).
    pub fn lost_events(&self) -> u64 {
        self.lost.events()
    }
}

/// The engine event of a decoded line; without a pid (default field set) `pid = tid`.
fn event_of(arch: Arch, l: &ScriptLine<'_>) -> SyscallEvent {
    let syscall = match l.call {
        Call::Number(nr) => u32::try_from(nr)
            .map(|nr| SyscallId::from_number(arch, nr))
            .unwrap_or(SyscallId::UNKNOWN),
        Call::Name(name) => std::str::from_utf8(name)
            .map(SyscallId::from_name)
            .unwrap_or(SyscallId::UNKNOWN),
    };
    let pid = l.pid.unwrap_or(l.tid);
    match l.half {
        Half::Enter => SyscallEvent::enter(pid, l.tid, syscall, l.ts_ns),
        Half::Exit => SyscallEvent::exit(pid, l.tid, syscall, l.ts_ns, l.ret),
    }
}

/// The engine record of one counter sample: its period of its counter, the others 0, over
/// an interval perf does not say (the thread's previous sample of it may be long ago).
fn counters_of(c: &CounterLine<'_>) -> SyscallEvent {
    let mut perf = PerfCounters::default();
    match c.counter {
        Counter::Cycles => perf.cycles = c.period,
        Counter::Instructions => perf.instructions = c.period,
        Counter::CacheMisses => perf.cache_misses = c.period,
    }
    SyscallEvent::counters(c.pid.unwrap_or(c.tid), c.tid, c.ts_ns, 0, perf)
}

/// Which process a line's event belongs to: by pid when perf printed one, else by command.
fn owner_of(pid: Option<u32>, tid: u32, comm: &[u8]) -> Owner<'_> {
    match pid {
        Some(pid) => Owner::Pid {
            pid,
            comm,
            leader: pid == tid,
        },
        None => Owner::Comm(comm),
    }
}

/// The parts of the reader a line updates (split out so a line can borrow the input buffer).
struct LineSink<'a> {
    arch: Arch,
    parser: &'a LineParser,
    batcher: &'a mut Batcher,
    stats: &'a SourceStats,
    log: &'a mut DecodeLog,
    lost: &'a mut LostLog,
    samples: &'a mut u64,
}

impl LineDecoder for LineSink<'_> {
    fn line(&mut self, line_no: u64, line: &[u8]) {
        self.handle(line_no, line);
    }
    fn line_too_long(&mut self, line_no: u64, head: &[u8]) {
        *self.samples += 1;
        self.stats.add_decode_errors(1);
        self.log.too_long(line_no, head);
    }
    fn batcher(&mut self) -> &mut Batcher {
        self.batcher
    }
}

impl LineSink<'_> {
    fn handle(&mut self, line_no: u64, line: &[u8]) {
        match self.parser.parse(line) {
            Parsed::Syscall(l) => {
                *self.samples += 1;
                let event = event_of(self.arch, &l);
                self.batcher.push(owner_of(l.pid, l.tid, l.comm), event);
            }
            Parsed::OnCpu(r) => {
                *self.samples += 1;
                let event =
                    SyscallEvent::on_cpu(r.pid.unwrap_or(r.tid), r.tid, r.ts_ns, r.runtime_ns);
                self.batcher.push(owner_of(r.pid, r.tid, r.comm), event);
            }
            Parsed::OffCpu(r) => {
                *self.samples += 1;
                let pid = r.pid.unwrap_or(r.tid);
                let event = match r.next_tid {
                    Some(next) => SyscallEvent::off_cpu_to(pid, r.tid, r.ts_ns, r.preempted, next),
                    None => SyscallEvent::off_cpu(pid, r.tid, r.ts_ns, r.preempted),
                };
                let event = if r.uninterruptible {
                    event.uninterruptible()
                } else {
                    event
                };
                self.batcher.push(owner_of(r.pid, r.tid, r.comm), event);
            }
            Parsed::Counter(c) => {
                *self.samples += 1;
                self.batcher
                    .push(owner_of(c.pid, c.tid, c.comm), counters_of(&c));
            }
            // faultline's own line, not a perf sample: not in perf's tally.
            Parsed::TcpSegments(s) => {
                let pid = s.pid.unwrap_or(s.tid);
                let event = SyscallEvent::tcp_segments(pid, s.ts_ns, s.sent, s.retransmitted);
                self.batcher.push(owner_of(s.pid, s.tid, s.comm), event);
            }
            Parsed::Skip => {}
            Parsed::Lost { lost, ts_ns } => {
                self.lost.lost(self.stats, lost);
                self.batcher.mark_loss(ts_ns);
            }
            Parsed::Malformed => {
                *self.samples += 1;
                self.stats.add_decode_errors(1);
                self.log.bad_line(line_no, line);
            }
        }
    }
}

impl<R: BufRead + Send> BatchReader for PerfScriptReader<R> {
    fn next_batch(&mut self) -> Result<Option<EventBatch>, SourceError> {
        let mut sink = LineSink {
            arch: self.arch,
            parser: &self.parser,
            batcher: &mut self.batcher,
            stats: &self.stats,
            log: &mut self.log,
            lost: &mut self.lost,
            samples: &mut self.samples,
        };
        let next = self.input.next_batch(&mut sink)?;
        if next.is_none() {
            self.count_unreported_loss();
        }
        Ok(next)
    }

    fn bytes_read(&self) -> u64 {
        self.raw_bytes
            .as_ref()
            .map_or(self.input.bytes(), ByteCounter::get)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::telemetry::DropReason;

    const TEXT: &str = "dd 9/9 1.000000001: raw_syscalls:sys_enter: NR 0 (0)
dd 9/9 1.000000002: raw_syscalls:sys_exit: NR 0 = 1
dd 9/9 1.000000003: PERF_RECORD_LOST lost 5
dd 9/9 1.000000004: raw_syscalls:sys_enter: NR 1 (0)
";

    fn read_with_tally(stderr: Option<&[u8]>) -> (u64, u64) {
        let stats = Arc::new(SourceStats::new(SOURCE));
        let tail = StderrTail::default();
        if let Some(e) = stderr {
            tail.set(e.to_vec()).unwrap();
        }
        let mut r = PerfScriptReader::new(TEXT.as_bytes(), Arch::X86_64, stats.clone())
            .with_tool_stderr(tail);
        let mut arrived = 0;
        let mut markers = Vec::new();
        while let Some(b) = r.next_batch().unwrap() {
            for e in &b.events {
                match e.kind {
                    faultline_engine::EventKind::Lost => markers.push(e.ts_ns),
                    _ => arrived += 1,
                }
            }
        }
        // The loss record also marks the stream, at its own time.
        assert_eq!(markers, [1_000_000_003]);
        assert_eq!(r.lost_events(), stats.dropped(DropReason::KernelLost));
        (arrived, stats.dropped(DropReason::KernelLost))
    }

    #[test]
    fn the_tally_adds_the_loss_the_stream_never_reported() {
        // 20 samples in all: 3 arrived, 5 reported lost, so 12 were lost unreported.
        let stderr = b"Warning:\nProcessed 20 samples and lost 85.00%!\n";
        assert_eq!(read_with_tally(Some(stderr)), (3, 17));
    }

    /// `perf record | perf script` stopped at shutdown: `perf record` dies by our SIGTERM,
    /// and the stream still ends cleanly with perf's tally counted.
    #[test]
    fn a_stopped_live_capture_still_counts_perfs_tally() {
        use crate::sources::input::ChildOutput;
        use std::process::Command;
        let mut record = Command::new("sh");
        record.args(["-c", &format!("printf '%s' '{TEXT}'; exec sleep 30")]);
        let mut script = Command::new("sh");
        script.args([
            "-c",
            "cat; echo 'Processed 20 samples and lost 85.00%!' >&2",
        ]);
        let out = ChildOutput::spawn_pipe(record, script, "sh").unwrap();
        let stopper = out.stopper();
        let stderr = out.stderr_tail();
        let stats = Arc::new(SourceStats::new(SOURCE));
        let mut r = PerfScriptReader::new(out, Arch::X86_64, stats.clone())
            .live()
            .with_tool_stderr(stderr);
        let calls = |b: &EventBatch| {
            b.events
                .iter()
                .filter(|e| e.kind != faultline_engine::EventKind::Lost)
                .count()
        };
        let mut arrived = 0;
        while arrived < 3 {
            arrived += calls(&r.next_batch().unwrap().expect("the capture's events"));
        }
        assert_eq!(stopper.terminate(), 1);
        while let Some(b) = r
            .next_batch()
            .expect("a clean end, not `sh failed (signal: 15)`")
        {
            arrived += calls(&b);
        }
        assert_eq!(arrived, 3);
        assert_eq!(stats.dropped(DropReason::KernelLost), 17);
    }

    /// A recorded trace with faultline's TCP lines: each becomes its process's record; a
    /// broken one is a decode error like any other line.
    #[test]
    fn tcp_segment_lines_become_records_of_their_process() {
        let text = "nginx 7/7 1.000000001: raw_syscalls:sys_enter: NR 0 (0)
nginx 7/8 1.500000000: faultline:tcp_segments: sent=1234 retransmitted=5
nginx 7/7 2.000000000: faultline:tcp_segments: sent=12 retransmitted=x
curl 9/9 2.500000000: faultline:tcp_segments: sent=3 retransmitted=0
";
        let stats = Arc::new(SourceStats::new(SOURCE));
        let mut r = PerfScriptReader::new(text.as_bytes(), Arch::X86_64, stats.clone());
        let mut segments = Vec::new();
        while let Some(b) = r.next_batch().unwrap() {
            for e in &b.events {
                if let Some((sent, retransmitted)) = e.segments() {
                    assert_eq!(e.kind, faultline_engine::EventKind::TcpSegments);
                    let comm = b.process.comm.clone().unwrap();
                    segments.push((b.process.pid, comm, e.pid, e.ts_ns, sent, retransmitted));
                }
            }
        }
        segments.sort();
        assert_eq!(
            segments,
            [
                (Some(7), "nginx".into(), 7, 1_500_000_000, 1234, 5),
                (Some(9), "curl".into(), 9, 2_500_000_000, 3, 0),
            ]
        );
        assert_eq!(stats.decode_errors(), 1);
        assert_eq!(stats.received(), 3);
    }

    #[test]
    fn without_a_tally_only_the_reported_loss_counts() {
        assert_eq!(read_with_tally(None), (3, 5));
        assert_eq!(read_with_tally(Some(b"perf: some other message\n")), (3, 5));
    }
}
