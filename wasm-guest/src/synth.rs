//! Deterministic, realistic synthetic syscall streams for tests and benchmarks.
//!
//! Real traces are few and small; scenario tests and throughput benchmarks need streams of
//! any size with a known ground truth (which threads a fault hit, and when). The generator
//! models what a server such as MariaDB looks like in a trace:
//!
//! * every thread has a *role* (connection worker, I/O worker, background, log writer,
//!   listener) with its own syscall mix, drawn from real syscall names;
//! * call durations are log-normal per syscall type, with an occasional Pareto tail
//!   (lock waits, disk stalls);
//! * gaps between calls are exponential; rarely a thread parks for 1–4 s between
//!   requests, inside a `futex` wait as pooled threads do (in real traces a busy thread
//!   never pauses that long *outside* a call unless something stalls it);
//! * optionally, calls come in *bursts* ([`BurstSpec`]): a thread runs, makes a few calls
//!   back to back, then blocks — what a kernel trace of a server with thousands of threads
//!   looks like, as only a few of them are on a CPU at any moment;
//! * an optional fault hits a seeded subset of threads at `start + U(0, onset_spread)`:
//!   their in-scope calls get slower (`duration_multiplier`) and more frequent
//!   (`rate_multiplier`).
//!
//! Everything is seeded and computed with IEEE basic operations only (`+ - * / sqrt`, our
//! own `ln`/`exp`), so the same spec gives bit-identical events natively and on wasm32.
//! Each thread draws from its own PRNG, so adding a fault does not perturb the threads it
//! does not hit: a faulted stream differs from the clean one only in the affected threads
//! after their onset.
//!
//! ```
//! use faultline_engine::synth::{generate, StreamSpec};
//! let spec = StreamSpec { threads: 8, seconds: 1.0, ..StreamSpec::default() };
//! let events: Vec<_> = generate(&spec).collect();
//! assert!(events.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::event::SyscallEvent;
use crate::syscalls::SyscallId;

/// Whether calls are emitted whole or as enter/exit halves (the two source shapes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EventShape {
    /// One [`crate::event::EventKind::Complete`] record per call (perf trace, OTLP spans).
    #[default]
    Complete,
    /// An [`crate::event::EventKind::Enter`] then an [`crate::event::EventKind::Exit`] record per call (LTTng, raw_syscalls).
    EnterExit,
}

/// Which calls of an affected thread a fault slows down.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FaultScope {
    /// Every call: CPU cap, memory pressure, a noisy neighbour.
    #[default]
    AllSyscalls,
    /// Only disk and network I/O calls (per [`SyscallId::subsystem`]): disk contention, packet loss.
    IoOnly,
    /// Only the listed calls: e.g. a lock bug showing in `futex`.
    Only(Vec<SyscallId>),
}

impl FaultScope {
    fn covers(&self, id: SyscallId) -> bool {
        match self {
            FaultScope::AllSyscalls => true,
            FaultScope::IoOnly => id.subsystem().is_io(),
            FaultScope::Only(ids) => ids.contains(&id),
        }
    }
}

/// An injected fault: the ground truth a scenario test checks a verdict against.
///
/// An environment fault hits most threads at nearly the same time (`affected_fraction`
/// near 1, small `onset_spread_seconds`); a software bug hits a few threads, spread out.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultSpec {
    /// Seconds after the stream start when the fault begins.
    pub start_seconds: f64,
    /// Share of threads hit, in `[0, 1]`; the subset is drawn from the seed.
    pub affected_fraction: f64,
    /// Each affected thread's onset is `start + U(0, onset_spread_seconds)`.
    pub onset_spread_seconds: f64,
    /// Factor on the duration of in-scope calls after onset.
    pub duration_multiplier: f64,
    /// Factor on the frequency of in-scope calls after onset (divides the gap before them).
    pub rate_multiplier: f64,
    pub scope: FaultScope,
}

impl Default for FaultSpec {
    fn default() -> Self {
        Self {
            start_seconds: 30.0,
            affected_fraction: 1.0,
            onset_spread_seconds: 0.1,
            duration_multiplier: 5.0,
            rate_multiplier: 1.0,
            scope: FaultScope::AllSyscalls,
        }
    }
}

/// Bursty threads: calls in runs of back-to-back calls separated by longer waits.
///
/// In real traces a thread that gets a CPU makes several calls before it blocks again:
/// in the public LTTng `many-threads` trace (8 CPUs, 8,030 threads) 77 % of the syscall
/// events come from the same thread as the event before and 92 % from one of the last 8
/// threads seen; in this project's perf traces of MariaDB, PostgreSQL and Apache, 90–97 %
/// and 98–100 %. Without bursts every event of a 10,000-thread stream comes from a random
/// thread, which no machine with fewer CPUs than threads produces.
#[derive(Clone, Debug, PartialEq)]
pub struct BurstSpec {
    /// Mean calls per burst (geometric), ≥ 1.
    pub mean_calls: f64,
    /// Mean number of threads inside a burst at any moment (the busy CPUs).
    pub concurrency: f64,
}

