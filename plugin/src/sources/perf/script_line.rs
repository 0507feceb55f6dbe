//! Byte-level parsing of one `perf script` line of a syscall tracepoint.
//!
//! Hand-written instead of regex/`str::split` because the reader must keep up with
//! 150 MB/s of text: no allocation, one backwards scan of the short header.
//!
//! Accepted shapes (`perf` prints the header fields in a fixed order whatever `-F` says):
//! ```text
//! <comm> <pid>/<tid> [<cpu>] <secs>.<frac>: raw_syscalls:sys_enter: NR <n> (<args>)
//! <comm> <tid> [<cpu>] <secs>.<frac>:  raw_syscalls:sys_exit: NR <n> = <ret>
//! <comm> <pid>/<tid> <secs>.<frac>: syscalls:sys_enter_<name>: <args>
//! <comm> <pid>/<tid> <secs>.<frac>: syscalls:sys_exit_<name>: 0x<ret>
//! ```
//! and, for the scheduler's account of CPU time (see `faultline_engine::cpu_time`):
//! ```text
//! <comm> <pid>/<tid> [<cpu>] <secs>.<frac>: sched:sched_stat_runtime: comm=<c> pid=<tid> runtime=<ns> [ns]
//! <comm> <pid>/<tid> [<cpu>] <secs>.<frac>: sched:sched_switch: prev_comm=<c> prev_pid=<tid> prev_prio=<p> prev_state=<S> ==> next_comm=<c> next_pid=<t> next_prio=<p>
//! ```
//! and, for samples of a hardware counter (the period is the count the sample stands for;
//! the event may carry its `/period=N/` term, or a modifier such as `:u`):
//! ```text
//! <comm> <pid>/<tid> [<cpu>] <secs>.<frac>: <period> cycles/period=20000000/:
//! <comm> <tid> <secs>.<frac>: <period> cache-misses: <ip> <sym> (<dso>)
//! ```
//! and faultline's own pseudo-tracepoint, which its TCP sampler (see
//! [`crate::sources::tcp_segments`]) and test harnesses write in the same layout: the TCP
//! segments the process's network namespace sent over the interval ending at the time, and
//! how many of them it retransmitted:
//! ```text
//! <comm> <pid>/<tid> <secs>.<frac>: faultline:tcp_segments: sent=<n> retransmitted=<m>
//! ```
//! `comm` may contain spaces and digits; `[cpu]` and `pid/` are optional; the fraction has
//! 9 digits with `--ns`, 6 without.

use memchr::memmem;

/// Which syscall a line names: a number (raw_syscalls) or a name (`syscalls:sys_*_<name>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call<'a> {
    Number(i64),
    Name(&'a [u8]),
}

/// Entry or exit half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    Enter,
    Exit,
}

/// A decoded syscall line, borrowing from the line buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptLine<'a> {
    pub comm: &'a [u8],
    pub pid: Option<u32>,
    pub tid: u32,
    pub ts_ns: u64,
    pub half: Half,
    pub call: Call<'a>,
    pub ret: Option<i64>,
}

/// A decoded `sched:sched_stat_runtime` line: the thread ran `runtime_ns` up to `ts_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLine<'a> {
    pub comm: &'a [u8],
    pub pid: Option<u32>,
    pub tid: u32,
    pub ts_ns: u64,
    pub runtime_ns: u64,
}

/// A decoded `sched:sched_switch` line: the thread left its CPU at `ts_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchLine<'a> {
    pub comm: &'a [u8],
    pub pid: Option<u32>,
    pub tid: u32,
    pub ts_ns: u64,
    /// It left still runnable (`prev_state=R` or `R+`): preempted, not blocked.
    pub preempted: bool,
    /// It blocked uninterruptibly (`prev_state=D`, also `D|K` and the like): waiting for
    /// the kernel, such as I/O or a page fault, not for an event it asked for.
    pub uninterruptible: bool,
    /// The task switched in (`next_pid`, a tid; 0 is the idle task), when the line has it.
    pub next_tid: Option<u32>,
}

/// A hardware counter whose samples the perf source reads (see `live::COUNTER_EVENTS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    Cycles,
    Instructions,
    CacheMisses,
}

impl Counter {
    /// The counter perf names `name` (its generic hardware event names), if one we read.
    fn of_name(name: &[u8]) -> Option<Self> {
        match name {
            b"cycles" | b"cpu-cycles" => Some(Self::Cycles),
            b"instructions" => Some(Self::Instructions),
            b"cache-misses" => Some(Self::CacheMisses),
            _ => None,
        }
    }
}

/// A decoded sample of a hardware counter: the thread counted `period` more events of
/// `counter` up to `ts_ns` (since its previous sample of that counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterLine<'a> {
    pub comm: &'a [u8],
    pub pid: Option<u32>,
    pub tid: u32,
    pub ts_ns: u64,
    pub counter: Counter,
    pub period: u64,
}

/// A decoded `faultline:tcp_segments` line: the network namespace of the process sent
/// `sent` TCP segments over the interval ending at `ts_ns`, `retransmitted` of them again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentsLine<'a> {
    pub comm: &'a [u8],
    pub pid: Option<u32>,
    pub tid: u32,
    pub ts_ns: u64,
    pub sent: u64,
    pub retransmitted: u64,
}

