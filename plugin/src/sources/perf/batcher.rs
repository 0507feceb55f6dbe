//! Groups a stream of decoded syscall events into per-process [`EventBatch`]es.
//!
//! Text traces interleave all processes line by line; the pipeline wants one process per
//! batch so it resolves the target once per batch. Events of one process stay in arrival
//! order (so per-thread order is preserved); order *across* processes is not kept, which
//! the engine does not need. Memory is bounded: at most [`PENDING_EVENTS_CAP`] events and
//! [`MAX_GROUPS`] processes are held before everything is flushed.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use faultline_engine::SyscallEvent;

use crate::model::{EventBatch, ProcessInfo};
use crate::pipeline::telemetry::SourceStats;
use crate::sources::MAX_BATCH_EVENTS;

/// Events held back across all processes before a full flush (bounds memory and latency).
pub const PENDING_EVENTS_CAP: usize = 16 * MAX_BATCH_EVENTS;
/// Distinct processes tracked before a full flush (bounds the group tables).
pub const MAX_GROUPS: usize = 4096;
/// Trace time after which held events are flushed, so live streams stay near real time.
pub const FLUSH_AFTER_NS: u64 = 1_000_000_000;

/// Longest process name kept, in bytes. Linux names are at most 15 bytes (`TASK_COMM_LEN`,
/// 16, counts the NUL): a longer one comes from a malformed line. Kept whole (up to a
/// line's `MAX_LINE_BYTES`) in every process group and thread
/// entry, such names would let one corrupt file pin gigabytes; cut, they still show what
/// the line said.
pub const MAX_COMM_BYTES: usize = 16;

/// `comm` cut to [`MAX_COMM_BYTES`], at a UTF-8 character boundary so the name does not
/// end in a broken character (names are bytes: a cut through non-UTF-8 stays a byte cut).
pub fn clamp_comm(comm: &[u8]) -> &[u8] {
    if comm.len() <= MAX_COMM_BYTES {
        return comm;
    }
    // A cut is at a boundary when the byte after it is no continuation byte (10xxxxxx);
    // a UTF-8 character has at most three of them.
    let end = (MAX_COMM_BYTES - 3..=MAX_COMM_BYTES)
        .rev()
        .find(|&end| comm.get(end).is_some_and(|b| b & 0xC0 != 0x80))
        .unwrap_or(MAX_COMM_BYTES);
    comm.get(..end).unwrap_or(comm)
}

/// Who a line belongs to: the process id when the trace has it, else only the command name
/// (perf's default field set and `perf trace` print thread ids only).
#[derive(Clone, Copy, Debug)]
pub enum Owner<'a> {
    /// A known process; `leader` is true when the event's thread is the process's main thread,
    /// whose name is the process name (other threads may carry their own names).
    Pid {
        pid: u32,
        comm: &'a [u8],
        leader: bool,
    },
    /// Process unknown: grouped by command name.
    Comm(&'a [u8]),
}

struct Group {
    process: ProcessInfo,
    events: Vec<SyscallEvent>,
    /// An event arrived since the last loss marker (see [`Batcher::mark_loss`]).
    since_loss: bool,
}

/// The per-process accumulator shared by the text decoders.
pub struct Batcher {
    source: &'static str,
    stats: Arc<SourceStats>,
    groups: Vec<Group>,
    by_pid: HashMap<u32, usize>,
    by_comm: HashMap<Vec<u8>, usize>,
    ready: VecDeque<EventBatch>,
    /// The last process looked up: consecutive lines are mostly of one process.
    last_pid: Option<(u32, usize)>,
    pending: usize,
    window_start_ns: Option<u64>,
    /// The latest event time seen (where a loss without a time of its own is placed).
    latest_ns: u64,
}

impl Batcher {
    /// A batcher whose batches carry `source` and whose emitted events count as `received`.
    pub fn new(source: &'static str, stats: Arc<SourceStats>) -> Self {
        Self {
            source,
            stats,
            groups: Vec::new(),
            by_pid: HashMap::new(),
            by_comm: HashMap::new(),
            ready: VecDeque::new(),
            last_pid: None,
            pending: 0,
            window_start_ns: None,
            latest_ns: 0,
        }
    }

