//! [`LttngTextReader`]: babeltrace2 text of an LTTng kernel trace → per-process batches of
//! syscall `Enter`/`Exit` halves.
//!
//! Both syscall namings are understood:
//! - lttng-modules ≥ 2.6: `syscall_entry_<name>` / `syscall_exit_<name>` (and `compat_…`),
//!   `syscall_entry_unknown { id }` named from the syscall number;
//! - older: `sys_<name>` entries and one generic `exit_syscall { ret }` (the exit's call is
//!   then [`SyscallId::UNKNOWN`]; the engine names it from the pending entry of the thread).
//!
//! The thread of an event comes from the `tid`/`pid`/`procname` contexts when the trace has
//! them, else from the thread last switched in on the event's CPU (`sched_switch`).
//! **Syscalls on a CPU before its first `sched_switch` have no known thread: they are
//! counted as dropped with reason `no_target`** (they cannot be routed to any target) and in
//! [`LttngCounters::no_thread`]; they are not decode errors, the line itself is fine.

use crate::sources::lines::{LineDecoder, LineInput};
use std::collections::HashMap;
use std::io::BufRead;
use std::sync::Arc;

use faultline_engine::syscalls::Arch;
use faultline_engine::{PerfCounters, SyscallEvent, SyscallId};

use super::discards::{self, Discard, DiscardQueue};
use super::text::{TextLine, Value};
use super::threads::{Threads, MAX_THREADS};
use crate::model::EventBatch;
use crate::pipeline::telemetry::{DropReason, SourceStats};
use crate::sources::perf::batcher::{Batcher, Owner};
use crate::sources::perf::{DecodeLog, LostLog};
use crate::sources::{BatchReader, SourceError};

/// Source name in metric labels and batches.
pub const SOURCE: &str = "lttng";

/// What the reader saw besides the events it emitted (for tests and diagnostics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LttngCounters {
    /// Syscall records decoded (entries and exits, including dropped ones).
    pub syscall_records: u64,
    /// Syscall records whose thread was unknown (before the CPU's first `sched_switch`).
    pub no_thread: u64,
    /// Non-syscall events (scheduler, interrupts, memory, ...).
    pub other_events: u64,
    /// `sched_switch` records away from a thread that makes syscalls, turned into the
    /// engine's scheduler records (the idle task and kernel threads get none).
    pub switch_records: u64,
    /// Events the tracer reported discarded (babeltrace2's warnings; see [`discards`];
    /// the reader's `kernel_lost` log keeps the count).
    pub discarded_events: u64,
    /// Whole packets the tracer reported lost (their event count is unknown).
    pub discarded_packets: u64,
}

/// Reads babeltrace2 text (from a file, or a running babeltrace2's stdout).
pub struct LttngTextReader<R> {
    input: LineInput<R>,
    decoder: Decoder,
}

/// Everything a line updates; apart from the input so lines can be parsed in place in
/// the input's buffer.
struct Decoder {
    arch: Arch,
    text: TextLine,
    threads: Threads,
    /// Counter values at each thread's pending syscall entry, for per-call deltas. An
    /// entry goes when its call exits or its thread ends (`exit`/`exit_group`, which
    /// never return, or `sched_process_free`), so the map holds live threads only.
    entry_perf: HashMap<u32, PerfCounters>,
    batcher: Batcher,
    stats: Arc<SourceStats>,
    counters: LttngCounters,
    log: DecodeLog,
    /// Discard reports from babeltrace2's stderr, when the input is a running babeltrace2.
    discards: Option<Arc<DiscardQueue>>,
    /// Reports whose range the stream has not reached yet, by end time (unknown first).
    held: Vec<Discard>,
    lost: LostLog,
    /// Reports of lost packets so far (the first few are logged).
    packet_reports: u64,
}

/// Lost-packet reports logged; later ones are only counted ([`LttngCounters`]).
const LOGGED_PACKET_REPORTS: u64 = 5;