/// What stream to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamSpec {
    /// Threads of the process; tids are `pid, pid + 1, …` (the first is the main thread).
    pub threads: u32,
    /// How many distinct syscall types the process uses (capped by the built-in pool of ~64 real names).
    pub syscall_types: u16,
    /// Length of the stream in event time.
    pub seconds: f64,
    /// Mean call rate of one thread (each thread gets a personal factor in `[0.5, 2)`).
    pub calls_per_thread_per_second: f64,
    pub seed: u64,
    pub pid: u32,
    /// Timestamp of the stream start, in nanoseconds of the source clock.
    pub start_ns: u64,
    pub shape: EventShape,
    pub fault: Option<FaultSpec>,
    /// `None`: every gap is drawn independently (events of different threads interleave at random).
    pub burst: Option<BurstSpec>,
}

impl Default for StreamSpec {
    fn default() -> Self {
        Self {
            threads: 64,
            syscall_types: 50,
            seconds: 60.0,
            calls_per_thread_per_second: 200.0,
            seed: 1,
            pid: 4242,
            start_ns: 1_000_000_000_000,
            shape: EventShape::Complete,
            fault: None,
            burst: None,
        }
    }
}

/// The stream of `spec`, time ordered (by `ts_ns`; ties by thread).
pub fn generate(spec: &StreamSpec) -> Stream {
    Stream::new(spec)
}

/// One syscall type of the pool: real name, log-normal duration parameters.
struct TypeModel {
    name: &'static str,
    /// Median duration, nanoseconds.
    median_ns: f64,
    /// σ of ln(duration).
    sigma: f64,
    /// Probability of a Pareto-tail stall on top of the log-normal draw.
    tail_p: f64,
}

const fn t(name: &'static str, median_ns: f64, sigma: f64, tail_p: f64) -> TypeModel {
    TypeModel {
        name,
        median_ns,
        sigma,
        tail_p,
    }
}

/// The pool, most common first, so `syscall_types = n` keeps the n most typical calls.
/// Medians are rough figures for a database server on a busy host.
const POOL: &[TypeModel] = &[
    t("read", 2_000.0, 1.0, 0.002),
    t("write", 3_000.0, 1.0, 0.002),
    t("futex", 40_000.0, 1.8, 0.01),
    t("epoll_wait", 200_000.0, 1.5, 0.005),
    t("recvfrom", 3_000.0, 0.9, 0.002),
    t("sendto", 8_000.0, 0.9, 0.002),
    t("poll", 100_000.0, 1.5, 0.005),
    t("pread64", 20_000.0, 1.2, 0.005),
    t("pwrite64", 25_000.0, 1.2, 0.005),
    t("fsync", 1_000_000.0, 1.0, 0.01),
    t("clock_gettime", 100.0, 0.3, 0.0005),
    t("mmap", 4_000.0, 0.8, 0.001),
    t("munmap", 5_000.0, 0.8, 0.001),
    t("openat", 6_000.0, 0.9, 0.002),
    t("close", 1_000.0, 0.6, 0.001),
    t("lseek", 500.0, 0.5, 0.0005),
    t("fstat", 1_000.0, 0.6, 0.001),
    t("io_getevents", 150_000.0, 1.5, 0.005),
    t("io_submit", 10_000.0, 1.0, 0.002),
    t("nanosleep", 1_000_000.0, 0.2, 0.001),
    t("sched_yield", 1_000.0, 1.0, 0.002),
    t("madvise", 3_000.0, 0.9, 0.001),
    t("brk", 2_000.0, 0.7, 0.001),
    t("writev", 6_000.0, 0.9, 0.002),
    t("readv", 4_000.0, 0.9, 0.002),
    t("accept4", 20_000.0, 1.0, 0.002),
    t("getsockopt", 800.0, 0.5, 0.0005),
    t("setsockopt", 1_000.0, 0.5, 0.0005),
    t("rt_sigprocmask", 400.0, 0.4, 0.0005),
    t("gettid", 200.0, 0.3, 0.0005),
    t("fdatasync", 800_000.0, 1.0, 0.01),
    t("fcntl", 500.0, 0.5, 0.0005),
    t("ioctl", 2_000.0, 0.8, 0.001),
    t("sendmsg", 9_000.0, 0.9, 0.002),
    t("recvmsg", 4_000.0, 0.9, 0.002),
    t("epoll_ctl", 1_500.0, 0.6, 0.001),
    t("mprotect", 3_000.0, 0.7, 0.001),
    t("getdents64", 10_000.0, 1.0, 0.002),
    t("newfstatat", 2_000.0, 0.7, 0.001),
    t("statx", 2_500.0, 0.7, 0.001),
    t("unlink", 15_000.0, 1.0, 0.002),
    t("rename", 20_000.0, 1.0, 0.002),
    t("ftruncate", 30_000.0, 1.0, 0.003),
    t("fallocate", 40_000.0, 1.0, 0.003),
    t("shutdown", 5_000.0, 0.7, 0.001),
    t("getsockname", 800.0, 0.5, 0.0005),
    t("getpeername", 800.0, 0.5, 0.0005),
    t("rt_sigaction", 500.0, 0.4, 0.0005),
    t("getrusage", 1_500.0, 0.5, 0.0005),
    t("sched_getaffinity", 1_000.0, 0.5, 0.0005),
    t("pipe2", 4_000.0, 0.7, 0.001),
    t("eventfd2", 2_000.0, 0.6, 0.001),
    t("dup", 700.0, 0.5, 0.0005),
    t("socket", 8_000.0, 0.8, 0.001),
    t("connect", 50_000.0, 1.2, 0.003),
    t("timerfd_settime", 1_500.0, 0.5, 0.0005),
    t("select", 150_000.0, 1.5, 0.005),
    t("mremap", 6_000.0, 0.8, 0.001),
    t("clone", 60_000.0, 0.8, 0.002),
    t("wait4", 100_000.0, 1.5, 0.005),
    t("prctl", 800.0, 0.5, 0.0005),
    t("getpid", 150.0, 0.3, 0.0005),
    t("sync_file_range", 300_000.0, 1.0, 0.005),
    t("gettimeofday", 100.0, 0.3, 0.0005),
];