    /// Adds one event of `owner`; may make batches ready.
    pub fn push(&mut self, owner: Owner<'_>, event: SyscallEvent) {
        match self.window_start_ns {
            None => self.window_start_ns = Some(event.ts_ns),
            Some(start) if event.ts_ns.saturating_sub(start) > FLUSH_AFTER_NS => {
                self.flush_all();
                self.window_start_ns = Some(event.ts_ns);
            }
            Some(_) => {}
        }
        self.latest_ns = self.latest_ns.max(event.ts_ns);
        let idx = self.group_index(owner);
        let Some(group) = self.groups.get_mut(idx) else {
            return;
        };
        group.events.push(event);
        group.since_loss = true;
        self.after_push(idx);
    }

    /// Records that the tracer lost events before `ts_ns` (a ring-buffer overrun): every
    /// process with events since the previous marker gets a loss marker
    /// ([`SyscallEvent::lost`]) in its place in the stream, so the engine does not pair an
    /// entry before the loss with an exit after it. A loss report names no thread (a
    /// ring buffer is per CPU, any thread may have run there), hence every process; one
    /// silent since the last marker has nothing a new one would change. Markers count as
    /// events (received, analysed or dropped like the others).
    ///
    /// `ts_ns`: the loss report's time; without one, or if it is older than the latest
    /// event seen, the latest event's time (an entry up to then may have lost its exit).
    /// A time more than [`FLUSH_AFTER_NS`] past the latest event is taken as that bound:
    /// a garbled time far in the future would otherwise unpair every later exit.
    pub fn mark_loss(&mut self, ts_ns: Option<u64>) {
        let ts_ns = ts_ns.unwrap_or(0).clamp(
            self.latest_ns,
            self.latest_ns.saturating_add(FLUSH_AFTER_NS),
        );
        for idx in 0..self.groups.len() {
            let Some(group) = self.groups.get_mut(idx) else {
                continue;
            };
            if !std::mem::take(&mut group.since_loss) {
                continue;
            }
            let pid = group.process.pid.unwrap_or(0);
            group.events.push(SyscallEvent::lost(pid, ts_ns));
            self.after_push(idx);
        }
    }

    /// Bounds held events after one more was added to group `idx`.
    fn after_push(&mut self, idx: usize) {
        self.pending += 1;
        if self
            .groups
            .get(idx)
            .is_some_and(|g| g.events.len() >= MAX_BATCH_EVENTS)
        {
            self.flush_group(idx);
        }
        if self.pending >= PENDING_EVENTS_CAP {
            self.flush_all();
        }
    }

    /// Whether a finished batch is waiting (readers return it before reading on).
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Whether events are held back (not yet in a finished batch).
    pub fn has_pending(&self) -> bool {
        self.pending > 0
    }

    /// The next finished batch, if any.
    pub fn pop_ready(&mut self) -> Option<EventBatch> {
        let batch = self.ready.pop_front()?;
        self.stats.add_received(batch.events.len() as u64);
        Some(batch)
    }

    /// Makes every held event ready (end of input, or a bound was reached).
    pub fn flush_all(&mut self) {
        for idx in 0..self.groups.len() {
            self.flush_group(idx);
        }
        if self.groups.len() >= MAX_GROUPS {
            self.groups.clear();
            self.by_pid.clear();
            self.by_comm.clear();
            self.last_pid = None;
        }
        self.pending = 0;
    }

    fn flush_group(&mut self, idx: usize) {
        let Some(group) = self.groups.get_mut(idx) else {
            return;
        };
        if group.events.is_empty() {
            return;
        }
        let events = std::mem::take(&mut group.events);
        self.pending = self.pending.saturating_sub(events.len());
        self.ready.push_back(EventBatch {
            source: self.source,
            process: group.process.clone(),
            events,
        });
    }

    fn group_index(&mut self, owner: Owner<'_>) -> usize {
        if self.groups.len() >= MAX_GROUPS {
            self.flush_all();
        }
        match owner {
            Owner::Pid { pid, comm, leader } => {
                let comm = clamp_comm(comm);
                let cached = match self.last_pid {
                    Some((last, idx)) if last == pid => Some(idx),
                    _ => self.by_pid.get(&pid).copied(),
                };
                if let Some(idx) = cached {
                    self.last_pid = Some((pid, idx));
                    self.rename_if_needed(idx, comm, leader);
                    return idx;
                }
                let idx = self.new_group(Some(pid), comm);
                self.by_pid.insert(pid, idx);
                self.last_pid = Some((pid, idx));
                idx
            }
            Owner::Comm(comm) => {
                let comm = clamp_comm(comm);
                if let Some(&idx) = self.by_comm.get(comm) {
                    return idx;
                }
                let idx = self.new_group(None, comm);
                self.by_comm.insert(comm.to_vec(), idx);
                idx
            }
        }
    }