/// What a line turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    Syscall(ScriptLine<'a>),
    /// The scheduler's account of a thread's time on a CPU.
    OnCpu(RunLine<'a>),
    /// A thread switched away from its CPU.
    OffCpu(SwitchLine<'a>),
    /// A sample of a hardware counter.
    Counter(CounterLine<'a>),
    /// TCP segments sent and retransmitted by the process's network namespace.
    TcpSegments(SegmentsLine<'a>),
    /// Blank, a `#` comment, or a well-formed line of some other event: not an error.
    Skip,
    /// `PERF_RECORD_LOST[_SAMPLES] lost <n>` (`perf script --show-lost-events`): the kernel
    /// ring buffer overflowed and `n` events never reached perf. `ts_ns`: the record's time,
    /// when its header has one (the kernel writes it once the buffer has room again, so
    /// the loss lies before it).
    Lost {
        lost: u64,
        ts_ns: Option<u64>,
    },
    /// Not a `perf script` line we understand.
    Malformed,
}

// perf pads the event name (`:  raw_syscalls:sys_exit`), so the marker starts at the name
// and the header must end in `:` on its own.
const RAW_MARK: &[u8] = b" raw_syscalls:sys_";
const NAMED_MARK: &[u8] = b" syscalls:sys_";
const RUNTIME_MARK: &[u8] = b" sched:sched_stat_runtime:";
const SWITCH_MARK: &[u8] = b" sched:sched_switch:";
const SEGMENTS_MARK: &[u8] = b" faultline:tcp_segments:";
/// Also the prefix of `PERF_RECORD_LOST_SAMPLES`, which has the same `lost <n>` tail.
const LOST_MARK: &[u8] = b"PERF_RECORD_LOST";

/// Finders built once: `memmem` precomputes its search tables.
pub struct LineParser {
    raw: memmem::Finder<'static>,
    named: memmem::Finder<'static>,
    segments: memmem::Finder<'static>,
}

impl Default for LineParser {
    fn default() -> Self {
        Self::new()
    }
}

impl LineParser {
    pub fn new() -> Self {
        Self {
            raw: memmem::Finder::new(RAW_MARK),
            named: memmem::Finder::new(NAMED_MARK),
            segments: memmem::Finder::new(SEGMENTS_MARK),
        }
    }

    /// Parses one line (with or without its trailing newline).
    pub fn parse<'a>(&self, line: &'a [u8]) -> Parsed<'a> {
        let line = trim_end(line);
        let trimmed = trim_start(line);
        if trimmed.is_empty() || trimmed.first() == Some(&b'#') {
            return Parsed::Skip;
        }
        if let Some(at) = self.raw.find(line) {
            let (head, rest) = split_at(line, at, RAW_MARK.len());
            return parse_raw(head, rest).map_or(Parsed::Malformed, Parsed::Syscall);
        }
        if let Some(at) = self.named.find(line) {
            let (head, rest) = split_at(line, at, NAMED_MARK.len());
            return parse_named(head, rest).map_or(Parsed::Malformed, Parsed::Syscall);
        }
        // Only reached by lines that are no syscall, so the hot path never pays for these.
        if let Some(at) = memmem::find(line, RUNTIME_MARK) {
            let (head, rest) = split_at(line, at, RUNTIME_MARK.len());
            return parse_runtime(head, rest).map_or(Parsed::Malformed, Parsed::OnCpu);
        }
        if let Some(at) = memmem::find(line, SWITCH_MARK) {
            let (head, rest) = split_at(line, at, SWITCH_MARK.len());
            return parse_switch(head, rest).map_or(Parsed::Malformed, Parsed::OffCpu);
        }
        if let Some(at) = self.segments.find(line) {
            let (head, rest) = split_at(line, at, SEGMENTS_MARK.len());
            return parse_segments(head, rest).map_or(Parsed::Malformed, Parsed::TcpSegments);
        }
        if let Some(at) = memmem::find(line, LOST_MARK) {
            let (head, rest) = split_at(line, at, LOST_MARK.len());
            let ts_ns = parse_header(head).map(|h| h.ts_ns);
            return lost_count(rest).map_or(Parsed::Malformed, |lost| Parsed::Lost { lost, ts_ns });
        }
        if let Some(parsed) = parse_counter(line) {
            return parsed;
        }
        if is_other_event(line) {
            Parsed::Skip
        } else {
            Parsed::Malformed
        }
    }
}

/// Splits around a marker at `at` of length `len`: the header before, the text after.
fn split_at(line: &[u8], at: usize, len: usize) -> (&[u8], &[u8]) {
    let head = line.get(..at).unwrap_or_default();
    // A header without its closing `:` fails the timestamp parse, hence no error path here.
    let head = trim_end(head).strip_suffix(b":").unwrap_or(head);
    let rest = line.get(at + len..).unwrap_or_default();
    (head, rest)
}

struct Header<'a> {
    comm: &'a [u8],
    pid: Option<u32>,
    tid: u32,
    ts_ns: u64,
}