/// A thread role: the calls it mostly makes (name, weight); every other pool call gets
/// a small background weight so all types appear.
struct Role {
    /// Share of the threads, out of the sum over roles.
    share: f64,
    core: &'static [(&'static str, f64)],
}

const ROLES: &[Role] = &[
    // Connection handler: network request/response, row reads, lock waits.
    Role {
        share: 60.0,
        core: &[
            ("recvfrom", 20.0),
            ("sendto", 15.0),
            ("read", 10.0),
            ("write", 6.0),
            ("futex", 10.0),
            ("poll", 6.0),
            ("clock_gettime", 12.0),
            ("pread64", 6.0),
            ("setsockopt", 2.0),
            ("getsockopt", 2.0),
            ("writev", 3.0),
            ("readv", 2.0),
        ],
    },
    // Storage I/O worker: async and sync disk I/O.
    Role {
        share: 15.0,
        core: &[
            ("io_submit", 15.0),
            ("io_getevents", 15.0),
            ("pread64", 15.0),
            ("pwrite64", 12.0),
            ("fsync", 3.0),
            ("fdatasync", 3.0),
            ("lseek", 5.0),
            ("futex", 6.0),
            ("fstat", 3.0),
        ],
    },
    // Background housekeeping: timers, memory management, yielding.
    Role {
        share: 12.0,
        core: &[
            ("futex", 15.0),
            ("nanosleep", 10.0),
            ("clock_gettime", 15.0),
            ("sched_yield", 5.0),
            ("madvise", 5.0),
            ("mmap", 4.0),
            ("munmap", 4.0),
            ("brk", 2.0),
            ("mprotect", 2.0),
        ],
    },
    // Log writer: appends and syncs (redo log, binlog).
    Role {
        share: 8.0,
        core: &[
            ("write", 20.0),
            ("pwrite64", 15.0),
            ("fsync", 6.0),
            ("fdatasync", 6.0),
            ("futex", 8.0),
            ("lseek", 4.0),
            ("openat", 1.0),
            ("close", 1.0),
        ],
    },
    // Listener: accepts connections and waits on epoll.
    Role {
        share: 5.0,
        core: &[
            ("epoll_wait", 20.0),
            ("accept4", 10.0),
            ("setsockopt", 5.0),
            ("fcntl", 5.0),
            ("epoll_ctl", 5.0),
            ("getsockname", 2.0),
            ("getpeername", 2.0),
        ],
    },
];

/// Background weight of every pool call not in a role's core mix.
const BACKGROUND_WEIGHT: f64 = 0.15;
/// Probability that a call is followed by a long idle gap (pooled thread parked).
const IDLE_P: f64 = 0.0005;
/// Idle gap length range, seconds.
const IDLE_MIN_S: f64 = 1.0;
const IDLE_MAX_S: f64 = 4.0;

/// A syscall type resolved against the engine's tables.
#[derive(Clone, Copy)]
struct ResolvedType {
    id: SyscallId,
    mu: f64,
    sigma: f64,
    tail_p: f64,
}

/// Per-thread generator state (a few dozen bytes: streams of 10,000+ threads are cheap).
struct ThreadState {
    tid: u32,
    rng: SplitMix64,
    role: u8,
    /// Mean gap between calls of this thread, seconds.
    mean_gap_s: f64,
    /// With bursts: (probability that a call ends its burst, mean gap inside a burst,
    /// mean gap after a burst), seconds; together they keep the mean gap `mean_gap_s`.
    burst: Option<(f64, f64, f64)>,
    /// Fault onset of this thread, if the fault hits it.
    onset_ns: Option<u64>,
    /// `EnterExit` shape: the call whose exit is due at the heap key.
    pending_exit: Option<SyscallId>,
    /// `EnterExit` shape: the gap drawn with the call in flight, applied after its exit.
    stashed_gap_ns: u64,
}

/// The time-ordered event iterator returned by [`generate`].
pub struct Stream {
    types: Vec<ResolvedType>,
    /// The call a parked thread waits in (`futex`).
    park: SyscallId,
    /// Per role, cumulative weights over `types`.
    role_cdf: Vec<Vec<f64>>,
    threads: Vec<ThreadState>,
    /// Min-heap of (next event time, thread index).
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    end_ns: u64,
    pid: u32,
    shape: EventShape,
    fault: Option<FaultSpec>,
    affected: Vec<(u32, u64)>,
}