/// The syscall meaning of an event name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SyscallRecord<'a> {
    Enter(&'a [u8]),
    Exit(&'a [u8]),
    /// Old `exit_syscall`: which call is not said.
    GenericExit,
}

fn classify(name: &[u8]) -> Option<SyscallRecord<'_>> {
    let name = name.strip_prefix(b"compat_").unwrap_or(name);
    if let Some(n) = name.strip_prefix(b"syscall_entry_") {
        Some(SyscallRecord::Enter(n))
    } else if let Some(n) = name.strip_prefix(b"syscall_exit_") {
        Some(SyscallRecord::Exit(n))
    } else if name == b"exit_syscall" {
        Some(SyscallRecord::GenericExit)
    } else {
        name.strip_prefix(b"sys_").map(SyscallRecord::Enter)
    }
}

impl<R: BufRead + Send> LttngTextReader<R> {
    /// A reader of babeltrace2 text; `arch` names `syscall_entry_unknown { id }` numbers.
    pub fn new(input: R, arch: Arch, stats: Arc<SourceStats>) -> Self {
        Self {
            input: LineInput::new(input, "babeltrace2 output"),
            decoder: Decoder {
                arch,
                text: TextLine::default(),
                threads: Threads::default(),
                entry_perf: HashMap::new(),
                batcher: Batcher::new(SOURCE, stats.clone()),
                stats,
                counters: LttngCounters::default(),
                log: DecodeLog::new(SOURCE),
                discards: None,
                held: Vec::new(),
                lost: LostLog::new(SOURCE),
                packet_reports: 0,
            },
        }
    }

    /// Takes the tracer's discard reports from `queue` (filled from babeltrace2's stderr,
    /// see [`super::babeltrace::open`]): each becomes a loss marker where the stream
    /// reaches the end of its range, and a `kernel_lost` drop count.
    pub fn with_discards(mut self, queue: Arc<DiscardQueue>) -> Self {
        self.decoder.discards = Some(queue);
        self
    }

    /// Marks the input as a live session: held events are emitted each time the buffered
    /// input is used up, instead of waiting for full batches or a second of trace time.
    pub fn live(mut self) -> Self {
        self.input.set_live(true);
        self
    }

    /// The input, e.g. a [`crate::sources::input::ChildOutput`] whose process ids a host
    /// records to stop a live capture (the reader blocks while the tool is quiet).
    pub fn get_ref(&self) -> &R {
        self.input.get_ref()
    }

    /// What was seen so far besides emitted events.
    pub fn counters(&self) -> LttngCounters {
        LttngCounters {
            discarded_events: self.decoder.lost.events(),
            ..self.decoder.counters
        }
    }
}

impl Decoder {
    /// Parses and applies one line.
    fn line(&mut self, line_no: u64, line: &[u8]) {
        if line.trim_ascii().is_empty() {
            return;
        }
        match self.text.parse(line) {
            Ok(()) => {
                if self.discards.is_some() {
                    self.discards_due(Some(self.text.ts_ns));
                }
                self.handle(line)
            }
            Err(why) => {
                self.stats.add_decode_errors(1);
                tracing::debug!(line_no, reason = why.0, "bad babeltrace2 line");
                self.log.bad_line(line_no, line);
            }
        }
    }

    /// Applies the discard reports due before an event at `ts` (`None`: all of them, at
    /// the end of the input). A report is due once the stream reaches the end of its
    /// range: the marker then follows every event the range kept and precedes the
    /// events after it. One that arrives late (stderr is not in step with stdout) is
    /// applied at once; its marker takes the latest event's time.
    fn discards_due(&mut self, ts: Option<u64>) {
        if let Some(q) = &self.discards {
            for d in q.take() {
                if self.held.len() >= discards::MAX_QUEUED {
                    discards::push_bounded(&mut self.held, d, discards::MAX_QUEUED);
                    continue;
                }
                let at = self.held.partition_point(|h| h.end_ns <= d.end_ns);
                self.held.insert(at, d);
            }
        }
        let due = self
            .held
            .partition_point(|h| ts.is_none_or(|ts| h.end_ns.is_none_or(|end| end <= ts)));
        if due == 0 {
            return;
        }
        for d in self.held.drain(..due).collect::<Vec<_>>() {
            self.apply_discard(d);
        }
    }