/// `raw_syscalls:` rest: `enter: NR 45 (args)` or `exit: NR 45 = -11`.
fn parse_raw<'a>(head: &'a [u8], rest: &'a [u8]) -> Option<ScriptLine<'a>> {
    let h = parse_header(head)?;
    let (half, rest) = if let Some(r) = rest.strip_prefix(b"enter:") {
        (Half::Enter, r)
    } else {
        (Half::Exit, rest.strip_prefix(b"exit:")?)
    };
    let rest = trim_start(rest).strip_prefix(b"NR")?;
    let (nr, rest) = parse_i64(trim_start(rest))?;
    let ret = match half {
        Half::Enter => None,
        Half::Exit => {
            let rest = trim_start(rest).strip_prefix(b"=")?;
            Some(parse_i64(trim_start(rest))?.0)
        }
    };
    Some(ScriptLine {
        comm: h.comm,
        pid: h.pid,
        tid: h.tid,
        ts_ns: h.ts_ns,
        half,
        call: Call::Number(nr),
        ret,
    })
}

/// `syscalls:` rest: `enter_read: fd: 0x...` or `exit_read: 0x5`.
fn parse_named<'a>(head: &'a [u8], rest: &'a [u8]) -> Option<ScriptLine<'a>> {
    let h = parse_header(head)?;
    let (half, rest) = if let Some(r) = rest.strip_prefix(b"enter_") {
        (Half::Enter, r)
    } else {
        (Half::Exit, rest.strip_prefix(b"exit_")?)
    };
    let colon = memchr::memchr(b':', rest)?;
    let name = rest.get(..colon)?;
    if name.is_empty() {
        return None;
    }
    let after = trim_start(rest.get(colon + 1..)?);
    let ret = match half {
        Half::Enter => None,
        Half::Exit => Some(parse_ret_hex_or_dec(after)?),
    };
    Some(ScriptLine {
        comm: h.comm,
        pid: h.pid,
        tid: h.tid,
        ts_ns: h.ts_ns,
        half,
        call: Call::Name(name),
        ret,
    })
}

/// `sched:sched_stat_runtime:` rest: `comm=<c> pid=<tid> runtime=<ns> [ns]` (older
/// kernels add ` vruntime=<ns> [ns]`). The header names the thread: the tracepoint fires
/// in the context of the task it accounts.
fn parse_runtime<'a>(head: &'a [u8], rest: &'a [u8]) -> Option<RunLine<'a>> {
    let h = parse_header(head)?;
    // From the right: the task's comm (before it) may contain anything.
    let at = memmem::rfind(rest, b" runtime=")?;
    let digits = rest.get(at + b" runtime=".len()..)?;
    let end = digits
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let runtime_ns = parse_u64(digits.get(..end)?)?;
    Some(RunLine {
        comm: h.comm,
        pid: h.pid,
        tid: h.tid,
        ts_ns: h.ts_ns,
        runtime_ns,
    })
}

/// `sched:sched_switch:` rest: `prev_comm=<c> prev_pid=<tid> prev_prio=<p>
/// prev_state=<S> ==> next_comm=<c> next_pid=<tid> …`. The header names the thread
/// switched away (the tracepoint fires in its context), so only the state and the task
/// switched in are read: `R` (or `R+`, preempted by the kernel) means it was still
/// runnable; anything else (`S`, `D`, `I`, …) that it blocked or stopped.
fn parse_switch<'a>(head: &'a [u8], rest: &'a [u8]) -> Option<SwitchLine<'a>> {
    let h = parse_header(head)?;
    // The state follows `prev_prio=`, past anything a `prev_comm` may hold but before
    // `next_comm`.
    let prio = memmem::find(rest, b" prev_prio=")?;
    let tail = rest.get(prio..)?;
    let at = memmem::find(tail, b" prev_state=")?;
    let state = tail.get(at + b" prev_state=".len()..)?;
    let end = state
        .iter()
        .position(|c| c.is_ascii_whitespace())
        .unwrap_or(state.len());
    let state = state.get(..end)?;
    if state.is_empty() {
        return None;
    }
    // `next_pid=` follows `next_comm`, which may hold anything: the last one is the field.
    let next_tid = memmem::rfind(tail, b" next_pid=").and_then(|at| {
        let v = tail.get(at + b" next_pid=".len()..)?;
        let end = v
            .iter()
            .position(|c| c.is_ascii_whitespace())
            .unwrap_or(v.len());
        parse_u32(v.get(..end)?)
    });
    Some(SwitchLine {
        comm: h.comm,
        pid: h.pid,
        tid: h.tid,
        ts_ns: h.ts_ns,
        preempted: state == b"R" || state == b"R+",
        uninterruptible: state.first() == Some(&b'D'),
        next_tid,
    })
}