impl Stream {
    fn new(spec: &StreamSpec) -> Self {
        let types = resolve_types(spec.syscall_types);
        let role_cdf = ROLES.iter().map(|r| role_cdf(r, &types)).collect();
        let end_ns = spec
            .start_ns
            .saturating_add(secs_to_ns(spec.seconds.max(0.0)));
        let rate = if spec.calls_per_thread_per_second.is_finite()
            && spec.calls_per_thread_per_second > 0.0
        {
            spec.calls_per_thread_per_second
        } else {
            1.0
        };
        let onsets = fault_onsets(spec);
        let share_total: f64 = ROLES.iter().map(|r| r.share).sum();
        let mut threads = Vec::with_capacity(spec.threads as usize);
        let mut heap = BinaryHeap::with_capacity(spec.threads as usize);
        let mut affected = Vec::new();
        for i in 0..spec.threads {
            let mut rng = SplitMix64::new(spec.seed ^ (u64::from(i) + 1).wrapping_mul(GOLDEN));
            let role = pick_role(rng.next_f64() * share_total);
            let personal = 0.5 + 1.5 * rng.next_f64();
            let mean_gap_s = 1.0 / (rate * personal);
            let tid = spec.pid.wrapping_add(i);
            let onset_ns = onsets.get(i as usize).copied().flatten();
            if let Some(o) = onset_ns {
                affected.push((tid, o));
            }
            let first = spec
                .start_ns
                .saturating_add(secs_to_ns(mean_gap_s * rng.exponential()));
            if first < end_ns {
                heap.push(Reverse((first, i)));
            }
            threads.push(ThreadState {
                tid,
                rng,
                role,
                mean_gap_s,
                burst: spec
                    .burst
                    .as_ref()
                    .map(|b| burst_gaps(b, mean_gap_s, spec.threads)),
                onset_ns,
                pending_exit: None,
                stashed_gap_ns: 0,
            });
        }
        Self {
            types,
            park: SyscallId::from_name("futex"),
            role_cdf,
            threads,
            heap,
            end_ns,
            pid: spec.pid,
            shape: spec.shape,
            fault: spec.fault.clone(),
            affected,
        }
    }

    /// Ground truth: `(tid, onset_ns)` of every thread the fault hits, by tid.
    pub fn affected(&self) -> &[(u32, u64)] {
        &self.affected
    }

    /// Draws one call of thread `idx` starting at `at`: (syscall, duration, gap after it).
    fn draw_call(&mut self, idx: usize, at: u64) -> Option<(SyscallId, u64, u64)> {
        let th = self.threads.get_mut(idx)?;
        let cdf = self.role_cdf.get(th.role as usize)?;
        let total = cdf.last().copied().unwrap_or(0.0);
        let u = th.rng.next_f64() * total;
        let k = cdf
            .partition_point(|&c| c <= u)
            .min(cdf.len().saturating_sub(1));
        let ty = *self.types.get(k)?;
        let mut dur_s = exp(ty.mu + ty.sigma * th.rng.normal());
        let tail = th.rng.next_f64();
        let pareto = th.rng.next_f64();
        if tail < ty.tail_p {
            // Pareto(α = 1.5) stall factor: most are small, some are huge.
            dur_s *= exp(-ln(1.0 - pareto) / 1.5);
        }
        let mut gap_s = match th.burst {
            None => th.mean_gap_s * th.rng.exponential(),
            Some((end_p, inside_s, after_s)) => {
                let ends = th.rng.next_f64() < end_p;
                (if ends { after_s } else { inside_s }) * th.rng.exponential()
            }
        };
        let idle = th.rng.next_f64();
        let idle_len = th.rng.next_f64();
        let id = if idle < IDLE_P {
            // Parked between requests: this call is the wait.
            dur_s = IDLE_MIN_S + (IDLE_MAX_S - IDLE_MIN_S) * idle_len;
            self.park
        } else {
            ty.id
        };
        if let (Some(onset), Some(f)) = (th.onset_ns, self.fault.as_ref()) {
            if at >= onset && f.scope.covers(id) {
                dur_s *= positive_or_one(f.duration_multiplier);
                gap_s /= positive_or_one(f.rate_multiplier);
            }
        }
        Some((id, secs_to_ns(dur_s).max(1), secs_to_ns(gap_s)))
    }
}

impl Iterator for Stream {
    type Item = SyscallEvent;

    fn next(&mut self) -> Option<SyscallEvent> {
        loop {
            let Reverse((ts, idx)) = *self.heap.peek()?;
            let i = idx as usize;
            let pending = self.threads.get_mut(i).and_then(|t| t.pending_exit.take());
            if let Some(id) = pending {
                // Exit of the call in flight: the next call starts after the gap drawn with it.
                let tid = self.threads.get(i).map(|t| t.tid).unwrap_or(0);
                let next = ts.saturating_add(self.pending_gap(i));
                self.reschedule(next);
                return Some(SyscallEvent::exit(self.pid, tid, id, ts, Some(0)));
            }
            let Some((id, dur, gap)) = self.draw_call(i, ts) else {
                self.heap.pop();
                continue;
            };
            let tid = self.threads.get(i).map(|t| t.tid).unwrap_or(0);
            return Some(match self.shape {
                EventShape::Complete => {
                    self.reschedule(ts.saturating_add(dur).saturating_add(gap));
                    SyscallEvent::complete(self.pid, tid, id, ts, dur)
                }
                EventShape::EnterExit => {
                    if let Some(t) = self.threads.get_mut(i) {
                        t.pending_exit = Some(id);
                        t.stashed_gap_ns = gap;
                    }
                    // The exit is emitted even past the end so every enter is paired.
                    self.replace_top(ts.saturating_add(dur));
                    SyscallEvent::enter(self.pid, tid, id, ts)
                }
            });
        }
    }
}