    /// The main thread's name is the process name; it changes on `exec`, and events before
    /// and after must not share a batch (the router may match only one of the names).
    /// Until the main thread shows up (a server's main thread may sleep in `accept` for the
    /// whole trace), the first thread seen names the process — unless the kernel named that
    /// thread: the first ordinary thread then names it, for the events held too, since
    /// they are the same process's (measured: a MariaDB trace that began with io_uring
    /// workers' records made `--target mariadbd` match nothing).
    fn rename_if_needed(&mut self, idx: usize, comm: &[u8], leader: bool) {
        let Some(group) = self.groups.get(idx) else {
            return;
        };
        let current = group.process.comm.as_deref().map(str::as_bytes);
        if current == Some(comm) {
            return;
        }
        let provisional = current.is_some_and(kernel_named) && !kernel_named(comm);
        if !leader && !provisional {
            return;
        }
        if !provisional {
            self.flush_group(idx);
        }
        if let Some(group) = self.groups.get_mut(idx) {
            group.process.comm = Some(String::from_utf8_lossy(comm).into_owned());
        }
    }

    fn new_group(&mut self, pid: Option<u32>, comm: &[u8]) -> usize {
        self.groups.push(Group {
            process: ProcessInfo {
                pid,
                comm: Some(String::from_utf8_lossy(comm).into_owned()),
                ..ProcessInfo::default()
            },
            events: Vec::new(),
            since_loss: false,
        });
        self.groups.len() - 1
    }
}