/// `faultline:tcp_segments:` rest: `sent=<n> retransmitted=<m>`, both required, in any
/// order; other `key=value` fields are ignored (room for more counters later).
fn parse_segments<'a>(head: &'a [u8], rest: &'a [u8]) -> Option<SegmentsLine<'a>> {
    let h = parse_header(head)?;
    let (mut sent, mut retransmitted) = (None, None);
    for field in rest
        .split(|c| matches!(*c, b' ' | b'\t'))
        .filter(|f| !f.is_empty())
    {
        let eq = memchr::memchr(b'=', field)?;
        let value = field.get(eq + 1..)?;
        match field.get(..eq)? {
            // A key given twice is no reading of ours: which one would be meant?
            b"sent" if sent.is_none() => sent = Some(parse_u64(value)?),
            b"retransmitted" if retransmitted.is_none() => retransmitted = Some(parse_u64(value)?),
            b"sent" | b"retransmitted" => return None,
            _ => {}
        }
    }
    Some(SegmentsLine {
        comm: h.comm,
        pid: h.pid,
        tid: h.tid,
        ts_ns: h.ts_ns,
        sent: sent?,
        retransmitted: retransmitted?,
    })
}

/// A hardware-counter sample, `None` when the line is no sample of a counter we read.
///
/// The header ends at the first `: ` whose text before it parses as one (a `comm` holding
/// `: ` fails that parse and the search goes on), then come the period, when printed, and
/// the event name. A sample without a period is of no use (not even its order of
/// magnitude is known) unless the event names its period (`cycles/period=N/`): skipped
/// like any other event.
fn parse_counter(line: &[u8]) -> Option<Parsed<'_>> {
    let (h, rest) = memmem::find_iter(line, b": ").find_map(|colon| {
        let h = parse_header(line.get(..colon)?)?;
        Some((h, trim_start(line.get(colon + 2..)?)))
    })?;
    let (first, after) = split_token(rest);
    let (period, event) = if first.first().is_some_and(u8::is_ascii_digit) {
        let Some(period) = parse_u64(first) else {
            return Some(Parsed::Malformed);
        };
        (Some(period), split_token(trim_start(after)).0)
    } else {
        (None, first)
    };
    let event = event.strip_suffix(b":")?;
    // `cycles`, `cycles/period=N/`, `cycles:u`: the name ends at the first `/` or `:`;
    // hybrid CPUs name the PMU first (`cpu_core/cycles/`, `cpu_atom/cycles/period=N/`).
    let first_name = segment(event);
    let name = match event.get(first_name.len()) {
        Some(b'/') if Counter::of_name(first_name).is_none() => {
            segment(event.get(first_name.len() + 1..).unwrap_or_default())
        }
        _ => first_name,
    };
    let Some(counter) = Counter::of_name(name) else {
        // A sample of another counter (`branch-misses`, `cpu-clock`) is well-formed;
        // without a period the line is left to the check for other events.
        return period.map(|_| Parsed::Skip);
    };
    let Some(period) = period.or_else(|| named_period(event)) else {
        return Some(Parsed::Skip);
    };
    Some(Parsed::Counter(CounterLine {
        comm: h.comm,
        pid: h.pid,
        tid: h.tid,
        ts_ns: h.ts_ns,
        counter,
        period,
    }))
}

/// `s` up to its first `/` or `:` (an event name without its terms or modifiers).
fn segment(s: &[u8]) -> &[u8] {
    let end = s
        .iter()
        .position(|c| matches!(*c, b'/' | b':'))
        .unwrap_or(s.len());
    s.get(..end).unwrap_or_default()
}

/// The `N` of a `period=N` term in an event's `/…/` terms.
fn named_period(terms: &[u8]) -> Option<u64> {
    // Also finds `sample_period=`, perf's other spelling of the same term.
    let at = memmem::find(terms, b"period=")?;
    let digits = terms.get(at + b"period=".len()..)?;
    let end = digits
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    parse_u64(digits.get(..end)?)
}

/// Splits off the first whitespace-separated token: `(token, after)`.
fn split_token(s: &[u8]) -> (&[u8], &[u8]) {
    let end = memchr::memchr2(b' ', b'\t', s).unwrap_or(s.len());
    (
        s.get(..end).unwrap_or_default(),
        s.get(end..).unwrap_or_default(),
    )
}

/// The header before `: event`: `comm [pid/]tid [[cpu]] secs.frac`, scanned from the right
/// because only `comm` may contain spaces.
fn parse_header(head: &[u8]) -> Option<Header<'_>> {
    let (rest, ts_tok) = pop_token(head)?;
    let ts_ns = parse_timestamp(ts_tok)?;
    let (mut rest, mut tok) = pop_token(rest)?;
    if tok.first() == Some(&b'[') {
        if tok.last() != Some(&b']') {
            return None;
        }
        (rest, tok) = pop_token(rest)?;
    }
    let (pid, tid) = match memchr::memchr(b'/', tok) {
        Some(slash) => (
            Some(parse_u32(tok.get(..slash)?)?),
            parse_u32(tok.get(slash + 1..)?)?,
        ),
        None => (None, parse_u32(tok)?),
    };
    Some(Header {
        comm: trim_start(trim_end(rest)),
        pid,
        tid,
        ts_ns,
    })
}

/// Splits off the last space-separated token: `(before, token)`.
fn pop_token(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let s = trim_end(s);
    if s.is_empty() {
        return None;
    }
    let start = memchr::memrchr2(b' ', b'\t', s).map_or(0, |i| i + 1);
    Some((s.get(..start)?, s.get(start..)?))
}