impl Stream {
    /// Moves the top thread to `next`, or retires it when `next` is past the end.
    fn reschedule(&mut self, next: u64) {
        if next < self.end_ns {
            self.replace_top(next);
        } else {
            self.heap.pop();
        }
    }

    fn replace_top(&mut self, next: u64) {
        if let Some(mut top) = self.heap.peek_mut() {
            top.0 .0 = next;
        }
    }

    fn pending_gap(&mut self, i: usize) -> u64 {
        self.threads
            .get_mut(i)
            .map(|t| std::mem::take(&mut t.stashed_gap_ns))
            .unwrap_or(0)
    }
}

/// Share of `events` whose thread is one of the `within` distinct threads seen most
/// recently before it (`within = 1`: the same thread as the event before). How much
/// thread locality a stream has decides whether per-thread state stays in cache, so the
/// benchmark prints it next to the rates (and it can be compared with real traces).
pub fn thread_locality(events: &[SyscallEvent], within: usize) -> f64 {
    if events.is_empty() || within == 0 {
        return 0.0;
    }
    // Most recent last; only the last `within` matter.
    let mut recent: Vec<u32> = Vec::with_capacity(within + 1);
    let mut hits = 0usize;
    for ev in events {
        if let Some(i) = recent.iter().rposition(|&t| t == ev.tid) {
            hits += 1;
            recent.remove(i);
        } else if recent.len() == within {
            recent.remove(0);
        }
        recent.push(ev.tid);
    }
    hits as f64 / events.len() as f64
}

/// Per-thread burst gaps for a thread whose mean gap is `mean_gap_s`: a burst of mean
/// length B (geometric) spends (B − 1) inner gaps per B calls, and the thread is inside a
/// burst a share `concurrency / threads` of its time, so that `concurrency` threads are on
/// average mid-burst; the gap after a burst makes up the rest of the mean.
fn burst_gaps(b: &BurstSpec, mean_gap_s: f64, threads: u32) -> (f64, f64, f64) {
    let calls = if b.mean_calls.is_finite() {
        b.mean_calls.max(1.0)
    } else {
        1.0
    };
    let busy = positive_or_one(b.concurrency) / f64::from(threads.max(1));
    let per_burst = calls * mean_gap_s;
    let inside = if calls > 1.0 {
        (busy.min(1.0) * per_burst / (calls - 1.0)).min(mean_gap_s)
    } else {
        0.0
    };
    let after = per_burst - (calls - 1.0) * inside;
    (1.0 / calls, inside, after)
}

fn positive_or_one(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        1.0
    }
}

fn pick_role(mut u: f64) -> u8 {
    for (i, r) in ROLES.iter().enumerate() {
        if u < r.share {
            return i as u8;
        }
        u -= r.share;
    }
    0
}

/// The first `n` pool names the engine's tables know, deduplicated by id.
fn resolve_types(n: u16) -> Vec<ResolvedType> {
    let want = usize::from(n.max(1));
    let mut out: Vec<ResolvedType> = Vec::with_capacity(want);
    for m in POOL {
        if out.len() >= want {
            break;
        }
        let id = SyscallId::from_name(m.name);
        if id == SyscallId::UNKNOWN || out.iter().any(|r| r.id == id) {
            continue;
        }
        out.push(ResolvedType {
            id,
            mu: ln(m.median_ns * 1e-9),
            sigma: m.sigma,
            tail_p: m.tail_p,
        });
    }
    if out.is_empty() {
        // Tables know none of the pool: still produce a stream, of unknown calls.
        out.push(ResolvedType {
            id: SyscallId::UNKNOWN,
            mu: ln(2e-6),
            sigma: 1.0,
            tail_p: 0.0,
        });
    }
    out
}

fn role_cdf(role: &Role, types: &[ResolvedType]) -> Vec<f64> {
    let mut acc = 0.0;
    types
        .iter()
        .map(|ty| {
            let w = role
                .core
                .iter()
                .find(|(name, _)| SyscallId::from_name(name) == ty.id)
                .map(|(_, w)| *w)
                .unwrap_or(BACKGROUND_WEIGHT);
            acc += w;
            acc
        })
        .collect()
}