    fn apply_discard(&mut self, d: Discard) {
        if d.events > 0 {
            self.lost.lost(&self.stats, d.events);
        }
        if d.packets > 0 {
            self.counters.discarded_packets =
                self.counters.discarded_packets.saturating_add(d.packets);
            self.packet_reports += 1;
        }
        if d.packets > 0 && self.packet_reports <= LOGGED_PACKET_REPORTS {
            tracing::warn!(
                source = SOURCE,
                packets = d.packets,
                packets_total = self.counters.discarded_packets,
                "the tracer lost whole packets of events (count unknown); analysis sees a thinned stream"
            );
        }
        self.batcher.mark_loss(d.end_ns);
    }

    /// Handles one parsed line.
    fn handle(&mut self, line: &[u8]) {
        let t = &self.text;
        let name = t.name(line);
        let Some(record) = classify(name) else {
            self.counters.other_events += 1;
            if name == b"sched_switch" {
                self.switch(line);
            } else if let Some(freed) = track_state(&mut self.threads, t, line, name) {
                self.entry_perf.remove(&freed);
            }
            return;
        };
        self.counters.syscall_records += 1;

        // Thread: context fields first, else the CPU's running thread.
        let ctx_tid = t.context(line, b"tid").and_then(Value::uint);
        let tid = match ctx_tid {
            Some(tid) => u32::try_from(tid).ok(),
            None => t
                .packet(line, b"cpu_id")
                .and_then(Value::uint)
                .and_then(|cpu| u32::try_from(cpu).ok())
                .and_then(|cpu| self.threads.running(cpu)),
        };
        let Some(tid) = tid else {
            self.counters.no_thread += 1;
            self.stats.add_dropped(DropReason::NoTarget, 1);
            return;
        };
        let ctx_pid = t
            .context(line, b"pid")
            .and_then(Value::uint)
            .and_then(|p| u32::try_from(p).ok());
        let ctx_comm = t.context(line, b"procname").and_then(|v| v.str(line));
        if ctx_pid.is_some() || ctx_comm.is_some() {
            self.threads.update(tid, ctx_pid, ctx_comm);
        }

        let ts = t.ts_ns;
        let counters = perf_counters(t, line);
        let event = match record {
            SyscallRecord::Enter(n) => {
                let id = self.syscall_id(n, t.payload(line, b"id"));
                if ends_thread(n) {
                    // No exit will come to take the entry's counters: the thread is gone.
                    self.entry_perf.remove(&tid);
                } else if let Some(c) = counters {
                    if self.entry_perf.len() < MAX_THREADS || self.entry_perf.contains_key(&tid) {
                        self.entry_perf.insert(tid, c);
                    }
                }
                SyscallEvent::enter(0, tid, id, ts)
            }
            SyscallRecord::Exit(_) | SyscallRecord::GenericExit => {
                let id = match record {
                    SyscallRecord::Exit(n) if n != b"unknown" => name_to_id(n),
                    _ => SyscallId::UNKNOWN,
                };
                let ret = t.payload(line, b"ret").and_then(Value::int);
                let mut e = SyscallEvent::exit(0, tid, id, ts, ret);
                if let (Some(end), Some(start)) = (counters, self.entry_perf.remove(&tid)) {
                    e.perf = Some(delta(start, end));
                }
                e
            }
        };

        self.threads.note_syscall(tid);
        let (pid, owner) = owner_of(&self.threads, tid, ctx_pid, ctx_comm);
        self.batcher.push(owner, SyscallEvent { pid, ..event });
    }