/// `secs.frac` (any fraction length up to 9 digits) to nanoseconds.
fn parse_timestamp(tok: &[u8]) -> Option<u64> {
    let dot = memchr::memchr(b'.', tok)?;
    let secs = parse_u64(tok.get(..dot)?)?;
    let frac = tok.get(dot + 1..)?;
    if frac.is_empty() || frac.len() > 9 {
        return None;
    }
    let mut ns = parse_u64(frac)?;
    for _ in frac.len()..9 {
        ns *= 10;
    }
    secs.checked_mul(1_000_000_000)?.checked_add(ns)
}

fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

fn parse_u32(s: &[u8]) -> Option<u32> {
    u32::try_from(parse_u64(s)?).ok()
}

/// A signed decimal at the start of `s`; returns it and the text after it.
fn parse_i64(s: &[u8]) -> Option<(i64, &[u8])> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, s.get(1..)?),
        _ => (false, s),
    };
    let end = digits
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    let v = i64::try_from(parse_u64(digits.get(..end)?)?).ok()?;
    Some((if neg { -v } else { v }, digits.get(end..)?))
}

/// `syscalls:sys_exit_*` print the return value as `0x...` (two's complement) or decimal.
fn parse_ret_hex_or_dec(s: &[u8]) -> Option<i64> {
    let tok = s.split(|c| *c == b' ').next()?;
    if let Some(hex) = tok.strip_prefix(b"0x") {
        if hex.is_empty() || hex.len() > 16 {
            return None;
        }
        let mut v: u64 = 0;
        for &c in hex {
            let d = (c as char).to_digit(16)?;
            v = (v << 4) | u64::from(d);
        }
        Some(v as i64)
    } else {
        parse_i64(tok).map(|(v, _)| v)
    }
}

/// The `<n>` of `[_SAMPLES] lost <n>` after the lost-record marker.
fn lost_count(rest: &[u8]) -> Option<u64> {
    let at = memmem::find(rest, b"lost ")?;
    let digits = trim_start(rest.get(at + 5..)?);
    let end = digits
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    parse_u64(digits.get(..end)?)
}

/// A line of some non-syscall event still has `<secs>.<frac>: <sys>:<event>:` — skip it
/// quietly (a truncated line lacks the `<sys>:<event>:` token and stays malformed).
fn is_other_event(line: &[u8]) -> bool {
    let Some(colon) = memmem::find(line, b": ") else {
        return false;
    };
    let head = line.get(..colon).unwrap_or_default();
    let rest = trim_start(line.get(colon + 1..).unwrap_or_default());
    let event = rest.split(|c| *c == b' ').next().unwrap_or_default();
    let event_ok = event.len() > 2
        && event.ends_with(b":")
        && memchr::memchr(b':', event).is_some_and(|i| i + 1 < event.len());
    event_ok && pop_token(head).is_some_and(|(_, tok)| parse_timestamp(tok).is_some())
}

fn trim_start(s: &[u8]) -> &[u8] {
    let i = s
        .iter()
        .position(|c| *c != b' ' && *c != b'\t')
        .unwrap_or(s.len());
    s.get(i..).unwrap_or_default()
}