/// Per thread index, its fault onset (a seeded subset of exactly round(fraction · threads)).
fn fault_onsets(spec: &StreamSpec) -> Vec<Option<u64>> {
    let n = spec.threads as usize;
    let mut out = vec![None; n];
    let Some(f) = spec.fault.as_ref() else {
        return out;
    };
    let frac = if f.affected_fraction.is_finite() {
        f.affected_fraction.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let k = ((n as f64) * frac).round() as usize;
    let mut rng = SplitMix64::new(spec.seed ^ 0xFA17_0000_0000_0001);
    let mut order: Vec<usize> = (0..n).collect();
    // Partial Fisher–Yates: the first k of `order` are the affected threads.
    for i in 0..k.min(n) {
        let span = (n - i) as u64;
        let j = i + (rng.next_u64() % span) as usize;
        order.swap(i, j);
    }
    let start = spec
        .start_ns
        .saturating_add(secs_to_ns(f.start_seconds.max(0.0)));
    let spread = if f.onset_spread_seconds.is_finite() {
        f.onset_spread_seconds.max(0.0)
    } else {
        0.0
    };
    for &t in order.iter().take(k) {
        let onset = start.saturating_add(secs_to_ns(spread * rng.next_f64()));
        if let Some(slot) = out.get_mut(t) {
            *slot = Some(onset);
        }
    }
    out
}

/// Seconds to nanoseconds; `as` saturates, so absurd values cannot wrap.
fn secs_to_ns(s: f64) -> u64 {
    (s * 1e9) as u64
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64: tiny, fast, and identical on every target.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        // Start from a *mixed* seed: SplitMix64 walks its state in steps of GOLDEN, so
        // raw states `seed ^ (i + 1)·GOLDEN` would make thread i's draws a shifted copy of
        // thread 0's (they did: a bursty stream's total rate came out 5 % off).
        let z = Self(seed).next_u64();
        Self(z)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Exponential with mean 1.
    fn exponential(&mut self) -> f64 {
        -ln(1.0 - self.next_f64())
    }

    /// Standard normal (Marsaglia's polar method: only `ln` and `sqrt`).
    fn normal(&mut self) -> f64 {
        loop {
            let u = 2.0 * self.next_f64() - 1.0;
            let v = 2.0 * self.next_f64() - 1.0;
            let s = u * u + v * v;
            if s > 0.0 && s < 1.0 {
                return u * (-2.0 * ln(s) / s).sqrt();
            }
        }
    }
}

const LN2: f64 = std::f64::consts::LN_2;

/// Natural log from basic operations only (platform `ln` may differ in the last bit).
/// Accurate to ~1e-10 relative, plenty for synthetic durations.
fn ln(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x.is_infinite() {
        return x;
    }
    // Subnormals: scale into the normal range first.
    let (x, bias) = if x < f64::MIN_POSITIVE {
        (x * (1u64 << 54) as f64, -54)
    } else {
        (x, 0)
    };
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023 + bias;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let series = 1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (1.0 / 9.0))));
    e as f64 * LN2 + 2.0 * s * series
}