    /// `sched_switch`: which thread runs on the CPU now and, for the thread that left,
    /// the engine's scheduler records (as perf's `sched_stat_runtime` and `sched_switch`
    /// give them): its run since it was switched in, exact from the two switches, and
    /// whether it left runnable (preempted) or to sleep. They feed the CPU-burner rule.
    fn switch(&mut self, line: &[u8]) {
        let t = &self.text;
        let u32_of = |key: &[u8]| {
            t.payload(line, key)
                .and_then(Value::uint)
                .and_then(|v| u32::try_from(v).ok())
        };
        let cpu = t
            .packet(line, b"cpu_id")
            .and_then(Value::uint)
            .and_then(|c| u32::try_from(c).ok());
        let (Some(cpu), Some(next)) = (cpu, u32_of(b"next_tid")) else {
            return;
        };
        let ts = t.ts_ns;
        let next_comm = t.payload(line, b"next_comm").and_then(|v| v.str(line));
        let before = self.threads.switch_in(cpu, next, next_comm, ts);
        // Thread 0 is the CPU's idle task; kernel threads make no syscalls and must not
        // become targets through their switches alone.
        let Some(prev) = u32_of(b"prev_tid")
            .filter(|&p| p != 0)
            .filter(|&p| self.threads.get(p).is_some_and(|i| i.makes_syscalls))
        else {
            return;
        };
        let Some(state) = t.payload(line, b"prev_state").and_then(Value::uint) else {
            return;
        };
        self.counters.switch_records += 1;
        // TASK_RUNNING is 0, and a preemption is reported as a lone bit above the task
        // states (TASK_STATE_MAX / TASK_REPORT_MAX): either way the low byte is 0. Any
        // sleep sets a bit in it (interruptible 1, uninterruptible 2, ...).
        let preempted = state & 0xff == 0;
        // TASK_UNINTERRUPTIBLE: a wait for the kernel (I/O, a page fault).
        let uninterruptible = state & 0x2 != 0;
        let (pid, owner) = owner_of(&self.threads, prev, None, None);
        if let Some(run) = before.filter(|r| r.tid == prev) {
            let runtime = ts.saturating_sub(run.since_ns);
            self.batcher
                .push(owner, SyscallEvent::on_cpu(pid, prev, ts, runtime));
        }
        let off = SyscallEvent::off_cpu_to(pid, prev, ts, preempted, next);
        let off = if uninterruptible {
            off.uninterruptible()
        } else {
            off
        };
        self.batcher.push(owner, off);
    }

    fn syscall_id(&self, name: &[u8], id: Option<Value>) -> SyscallId {
        if name == b"unknown" {
            id.and_then(Value::uint)
                .and_then(|nr| u32::try_from(nr).ok())
                .map_or(SyscallId::UNKNOWN, |nr| {
                    SyscallId::from_number(self.arch, nr)
                })
        } else {
            name_to_id(name)
        }
    }
}

/// The process of `tid` (from its context fields, else what fork and state-dump events
/// told) and the batch owner its events go to: the process is named by its main thread
/// when that is known, so every thread of `mariadbd` routes as `mariadbd`.
fn owner_of<'a>(
    threads: &'a Threads,
    tid: u32,
    ctx_pid: Option<u32>,
    ctx_comm: Option<&'a [u8]>,
) -> (u32, Owner<'a>) {
    let info = threads.get(tid);
    let pid = ctx_pid.or(info.and_then(|i| i.pid)).unwrap_or(tid);
    let thread_comm = ctx_comm
        .or(info.map(|i| i.comm.as_slice()))
        .unwrap_or_default();
    let leader_comm = if pid == tid {
        None
    } else {
        threads
            .get(pid)
            .map(|i| i.comm.as_slice())
            .filter(|c| !c.is_empty())
    };
    let owner = Owner::Pid {
        pid,
        comm: leader_comm.unwrap_or(thread_comm),
        leader: pid == tid || leader_comm.is_some(),
    };
    (pid, owner)
}

/// Calls that end the calling thread and so never exit.
fn ends_thread(name: &[u8]) -> bool {
    name == b"exit" || name == b"exit_group"
}

fn name_to_id(name: &[u8]) -> SyscallId {
    std::str::from_utf8(name).map_or(SyscallId::UNKNOWN, SyscallId::from_name)
}