fn trim_end(s: &[u8]) -> &[u8] {
    let i = s
        .iter()
        .rposition(|c| !matches!(*c, b' ' | b'\t' | b'\n' | b'\r'))
        .map_or(0, |i| i + 1);
    s.get(..i).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> ScriptLine<'_> {
        match LineParser::new().parse(line.as_bytes()) {
            Parsed::Syscall(s) => s,
            other => panic!("{line:?} gave {other:?}"),
        }
    }

    #[test]
    fn compact_field_set() {
        let e = ok("        mariadbd 11841/11874  2617.980271536: raw_syscalls:sys_enter: NR 45 (33, 77708c018af8, 4, 40, 0, 0)\n");
        assert_eq!(e.comm, b"mariadbd");
        assert_eq!((e.pid, e.tid), (Some(11841), 11874));
        assert_eq!(e.ts_ns, 2_617_980_271_536);
        assert_eq!(
            (e.half, e.call, e.ret),
            (Half::Enter, Call::Number(45), None)
        );

        let x =
            ok("        mariadbd 11841/11874  2617.980260265:  raw_syscalls:sys_exit: NR 7 = -11");
        assert_eq!(
            (x.half, x.call, x.ret),
            (Half::Exit, Call::Number(7), Some(-11))
        );
    }

    #[test]
    fn default_field_set_has_cpu_and_tid_only() {
        let e = ok("              ls 11193 [000]   821.272669523:  raw_syscalls:sys_exit: NR 12 = 94826588102656");
        assert_eq!((e.pid, e.tid, e.comm), (None, 11193, &b"ls"[..]));
        assert_eq!(e.ret, Some(94_826_588_102_656));
    }

    #[test]
    fn microsecond_timestamps_and_spaces_in_comm() {
        let e = ok("  Web Content 1/2 [001] 5.000001: raw_syscalls:sys_enter: NR 0 (0)");
        assert_eq!(e.comm, b"Web Content");
        assert_eq!(e.ts_ns, 5_000_001_000);
    }

    #[test]
    fn named_tracepoints() {
        let e = ok("cat 10/10 1.000000001: syscalls:sys_enter_read: fd: 0x00000003, buf: 0x7f, count: 0x20000");
        assert_eq!(e.call, Call::Name(b"read"));
        let x = ok("cat 10/10 1.000000002: syscalls:sys_exit_read: 0xfffffffffffffff5");
        assert_eq!((x.call, x.ret), (Call::Name(b"read"), Some(-11)));
    }

    #[test]
    fn other_events_skip_and_garbage_is_malformed() {
        let p = LineParser::new();
        assert_eq!(
            p.parse(b"  sshd 5/5 [000] 1.5: sched:sched_wakeup: comm=x pid=6"),
            Parsed::Skip
        );
        assert_eq!(p.parse(b""), Parsed::Skip);
        assert_eq!(p.parse(b"# perf header"), Parsed::Skip);
        assert_eq!(p.parse(b"hello world"), Parsed::Malformed);
        assert_eq!(
            p.parse(b"x 1/2 3.4: raw_syscalls:sys_exit: NR 7"),
            Parsed::Malformed
        );
        assert_eq!(
            p.parse(b"x 1/zz 3.4: raw_syscalls:sys_enter: NR 7 ()"),
            Parsed::Malformed
        );
    }

    /// Shapes printed by perf 6.1 on kernel 6.18 (`-F comm,pid,tid,time,event,trace` and
    /// the default field set), and the older format with `vruntime`.
    #[test]
    fn scheduler_runtime_records() {
        let p = LineParser::new();
        fn run<'a>(p: &LineParser, line: &'a str) -> RunLine<'a> {
            match p.parse(line.as_bytes()) {
                Parsed::OnCpu(r) => r,
                other => panic!("{line:?} gave {other:?}"),
            }
        }
        let r = run(&p, "        postgres  2474/2474  70400.123456789: sched:sched_stat_runtime: comm=postgres pid=2474 runtime=33043 [ns]\n");
        assert_eq!(r.comm, b"postgres");
        assert_eq!((r.pid, r.tid), (Some(2474), 2474));
        assert_eq!((r.ts_ns, r.runtime_ns), (70_400_123_456_789, 33_043));
        let r = run(&p, "     migration/0    18 [000] 70321.667171: sched:sched_stat_runtime: comm=migration/0 pid=18 runtime=11193 [ns]");
        assert_eq!((r.pid, r.tid, r.runtime_ns), (None, 18, 11_193));
        // A comm with ` runtime=` in it cannot fool the parse: it reads from the right.
        let r = run(&p, "x 1/2 3.4: sched:sched_stat_runtime: comm=a runtime=9 pid=2 runtime=5 [ns] vruntime=77 [ns]");
        assert_eq!(r.runtime_ns, 5);
        assert_eq!(
            p.parse(b"x 1/2 3.4: sched:sched_stat_runtime: comm=a pid=2 runtime=[ns]"),
            Parsed::Malformed
        );
        assert_eq!(
            p.parse(b"x 1/2 3.4: sched:sched_stat_runtime: comm=a pid=2"),
            Parsed::Malformed
        );
    }

    /// Shapes printed by perf 6.1 on kernel 6.18 (`-F comm,pid,tid,cpu,time,event,trace`).
    #[test]
    fn scheduler_switch_records() {
        let p = LineParser::new();
        fn switch<'a>(p: &LineParser, line: &'a str) -> SwitchLine<'a> {
            match p.parse(line.as_bytes()) {
                Parsed::OffCpu(r) => r,
                other => panic!("{line:?} gave {other:?}"),
            }
        }
        let r = switch(&p, "              sh  2898/2898  [000]   599.819027829:       sched:sched_switch: prev_comm=sh prev_pid=2898 prev_prio=120 prev_state=R ==> next_comm=apt-get next_pid=1935 next_prio=120\n");
        assert_eq!((r.pid, r.tid, r.ts_ns), (Some(2898), 2898, 599_819_027_829));
        assert!(r.preempted);
        assert_eq!(r.next_tid, Some(1935));
        let r = switch(&p, "apache2 11294/11306  3987.410793867:       sched:sched_switch: prev_comm=apache2 prev_pid=11306 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120");
        assert_eq!(r.next_tid, Some(0), "the idle task");
        // A next_comm holding the field name: the last one counts; none or garbage: unknown.
        let r = switch(&p, "x 1/2 3.4: sched:sched_switch: prev_comm=x prev_pid=2 prev_prio=120 prev_state=S ==> next_comm=a next_pid=9 next_pid=7 next_prio=120");
        assert_eq!(r.next_tid, Some(7));
        let r = switch(&p, "x 1/2 3.4: sched:sched_switch: prev_comm=x prev_pid=2 prev_prio=120 prev_state=S ==> next_comm=y");
        assert_eq!(r.next_tid, None);
        let r = switch(&p, "x 1/2 3.4: sched:sched_switch: prev_comm=x prev_pid=2 prev_prio=120 prev_state=S ==> next_comm=y next_pid=-1 next_prio=1");
        assert_eq!(r.next_tid, None);
        let r = switch(&p, "x 1/2 3.4: sched:sched_switch: prev_comm=x prev_pid=2 prev_prio=120 prev_state=R+ ==> next_comm=y next_pid=3 next_prio=120");
        assert!(r.preempted);
        for (blocked, uninterruptible) in [
            ("S", false),
            ("D", true),
            ("I", false),
            ("D|K", true),
            ("T", false),
        ] {
            let line = format!("x 1/2 3.4: sched:sched_switch: prev_comm=x prev_pid=2 prev_prio=120 prev_state={blocked} ==> next_comm=y next_pid=3 next_prio=120");
            let r = switch(&p, &line);
            assert!(!r.preempted, "{blocked}");
            assert_eq!(r.uninterruptible, uninterruptible, "{blocked}");
        }
        assert!(!switch(&p, "x 1/2 3.4: sched:sched_switch: prev_comm=x prev_pid=2 prev_prio=120 prev_state=R ==> next_comm=y next_pid=3 next_prio=120").uninterruptible);
        // A comm holding the field names cannot fool the parse.
        let r = switch(&p, "x 1/2 3.4: sched:sched_switch: prev_comm=a prev_state=R prev_pid=2 prev_prio=120 prev_state=S ==> next_comm=b prev_state=R next_pid=3 next_prio=120");
        assert!(!r.preempted);
        for bad in [
            "x 1/2 3.4: sched:sched_switch: prev_comm=x prev_pid=2 prev_prio=120 prev_state= ==> next_comm=y",
            "x 1/2 3.4: sched:sched_switch: prev_comm=x prev_pid=2",
            "x 1/2 3.4: sched:sched_switch:",
        ] {
            assert_eq!(p.parse(bad.as_bytes()), Parsed::Malformed, "{bad}");
        }
    }

    /// Shapes printed by perf 6.1 `perf script --show-lost-events` on an overrun buffer.
    #[test]
    fn lost_records_carry_their_count() {
        let p = LineParser::new();
        assert_eq!(
            p.parse(b"              dd  9869/9869   9361.868036938: PERF_RECORD_LOST lost 13068\n"),
            Parsed::Lost {
                lost: 13068,
                ts_ns: Some(9_361_868_036_938)
            }
        );
        assert_eq!(
            p.parse(b"dd 1/1 2.000000001: PERF_RECORD_LOST_SAMPLES lost 7"),
            Parsed::Lost {
                lost: 7,
                ts_ns: Some(2_000_000_001)
            }
        );
        // Without a header (no sample ids in the recording) the count still counts.
        assert_eq!(
            p.parse(b"PERF_RECORD_LOST lost 3"),
            Parsed::Lost {
                lost: 3,
                ts_ns: None
            }
        );
        assert_eq!(
            p.parse(b"dd 1/1 2.000000001: PERF_RECORD_LOST lost x"),
            Parsed::Malformed
        );
    }

    /// The line faultline's TCP sampler writes (and test harnesses with it).
    #[test]
    fn tcp_segment_records() {
        let p = LineParser::new();
        fn segments<'a>(p: &LineParser, line: &'a str) -> SegmentsLine<'a> {
            match p.parse(line.as_bytes()) {
                Parsed::TcpSegments(s) => s,
                other => panic!("{line:?} gave {other:?}"),
            }
        }
        let s = segments(&p, "           nginx 13020/13020 23681.282227519: faultline:tcp_segments: sent=1234 retransmitted=5\n");
        assert_eq!(s.comm, b"nginx");
        assert_eq!((s.pid, s.tid), (Some(13020), 13020));
        assert_eq!(s.ts_ns, 23_681_282_227_519);
        assert_eq!((s.sent, s.retransmitted), (1234, 5));
        // The default field set (tid and cpu), the fields in another order, an unknown one.
        let s = segments(
            &p,
            "  Web Content 77 [001] 5.000001: faultline:tcp_segments: retransmitted=0 in=9 sent=0",
        );
        assert_eq!((s.comm, s.pid, s.tid), (&b"Web Content"[..], None, 77));
        assert_eq!((s.ts_ns, s.sent, s.retransmitted), (5_000_001_000, 0, 0));
        for bad in [
            // A field missing, or empty.
            "nginx 1/1 2.5: faultline:tcp_segments: sent=10",
            "nginx 1/1 2.5: faultline:tcp_segments: retransmitted=1",
            "nginx 1/1 2.5: faultline:tcp_segments:",
            "nginx 1/1 2.5: faultline:tcp_segments: sent= retransmitted=1",
            // Garbage numbers: signs, letters, hex, overflow, no `=`.
            "nginx 1/1 2.5: faultline:tcp_segments: sent=-3 retransmitted=1",
            "nginx 1/1 2.5: faultline:tcp_segments: sent=12x retransmitted=1",
            "nginx 1/1 2.5: faultline:tcp_segments: sent=0x10 retransmitted=1",
            "nginx 1/1 2.5: faultline:tcp_segments: sent=99999999999999999999999 retransmitted=1",
            "nginx 1/1 2.5: faultline:tcp_segments: sent 10 retransmitted=1",
            // A broken header.
            "nginx 1/zz 2.5: faultline:tcp_segments: sent=10 retransmitted=1",
            "faultline:tcp_segments: sent=10 retransmitted=1",
            // A key twice.
            "nginx 1/1 2.5: faultline:tcp_segments: sent=10 sent=11 retransmitted=1",
        ] {
            assert_eq!(p.parse(bad.as_bytes()), Parsed::Malformed, "{bad}");
        }
        // Every prefix of a real line parses without a panic.
        let line =
            "nginx 13020/13020 23681.282227519: faultline:tcp_segments: sent=1234 retransmitted=5";
        for end in 0..=line.len() {
            let _ = p.parse(&line.as_bytes()[..end]);
        }
    }

    fn counter(line: &str) -> CounterLine<'_> {
        match LineParser::new().parse(line.as_bytes()) {
            Parsed::Counter(c) => c,
            other => panic!("{line:?} gave {other:?}"),
        }
    }

    /// Lines printed by perf 6.1 here (`-F trace:comm,pid,tid,time,event,trace -F
    /// hw:comm,pid,tid,time,period,event` on `-e cycles/period=10000000/` and friends,
    /// with perf's trailing space), and with the default field set.
    #[test]
    fn hardware_counter_samples() {
        let c = counter("              sh  1745/1745  27025.435143788:   10000000       cycles/period=10000000/: \n");
        assert_eq!(c.comm, b"sh");
        assert_eq!((c.pid, c.tid), (Some(1745), 1745));
        assert_eq!(c.ts_ns, 27_025_435_143_788);
        assert_eq!((c.counter, c.period), (Counter::Cycles, 10_000_000));
        let c = counter("              sh  1745/1745  27025.433665027:   10000000 instructions/period=10000000/: ");
        assert_eq!((c.counter, c.period), (Counter::Instructions, 10_000_000));
        let c = counter("              sh  1745/1745  27025.461249279:      10000    cache-misses/period=10000/: ");
        assert_eq!((c.counter, c.period), (Counter::CacheMisses, 10_000));
        // The default field set: tid and cpu, microseconds, then the sample's address.
        let c = counter("              sh 25255 [001] 26596.619576:      20000       cycles:      558fc30b18fc [unknown] (/usr/bin/dash)");
        assert_eq!((c.pid, c.tid, c.ts_ns), (None, 25255, 26_596_619_576_000));
        assert_eq!((c.counter, c.period), (Counter::Cycles, 20_000));
        // A modifier, a comm with `: ` and digits in it, a symbol naming another event.
        let c = counter("x 1/2 3.4: 7 cycles:u: ffff cycles: (x)");
        assert_eq!((c.counter, c.period), (Counter::Cycles, 7));
        let c = counter("web: 2 worker 1/2 3.4: 9 cache-misses:");
        assert_eq!(
            (c.comm, c.counter, c.period),
            (&b"web: 2 worker"[..], Counter::CacheMisses, 9)
        );
        // Without the period field, the event's own period term.
        let c = counter("x 1/2 3.4: cycles/period=20000000/:");
        assert_eq!(c.period, 20_000_000);
        let c = counter("x 1/2 3.4: instructions/sample_period=30000000/:");
        assert_eq!(c.period, 30_000_000);
        // Hybrid CPUs name the PMU first (perf's own spelling of those events).
        let c = counter("x 1/2 3.4: 20000000 cpu_core/cycles/period=20000000/:");
        assert_eq!((c.counter, c.period), (Counter::Cycles, 20_000_000));
        let c = counter("x 1/2 3.4: cpu_atom/cache-misses/period=200000/:");
        assert_eq!((c.counter, c.period), (Counter::CacheMisses, 200_000));
    }

    #[test]
    fn other_and_broken_counter_samples() {
        let p = LineParser::new();
        // Other counters, or ours without any period: well-formed, of no use.
        for skip in [
            "x 1/2 3.4: 250000 cpu-clock: ffff sym (dso)",
            "x 1/2 3.4: 100 branch-misses/period=100/:",
            "x 1/2 3.4: cycles:",
            "x 1/2 3.4: cycles/freq=1000/:",
        ] {
            assert_eq!(p.parse(skip.as_bytes()), Parsed::Skip, "{skip}");
        }
        for bad in [
            "x 1/2 3.4: 99999999999999999999999 cycles:",
            "x 1/2 3.4: 12x cycles:",
            "x 1/2 3.4: 100 cycles",
            "x 1/2 3.4: 100",
            "x 1/zz 3.4: 100 cycles:",
            "x 1/2 3.4 100 cycles:",
            "100 cycles:",
        ] {
            assert_eq!(p.parse(bad.as_bytes()), Parsed::Malformed, "{bad}");
        }
        // Every prefix of a real line parses without a panic.
        let line = "              sh  1745/1745  27025.435143788:   10000000       cycles/period=10000000/: ";
        for end in 0..=line.len() {
            let _ = p.parse(&line.as_bytes()[..end]);
        }
    }
}