/// e^x from basic operations only (see [`ln`]).
fn exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > 709.0 {
        return f64::INFINITY;
    }
    if x < -708.0 {
        return 0.0;
    }
    let k = (x / LN2 + if x >= 0.0 { 0.5 } else { -0.5 }) as i64;
    let r = x - k as f64 * LN2;
    let mut term = 1.0;
    let mut sum = 1.0;
    for i in 1..=12 {
        term *= r / i as f64;
        sum += term;
    }
    sum * f64::from_bits(((k + 1023) as u64) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;

    fn small(shape: EventShape, fault: Option<FaultSpec>) -> StreamSpec {
        StreamSpec {
            threads: 40,
            seconds: 3.0,
            calls_per_thread_per_second: 300.0,
            seed: 7,
            shape,
            fault,
            ..StreamSpec::default()
        }
    }

    #[test]
    fn same_seed_same_events_other_seed_other_events() {
        for shape in [EventShape::Complete, EventShape::EnterExit] {
            let a: Vec<_> = generate(&small(shape, None)).collect();
            let b: Vec<_> = generate(&small(shape, None)).collect();
            assert!(!a.is_empty());
            assert_eq!(a, b);
            let c: Vec<_> = generate(&StreamSpec {
                seed: 8,
                ..small(shape, None)
            })
            .collect();
            assert_ne!(a, c);
        }
    }

    #[test]
    fn events_are_time_ordered_and_within_bounds() {
        for shape in [EventShape::Complete, EventShape::EnterExit] {
            let spec = small(shape, None);
            let ev: Vec<_> = generate(&spec).collect();
            assert!(ev.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
            let end = spec.start_ns + secs_to_ns(spec.seconds);
            assert!(ev
                .iter()
                .filter(|e| e.kind != EventKind::Exit)
                .all(|e| e.ts_ns >= spec.start_ns && e.ts_ns < end));
            assert!(ev
                .iter()
                .all(|e| e.tid >= spec.pid && e.tid < spec.pid + spec.threads));
        }
    }

    #[test]
    fn enter_exit_halves_pair_up_per_thread() {
        let ev: Vec<_> = generate(&small(EventShape::EnterExit, None)).collect();
        let mut open: std::collections::HashMap<u32, (SyscallId, u64)> = Default::default();
        for e in &ev {
            match e.kind {
                EventKind::Enter => assert!(open.insert(e.tid, (e.syscall, e.ts_ns)).is_none()),
                EventKind::Exit => {
                    let (id, at) = open.remove(&e.tid).expect("exit without enter");
                    assert_eq!(id, e.syscall);
                    assert!(e.ts_ns > at);
                }
                EventKind::Complete
                | EventKind::OnCpu
                | EventKind::OffCpu
                | EventKind::Lost
                | EventKind::Counters
                | EventKind::TcpSegments => {
                    panic!("{:?} record in EnterExit shape", e.kind)
                }
            }
        }
        assert!(open.is_empty(), "every enter gets its exit");
    }

    #[test]
    fn rate_matches_spec_roughly() {
        let spec = small(EventShape::Complete, None);
        let n = generate(&spec).count() as f64;
        let expected = spec.threads as f64 * spec.seconds * spec.calls_per_thread_per_second;
        // Personal factors average 1.25 and durations/idle gaps slow threads a little.
        assert!(
            n > 0.5 * expected && n < 2.0 * expected,
            "{n} vs {expected}"
        );
    }

    #[test]
    fn fault_slows_only_affected_threads_after_onset() {
        let fault = FaultSpec {
            start_seconds: 1.0,
            affected_fraction: 0.25,
            onset_spread_seconds: 0.5,
            duration_multiplier: 10.0,
            rate_multiplier: 1.0,
            scope: FaultScope::AllSyscalls,
        };
        let clean_spec = small(EventShape::Complete, None);
        let fault_spec = small(EventShape::Complete, Some(fault));
        let truth = generate(&fault_spec).affected().to_vec();
        assert_eq!(truth.len(), 10, "round(0.25 · 40) threads hit");
        let onset_of = |tid: u32| truth.iter().find(|(t, _)| *t == tid).map(|(_, o)| *o);
        let start = clean_spec.start_ns;
        assert!(truth
            .iter()
            .all(|&(_, o)| o >= start + 1_000_000_000 && o <= start + 1_500_000_000));

        let clean: Vec<_> = generate(&clean_spec).collect();
        let faulty: Vec<_> = generate(&fault_spec).collect();
        let per_thread = |ev: &[SyscallEvent], tid: u32| -> Vec<SyscallEvent> {
            ev.iter().filter(|e| e.tid == tid).copied().collect()
        };
        for tid in clean_spec.pid..clean_spec.pid + clean_spec.threads {
            let a = per_thread(&clean, tid);
            let b = per_thread(&faulty, tid);
            match onset_of(tid) {
                None => assert_eq!(a, b, "unaffected thread {tid} unchanged"),
                Some(onset) => {
                    let before = |v: &[SyscallEvent]| -> Vec<SyscallEvent> {
                        v.iter().filter(|e| e.ts_ns < onset).copied().collect()
                    };
                    assert_eq!(
                        before(&a),
                        before(&b),
                        "thread {tid} unchanged before onset"
                    );
                    // Same call sequence, so k-th calls after onset compare one to one.
                    let after_a: Vec<_> = a.iter().filter(|e| e.ts_ns >= onset).collect();
                    let after_b: Vec<_> = b.iter().filter(|e| e.ts_ns >= onset).collect();
                    assert!(!after_b.is_empty());
                    for (x, y) in after_a.iter().zip(&after_b) {
                        assert_eq!(x.syscall, y.syscall);
                        // Truncation to whole nanoseconds: within 1 ns before scaling.
                        let (dx, dy) = (x.duration_ns as f64, y.duration_ns as f64);
                        assert!((dy - 10.0 * dx).abs() <= 11.0, "{dx} -> {dy}");
                    }
                }
            }
        }
    }

    #[test]
    fn rate_multiplier_adds_calls_to_affected_threads() {
        let fault = FaultSpec {
            start_seconds: 0.5,
            affected_fraction: 0.5,
            onset_spread_seconds: 0.0,
            duration_multiplier: 1.0,
            rate_multiplier: 4.0,
            scope: FaultScope::AllSyscalls,
        };
        let spec = small(EventShape::Complete, Some(fault));
        let stream = generate(&spec);
        let hit: Vec<u32> = stream.affected().iter().map(|(t, _)| *t).collect();
        let ev: Vec<_> = stream.collect();
        let clean: Vec<_> = generate(&small(EventShape::Complete, None)).collect();
        let count =
            |v: &[SyscallEvent], f: &dyn Fn(u32) -> bool| v.iter().filter(|e| f(e.tid)).count();
        let hit_clean = count(&clean, &|t| hit.contains(&t));
        let hit_fault = count(&ev, &|t| hit.contains(&t));
        assert!(hit_fault as f64 > 2.0 * hit_clean as f64);
        assert_eq!(
            count(&clean, &|t| !hit.contains(&t)),
            count(&ev, &|t| !hit.contains(&t))
        );
    }

    #[test]
    fn only_scope_touches_only_listed_calls() {
        let futex = SyscallId::from_name("futex");
        let fault = FaultSpec {
            start_seconds: 0.0,
            affected_fraction: 1.0,
            onset_spread_seconds: 0.0,
            duration_multiplier: 3.0,
            rate_multiplier: 1.0,
            scope: FaultScope::Only(vec![futex]),
        };
        let clean: Vec<_> = generate(&small(EventShape::Complete, None)).collect();
        let faulty: Vec<_> = generate(&small(EventShape::Complete, Some(fault))).collect();
        let durs = |v: &[SyscallEvent], want: bool| -> Vec<(u32, u64)> {
            let mut d: Vec<_> = v
                .iter()
                .filter(|e| (e.syscall == futex) == want)
                .map(|e| (e.tid, e.duration_ns))
                .collect();
            d.sort_unstable();
            d
        };
        let (a, b) = (durs(&clean, true), durs(&faulty, true));
        assert!(!a.is_empty());
        let sum = |v: &[(u32, u64)]| v.iter().map(|x| x.1 as f64).sum::<f64>();
        assert!(sum(&b) > 2.5 * sum(&a));
        // Other calls keep their duration distribution (timing shifts, not lengths).
        let (c, d) = (durs(&clean, false), durs(&faulty, false));
        let mean = |v: &[(u32, u64)]| sum(v) / v.len().max(1) as f64;
        assert!((mean(&c) / mean(&d) - 1.0).abs() < 0.3);
    }

    #[test]
    fn streams_use_the_requested_number_of_real_syscall_types() {
        let spec = StreamSpec {
            threads: 200,
            seconds: 2.0,
            ..StreamSpec::default()
        };
        let mut ids: Vec<SyscallId> = generate(&spec).map(|e| e.syscall).collect();
        ids.sort_unstable();
        ids.dedup();
        let resolved = resolve_types(spec.syscall_types).len();
        assert!(ids.len() <= resolved && ids.len() + 5 >= resolved);
        assert!(!ids.contains(&SyscallId::UNKNOWN) || resolved == 1);
        assert!(ids.iter().all(|id| SyscallId::from_name(id.name()) == *id));
    }

    #[test]
    fn math_helpers_match_std_closely() {
        for &x in &[1e-300, 1e-9, 0.001, 0.37, 1.0, 2.5, 1e6, 1e300] {
            let (a, b) = (ln(x), x.ln());
            assert!(
                (a - b).abs() <= 1e-9 * b.abs().max(1.0),
                "ln({x}) {a} vs {b}"
            );
        }
        for &x in &[-700.0, -20.0, -1.0, -1e-3, 0.0, 0.5, 3.0, 50.0, 700.0] {
            let (a, b) = (exp(x), x.exp());
            assert!(((a - b) / b).abs() < 1e-9, "exp({x}) {a} vs {b}");
        }
    }

    #[test]
    fn degenerate_specs_do_not_panic() {
        assert_eq!(
            generate(&StreamSpec {
                threads: 0,
                ..StreamSpec::default()
            })
            .count(),
            0
        );
        let odd = StreamSpec {
            threads: 3,
            syscall_types: 0,
            seconds: 0.2,
            calls_per_thread_per_second: f64::NAN,
            fault: Some(FaultSpec {
                affected_fraction: f64::INFINITY,
                duration_multiplier: -1.0,
                rate_multiplier: f64::NAN,
                onset_spread_seconds: f64::NAN,
                ..FaultSpec::default()
            }),
            ..StreamSpec::default()
        };
        let _ = generate(&odd).count();
        let odd_burst = StreamSpec {
            threads: 3,
            seconds: 0.2,
            burst: Some(BurstSpec {
                mean_calls: f64::NAN,
                concurrency: -2.0,
            }),
            ..StreamSpec::default()
        };
        let _ = generate(&odd_burst).count();
    }

    #[test]
    fn bursts_give_thread_locality_at_the_same_rate() {
        let base = StreamSpec {
            threads: 2000,
            seconds: 40.0,
            calls_per_thread_per_second: 5.0,
            ..StreamSpec::default()
        };
        let bursty = StreamSpec {
            burst: Some(BurstSpec {
                mean_calls: 8.0,
                concurrency: 4.0,
            }),
            ..base.clone()
        };
        let plain: Vec<_> = generate(&base).collect();
        let runs: Vec<_> = generate(&bursty).collect();
        // Same mean rate (each thread keeps its mean gap): within 10 %.
        let ratio = runs.len() as f64 / plain.len() as f64;
        assert!(
            (0.9..1.1).contains(&ratio),
            "rate ratio {ratio} {} {}",
            runs.len(),
            plain.len()
        );
        // Random interleaving of 2,000 threads: almost never the same thread twice in a row.
        assert!(thread_locality(&plain, 8) < 0.05);
        // Bursts of 8 calls among ~4 busy threads: most events come from a recent thread.
        let near = thread_locality(&runs, 8);
        assert!(near > 0.6, "locality {near}");
        assert!(thread_locality(&runs, 1) < near);
        assert!(runs.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns));
    }

    #[test]
    fn locality_of_known_sequences() {
        let ev = |tid| SyscallEvent::complete(1, tid, SyscallId(0), 0, 1);
        let seq: Vec<_> = [1, 1, 2, 1, 3, 2].into_iter().map(ev).collect();
        // Within 1: only the second event (1 after 1).
        assert!((thread_locality(&seq, 1) - 1.0 / 6.0).abs() < 1e-12);
        // Within 2: also 1 after [1, 2]; 2 after [3, 1] is a miss.
        assert!((thread_locality(&seq, 2) - 2.0 / 6.0).abs() < 1e-12);
        // Within 3: 2 after [1, 3] ... [2, 1, 3] holds it.
        assert!((thread_locality(&seq, 3) - 3.0 / 6.0).abs() < 1e-12);
        assert_eq!(thread_locality(&[], 4), 0.0);
    }
}