/// Scheduler and state-dump events that tell which thread runs where and who it belongs to.
/// Returns the thread `sched_process_free` said is gone, if that was the event.
fn track_state(threads: &mut Threads, t: &TextLine, line: &[u8], name: &[u8]) -> Option<u32> {
    let u32_of = |key: &[u8]| {
        t.payload(line, key)
            .and_then(Value::uint)
            .and_then(|v| u32::try_from(v).ok())
    };
    let str_of = |key: &[u8]| t.payload(line, key).and_then(|v| v.str(line));
    match name {
        b"sched_process_fork" => {
            if let Some(child) = u32_of(b"child_tid") {
                threads.update(child, u32_of(b"child_pid"), str_of(b"child_comm"));
            }
            if let Some(parent) = u32_of(b"parent_tid") {
                threads.update(parent, u32_of(b"parent_pid"), None);
            }
        }
        b"lttng_statedump_process_state" => {
            if let Some(tid) = u32_of(b"tid") {
                threads.update(tid, u32_of(b"pid"), str_of(b"name"));
            }
        }
        b"sched_process_exec" => {
            // The new program's name is the file's base name, cut like the kernel's comm.
            if let (Some(tid), Some(file)) = (u32_of(b"tid"), str_of(b"filename")) {
                let base = file.rsplit(|c| *c == b'/').next().unwrap_or(file);
                threads.update(tid, None, Some(base.get(..15).unwrap_or(base)));
            }
        }
        b"sched_process_free" => {
            let tid = u32_of(b"tid")?;
            threads.forget(tid);
            return Some(tid);
        }
        _ => {}
    }
    None
}

/// Perf-counter contexts (`lttng add-context -t perf:cpu:cycles` …) of this event, if any.
fn perf_counters(t: &TextLine, line: &[u8]) -> Option<PerfCounters> {
    let mut c = PerfCounters::default();
    let mut any = false;
    for (key, value) in t.context_with_prefix(line, b"perf_") {
        let Some(v) = value.uint() else { continue };
        let kind = key
            .strip_prefix(b"perf_cpu_")
            .or_else(|| key.strip_prefix(b"perf_thread_"))
            .unwrap_or(key);
        let slot = match kind {
            b"cycles" | b"cpu_cycles" => &mut c.cycles,
            b"instructions" => &mut c.instructions,
            b"cache_misses" => &mut c.cache_misses,
            b"context_switches" | b"cs" => &mut c.context_switches,
            _ => continue,
        };
        *slot = v;
        any = true;
    }
    any.then_some(c)
}

/// Counter growth over a call (counters are monotonic; a reset reads as 0, not a wrap).
fn delta(start: PerfCounters, end: PerfCounters) -> PerfCounters {
    PerfCounters {
        cycles: end.cycles.saturating_sub(start.cycles),
        instructions: end.instructions.saturating_sub(start.instructions),
        cache_misses: end.cache_misses.saturating_sub(start.cache_misses),
        context_switches: end.context_switches.saturating_sub(start.context_switches),
    }
}

impl LineDecoder for Decoder {
    fn line(&mut self, line_no: u64, line: &[u8]) {
        Decoder::line(self, line_no, line);
    }
    fn line_too_long(&mut self, line_no: u64, head: &[u8]) {
        self.stats.add_decode_errors(1);
        self.log.too_long(line_no, head);
    }
    fn batcher(&mut self) -> &mut Batcher {
        &mut self.batcher
    }
    fn at_end(&mut self) {
        // The stderr thread has ended by now (the tool is reaped at end of output):
        // every report is in the queue.
        if self.discards.is_some() || !self.held.is_empty() {
            self.discards_due(None);
        }
    }
}

impl<R: BufRead + Send> BatchReader for LttngTextReader<R> {
    fn next_batch(&mut self) -> Result<Option<EventBatch>, SourceError> {
        self.input.next_batch(&mut self.decoder)
    }