/// Threads the kernel creates in a process and names itself (io_uring's workers and
/// submission threads): their names are not the process's.
fn kernel_named(comm: &[u8]) -> bool {
    comm.starts_with(b"iou-wrk-") || comm.starts_with(b"iou-sqp-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use faultline_engine::SyscallId;

    fn ev(pid: u32, tid: u32, ts: u64) -> SyscallEvent {
        SyscallEvent::enter(pid, tid, SyscallId::UNKNOWN, ts)
    }

    fn drain(b: &mut Batcher) -> Vec<EventBatch> {
        b.flush_all();
        std::iter::from_fn(|| b.pop_ready()).collect()
    }

    #[test]
    fn a_loss_marks_each_process_with_events_since_the_last_mark() {
        let stats = Arc::new(SourceStats::new("perf"));
        let mut b = Batcher::new("perf", stats);
        let owner = |pid| Owner::Pid {
            pid,
            comm: b"a",
            leader: true,
        };
        b.push(owner(1), ev(1, 1, 10));
        b.push(owner(2), ev(2, 2, 20));
        b.mark_loss(Some(30));
        // Process 2 has had nothing since: a second loss changes nothing for it.
        b.push(owner(1), ev(1, 1, 40));
        // A report older than the latest event is placed at the latest event.
        b.mark_loss(Some(35));
        b.mark_loss(None);
        // A garbled time far ahead is bounded to a second past the latest event.
        b.push(owner(2), ev(2, 2, 50));
        b.mark_loss(Some(u64::MAX));
        let batches = drain(&mut b);
        let kinds = |pid| -> Vec<(EventKind, u64)> {
            batches
                .iter()
                .filter(|x| x.process.pid == Some(pid))
                .flat_map(|x| x.events.iter().map(|e| (e.kind, e.ts_ns)))
                .collect()
        };
        use faultline_engine::EventKind;
        let (enter, lost) = (EventKind::Enter, EventKind::Lost);
        assert_eq!(kinds(1), [(enter, 10), (lost, 30), (enter, 40), (lost, 40)]);
        assert_eq!(
            kinds(2),
            [
                (enter, 20),
                (lost, 30),
                (enter, 50),
                (lost, 50 + FLUSH_AFTER_NS)
            ]
        );
        assert!(batches
            .iter()
            .flat_map(|x| x.events.iter().map(move |e| (e, x.process.pid)))
            .all(|(e, pid)| Some(e.pid) == pid));
    }

    #[test]
    fn groups_per_pid_and_keeps_order() {
        let stats = Arc::new(SourceStats::new("perf"));
        let mut b = Batcher::new("perf", stats.clone());
        for i in 0..10u64 {
            let pid = if i % 2 == 0 { 1 } else { 2 };
            let comm: &[u8] = if pid == 1 { b"a" } else { b"b" };
            b.push(
                Owner::Pid {
                    pid,
                    comm,
                    leader: true,
                },
                ev(pid, pid, i),
            );
        }
        let batches = drain(&mut b);
        assert_eq!(batches.len(), 2);
        for batch in &batches {
            assert!(batch
                .events
                .iter()
                .all(|e| Some(e.pid) == batch.process.pid));
            assert!(batch.events.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
        }
        assert_eq!(stats.received(), 10);
    }

    #[test]
    fn full_batches_are_split_at_the_cap() {
        let stats = Arc::new(SourceStats::new("perf"));
        let mut b = Batcher::new("perf", stats);
        let n = MAX_BATCH_EVENTS * 2 + 5;
        for i in 0..n {
            b.push(Owner::Comm(b"x"), ev(7, 7, i as u64));
        }
        let sizes: Vec<usize> = drain(&mut b).iter().map(|b| b.events.len()).collect();
        assert_eq!(sizes, vec![MAX_BATCH_EVENTS, MAX_BATCH_EVENTS, 5]);
    }

    /// An event of process 5, from its main thread (`leader`) or another one.
    fn pid5(comm: &[u8], leader: bool) -> Owner<'_> {
        Owner::Pid {
            pid: 5,
            comm,
            leader,
        }
    }

    #[test]
    fn exec_renames_start_a_new_batch() {
        let mut b = Batcher::new("perf", Arc::new(SourceStats::new("perf")));
        let owner = |comm| pid5(comm, true);
        b.push(owner(b"sh"), ev(5, 5, 1));
        b.push(owner(b"ls"), ev(5, 5, 2));
        let batches = drain(&mut b);
        let names: Vec<_> = batches
            .iter()
            .map(|b| b.process.comm.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, vec!["sh", "ls"]);
    }

    #[test]
    fn a_kernel_named_worker_does_not_name_the_process() {
        let mut b = Batcher::new("perf", Arc::new(SourceStats::new("perf")));
        let thread = |comm| pid5(comm, false);
        // An io_uring worker first, then the server's own threads (the main thread never
        // shows): one batch, under the server's name; a later worker changes nothing.
        b.push(thread(b"iou-wrk-9"), ev(5, 9, 1));
        b.push(thread(b"mariadbd"), ev(5, 7, 2));
        b.push(thread(b"iou-wrk-9"), ev(5, 9, 3));
        // A thread that renamed itself does not rename the process either.
        b.push(thread(b"worker-1"), ev(5, 8, 4));
        let batches = drain(&mut b);
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].process.comm.as_deref(), Some("mariadbd"));
        assert_eq!(batches[0].events.len(), 4);
    }

    #[test]
    fn names_are_cut_to_the_kernels_length_at_a_character_boundary() {
        assert_eq!(clamp_comm(b"mariadbd"), b"mariadbd");
        assert_eq!(clamp_comm(&[b'x'; 40]), &[b'x'; MAX_COMM_BYTES][..]);
        // `€` is 3 bytes: one starting at byte 15 would be cut in two, so it goes whole.
        let euro = "aaaaaaaaaaaaaaa€uro";
        assert_eq!(clamp_comm(euro.as_bytes()), &euro.as_bytes()[..15]);
        // Not UTF-8: continuation bytes all the way, cut at the byte.
        assert_eq!(clamp_comm(&[0x80; 20]), &[0x80; MAX_COMM_BYTES][..]);
    }

    #[test]
    fn a_huge_name_from_a_malformed_line_is_stored_cut() {
        let mut b = Batcher::new("perf", Arc::new(SourceStats::new("perf")));
        let huge = vec![b'n'; crate::sources::lines::MAX_LINE_BYTES - 100];
        for i in 0..3 {
            b.push(Owner::Comm(&huge), ev(7, 7, i));
            b.push(pid5(&huge, true), ev(5, 5, i));
        }
        assert_eq!(b.by_comm.keys().map(Vec::len).collect::<Vec<_>>(), [16]);
        let batches = drain(&mut b);
        assert_eq!(batches.len(), 2);
        for batch in &batches {
            assert_eq!(batch.process.comm.as_deref(), Some("nnnnnnnnnnnnnnnn"));
            assert_eq!(batch.events.len(), 3);
        }
    }

    #[test]
    fn stale_events_are_flushed_by_trace_time() {
        let stats = Arc::new(SourceStats::new("perf"));
        let mut b = Batcher::new("perf", stats);
        b.push(Owner::Comm(b"x"), ev(1, 1, 0));
        assert!(b.pop_ready().is_none());
        b.push(Owner::Comm(b"x"), ev(1, 1, FLUSH_AFTER_NS + 1));
        assert_eq!(b.pop_ready().map(|b| b.events.len()), Some(1));
    }
}