    fn bytes_read(&self) -> u64 {
        self.input.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(text: &str) -> (Vec<EventBatch>, LttngCounters, Arc<SourceStats>) {
        let stats = Arc::new(SourceStats::new(SOURCE));
        let mut r = LttngTextReader::new(text.as_bytes(), Arch::X86_64, stats.clone());
        let mut out = Vec::new();
        while let Some(b) = r.next_batch().unwrap() {
            out.push(b);
        }
        (out, r.counters(), stats)
    }

    #[test]
    fn thread_from_sched_switch_and_pid_from_fork() {
        let (batches, c, stats) = read_all(concat!(
            "[1.000000000] h syscall_entry_read: { cpu_id = 0 }, { fd = 3 }\n",
            "[1.000000001] h sched_process_fork: { cpu_id = 1 }, { parent_comm = \"db\", parent_tid = 10, parent_pid = 10, child_comm = \"db\", child_tid = 11, child_pid = 10 }\n",
            "[1.000000002] h sched_switch: { cpu_id = 0 }, { prev_comm = \"swapper/0\", prev_tid = 0, prev_prio = 20, prev_state = 0, next_comm = \"db\", next_tid = 11, next_prio = 20 }\n",
            "[1.000000003] h syscall_entry_read: { cpu_id = 0 }, { fd = 3 }\n",
            "[1.000000004] h syscall_exit_read: { cpu_id = 0 }, { ret = -11 }\n",
            "garbage\n",
        ));
        assert_eq!(c.no_thread, 1);
        assert_eq!(stats.dropped(DropReason::NoTarget), 1);
        assert_eq!(stats.decode_errors(), 1);
        assert_eq!(batches.len(), 1);
        let b = &batches[0];
        assert_eq!(b.process.pid, Some(10));
        assert_eq!(b.process.comm.as_deref(), Some("db"));
        assert_eq!(b.events.len(), 2);
        assert!(b.events.iter().all(|e| e.pid == 10 && e.tid == 11));
        assert_eq!(b.events[1].ret, Some(-11));
    }

    #[test]
    fn contexts_and_perf_counter_deltas() {
        let (batches, c, _) = read_all(concat!(
            "[2.0] h syscall_entry_write: { cpu_id = 0 }, { tid = 7, pid = 5, procname = \"app\", perf_cpu_cycles = 100, perf_cpu_cache_misses = 4 }, { fd = 1 }\n",
            "[2.1] h syscall_exit_write: { cpu_id = 0 }, { tid = 7, pid = 5, procname = \"app\", perf_cpu_cycles = 350, perf_cpu_cache_misses = 9 }, { ret = 4 }\n",
        ));
        assert_eq!(c.no_thread, 0);
        let e = &batches[0].events;
        assert_eq!((e[0].pid, e[0].tid), (5, 7));
        let p = e[1].perf.unwrap();
        assert_eq!((p.cycles, p.cache_misses), (250, 5));
        assert_eq!(e[0].ts_ns, 2_000_000_000);
    }

    #[test]
    fn counters_of_threads_that_ended_are_not_kept() {
        let text = concat!(
            // Thread 7 ends through exit_group, thread 8 through exit.
            "[2.0] h syscall_entry_exit_group: { cpu_id = 0 }, { tid = 7, pid = 5, procname = \"app\", perf_cpu_cycles = 100 }, { error_code = 0 }\n",
            "[2.1] h syscall_entry_exit: { cpu_id = 1 }, { tid = 8, pid = 5, procname = \"app\", perf_cpu_cycles = 100 }, { error_code = 0 }\n",
            // Thread 9 is killed in a call, then freed.
            "[2.2] h syscall_entry_read: { cpu_id = 2 }, { tid = 9, pid = 5, procname = \"app\", perf_cpu_cycles = 100 }, { fd = 3 }\n",
            "[2.3] h sched_process_free: { cpu_id = 3 }, { comm = \"app\", tid = 9, prio = 20 }\n",
            // Thread 10 is still in its call.
            "[2.4] h syscall_entry_read: { cpu_id = 2 }, { tid = 10, pid = 5, procname = \"app\", perf_cpu_cycles = 100 }, { fd = 3 }\n",
        );
        let stats = Arc::new(SourceStats::new(SOURCE));
        let mut r = LttngTextReader::new(text.as_bytes(), Arch::X86_64, stats.clone());
        while r.next_batch().unwrap().is_some() {}
        assert_eq!(stats.decode_errors(), 0);
        let pending: Vec<_> = r.decoder.entry_perf.keys().copied().collect();
        assert_eq!(pending, [10]);
    }

    /// A live session stopped at shutdown: babeltrace2 dies by our SIGTERM, and the
    /// discard reports still held (their range reaches past the last event) are counted.
    #[test]
    fn a_stopped_session_still_counts_the_held_discard_reports() {
        use crate::sources::input::ChildOutput;
        let text = concat!(
            "[1.000000000] h sched_switch: { cpu_id = 0 }, { prev_comm = \"swapper/0\", prev_tid = 0, prev_prio = 20, prev_state = 0, next_comm = \"db\", next_tid = 7, next_prio = 20 }\n",
            "[1.000000010] h syscall_entry_read: { cpu_id = 0 }, { fd = 3 }\n",
            "[1.000000020] h syscall_exit_read: { cpu_id = 0 }, { ret = 1 }\n",
        );
        let report = "WARNING: Tracer discarded 7 events between [1.000000000] and [9.000000000] in trace \"h\" (no UUID) within stream \"s\" (stream class ID: 0, stream ID: 0).";
        let mut cmd = std::process::Command::new("sh");
        cmd.args([
            "-c",
            // The report first: once the events are read, it was written too.
            "echo \"$2\" >&2; printf '%s' \"$1\"; exec sleep 30",
            "sh",
            text,
            report,
        ]);
        let queue = Arc::new(DiscardQueue::default());
        let tap = super::super::babeltrace::discard_tap(queue.clone());
        let out = ChildOutput::spawn_tapped(cmd, "sh", tap).unwrap();
        let stopper = out.stopper();
        let stats = Arc::new(SourceStats::new(SOURCE));
        let mut r = LttngTextReader::new(out, Arch::X86_64, stats.clone())
            .with_discards(queue)
            .live();
        let mut calls = 0;
        while calls < 2 {
            calls += r
                .next_batch()
                .unwrap()
                .expect("the session's events")
                .events
                .len();
        }
        assert_eq!(stopper.terminate(), 1);
        while r
            .next_batch()
            .expect("a clean end, not `sh failed (signal: 15)`")
            .is_some()
        {}
        assert_eq!(stats.dropped(DropReason::KernelLost), 7);
        assert_eq!(r.counters().discarded_events, 7);
    }

    #[test]
    fn old_naming_has_generic_exit() {
        let (batches, c, _) = read_all(concat!(
            "[3.0] h sched_switch: { cpu_id = 2 }, { prev_comm = \"a\", prev_tid = 0, next_comm = \"x\", next_tid = 9 }\n",
            "[3.1] h sys_ioctl: { cpu_id = 2 }, { fd = 26 }\n",
            "[3.2] h exit_syscall: { cpu_id = 2 }, { ret = 0 }\n",
        ));
        assert_eq!(c.syscall_records, 2);
        let e = &batches[0].events;
        assert_eq!(e[1].syscall, SyscallId::UNKNOWN);
        assert_eq!(e[1].kind, faultline_engine::EventKind::Exit);
        assert_eq!(batches[0].process.comm.as_deref(), Some("x"));
    }

    #[test]
    fn switches_become_the_leaving_threads_runs_and_preemptions() {
        use faultline_engine::EventKind;
        let sw = |ts: &str, cpu: u32, prev: u32, state: u32, next: u32| {
            format!(
                "[{ts}] h sched_switch: {{ cpu_id = {cpu} }}, {{ prev_comm = \"db\", prev_tid = {prev}, prev_prio = 20, prev_state = {state}, next_comm = \"db\", next_tid = {next}, next_prio = 20 }}\n"
            )
        };
        let fork = "[0.5] h sched_process_fork: { cpu_id = 1 }, { parent_comm = \"db\", parent_tid = 10, parent_pid = 10, child_comm = \"db\", child_tid = 11, child_pid = 10 }\n";
        let call = |tid: u32, pid: u32| {
            format!("[0.6] h syscall_entry_read: {{ cpu_id = 3 }}, {{ tid = {tid}, pid = {pid}, procname = \"db\" }}, {{ fd = 3 }}\n")
        };
        let text = [
            fork.to_owned(),
            call(10, 10),
            call(11, 10),
            call(12, 12),
            // Kernel thread 13 makes no syscalls: its switches make no records.
            sw("0.900", 0, 0, 0, 13),
            sw("0.950", 0, 13, 0, 11),
            // Thread 11 sleeps (interruptible) after 50 ms.
            sw("1.000", 0, 11, 1, 0),
            sw("1.100", 0, 0, 0, 11),
            // Preempted on a 4.4 kernel (TASK_RUNNING | TASK_STATE_MAX) after 250 ms.
            sw("1.350", 0, 11, 2048, 10),
            // Thread 10 blocks (uninterruptible) after 50 ms; then 11 runs again, yields (0).
            sw("1.400", 0, 10, 2, 11),
            sw("1.410", 0, 11, 0, 0),
            // A record whose leaving thread is not the one the CPU was running: no run.
            sw("1.500", 0, 12, 256, 0),
        ]
        .concat();
        let (batches, c, stats) = read_all(&text);
        assert_eq!(stats.decode_errors(), 0);
        assert_eq!(c.switch_records, 5, "idle task and kernel thread skipped");
        let events: Vec<_> = batches.iter().flat_map(|b| b.events.iter()).collect();
        let runs: Vec<_> = events
            .iter()
            .filter(|e| e.kind == EventKind::OnCpu)
            .map(|e| (e.tid, e.ts_ns, e.duration_ns))
            .collect();
        assert_eq!(
            runs,
            vec![
                (11, 1_000_000_000, 50_000_000),
                (11, 1_350_000_000, 250_000_000),
                (10, 1_400_000_000, 50_000_000),
                (11, 1_410_000_000, 10_000_000),
            ]
        );
        let offs: Vec<_> = events
            .iter()
            .filter(|e| e.kind == EventKind::OffCpu)
            .map(|e| (e.tid, e.preempted(), e.blocked_uninterruptibly()))
            .collect();
        assert_eq!(
            offs,
            vec![
                (11, false, false),
                (11, true, false),
                (10, false, true),
                (11, true, false),
                (12, true, false)
            ]
        );
        // Routed to the process the fork named.
        assert!(events.iter().filter(|e| e.tid != 12).all(|e| e.pid == 10));
        assert!(events.iter().all(|e| e.tid != 13));
    }

    #[test]
    fn discard_reports_mark_the_stream_where_their_range_ends() {
        use faultline_engine::EventKind;
        let text = concat!(
            "[1.000000000] h sched_switch: { cpu_id = 0 }, { prev_comm = \"swapper/0\", prev_tid = 0, prev_prio = 20, prev_state = 0, next_comm = \"db\", next_tid = 7, next_prio = 20 }\n",
            "[1.000000010] h syscall_entry_read: { cpu_id = 0 }, { fd = 3 }\n",
            "[1.000000020] h syscall_exit_read: { cpu_id = 0 }, { ret = 1 }\n",
            "[1.000000030] h syscall_entry_read: { cpu_id = 0 }, { fd = 3 }\n",
            "[1.000000040] h syscall_exit_read: { cpu_id = 0 }, { ret = 1 }\n",
        );
        let stats = Arc::new(SourceStats::new(SOURCE));
        let queue = Arc::new(DiscardQueue::default());
        // Reported before the stream got there (stderr runs ahead of stdout): held
        // until the first event at or after its end.
        queue.push(Discard {
            events: 4,
            packets: 0,
            end_ns: Some(1_000_000_025),
        });
        // No time range: marks at once.
        queue.push(Discard {
            events: 0,
            packets: 2,
            end_ns: None,
        });
        // Past the last event: applied when the input ends.
        queue.push(Discard {
            events: 1,
            packets: 0,
            end_ns: Some(5_000_000_000),
        });
        let mut r =
            LttngTextReader::new(text.as_bytes(), Arch::X86_64, stats.clone()).with_discards(queue);
        let mut events = Vec::new();
        while let Some(b) = r.next_batch().unwrap() {
            events.extend(b.events);
        }
        let kinds: Vec<(EventKind, u64)> = events
            .iter()
            .filter(|e| !e.is_scheduling())
            .map(|e| (e.kind, e.ts_ns))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (EventKind::Enter, 1_000_000_010),
                (EventKind::Exit, 1_000_000_020),
                (EventKind::Lost, 1_000_000_025),
                (EventKind::Enter, 1_000_000_030),
                (EventKind::Exit, 1_000_000_040),
                // The end of the input is the latest event's time, plus at most a second.
                (EventKind::Lost, 1_000_000_040 + 1_000_000_000),
            ]
        );
        let c = r.counters();
        assert_eq!((c.discarded_events, c.discarded_packets), (5, 2));
        assert_eq!(stats.dropped(DropReason::KernelLost), 5);
    }
}
