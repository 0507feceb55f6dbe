//! On-CPU time per thread, from the scheduler's own accounting ([`EventKind::OnCpu`]
//! records, such as perf's `sched:sched_stat_runtime`, and [`EventKind::OffCpu`] records,
//! perf's `sched:sched_switch`), and the *CPU burner* test.
//!
//! Syscall timing cannot tell a thread that burns a CPU in its own code from one that
//! waits for a CPU it cannot get: both sit outside any call (measured in
//! `EVALUATION.md`, "Out-of-call share": CPU caps put up to 13 % of the active threads
//! there, inside the range of the runaway loops). The scheduler's account can. A runaway
//! loop or a busy retry in the service makes a few of its own threads run nearly all of
//! the time; an environment fault never does: a CPU cap or a co-located hog takes CPU
//! *away* from the service's threads, and disk, memory and network faults make them
//! wait. So a thread that runs most of the wall-clock time after the onset, several times
//! its share before, is evidence of an internal fault whatever τ says (every other thread
//! slows down because the burner holds the CPU, which is why τ reads external).
//!
//! A runaway split over more threads than the CPUs they share (six spinning Apache
//! workers on one CPU) gives each only a sixth of it, no more than memory thrashing
//! gives each thread that pages (direct reclaim is charged to the faulting thread). What
//! tells them apart is how they leave the CPU: a spinner never blocks, so every switch
//! away is a preemption; a thrashing thread blocks in page-in I/O. So a thread whose
//! share rose, if under `burner_share`, still burns when almost all its switches away
//! were preemptions ([`BurnerTest::spins`]).
//!
//! The same records also say who took the CPU when a thread left it. Before a co-located
//! hog, a server thread that blocks mostly leaves its CPU idle; under the hog the CPU
//! never goes idle, and a third of the switches away hand it to the hog's processes
//! (measured on Apache, MariaDB and PostgreSQL, `EVALUATION.md`). A runaway loop in the
//! service also leaves no idle CPU, but hands it to the service's own threads. So switches
//! that hand the CPU to *another process* far more than before are evidence of an
//! environment fault whatever τ says ([`NeighbourTest`]), the mirror of the burner.
//!
//! Who got the CPU also says whether the CPU was the scarce resource at all. Before a
//! co-located hog, a server thread that blocks leaves its CPU idle in half or more of its
//! switches away; under the hog, or a runaway loop, never (measured on Apache, MariaDB
//! and PostgreSQL: 0.46–0.79 before, 0.00–0.03 under eight CPU hogs or a runaway query).
//! A disk writer, a memory cap or packet loss makes the threads wait, and the CPU still goes
//! idle (0.35–0.75 after; not under a memory cap whose reclaim runs in kernel workers,
//! which take the CPU as a hog would). So an anomaly during which the CPU stopped going idle, and
//! another process got it, is a CPU-scheduling matter whichever calls slowed: under a hog,
//! blocking calls such as `fdatasync` grow by the time their threads wait for the CPU
//! after the disk answered, and their syscall class (disk) would point the wrong way
//! ([`SaturationTest`]).
//!
//! How a thread left its CPU also says when a CPU quota stopped it. The scheduler preempts
//! a runnable thread to run another task; it leaves the CPU idle instead when the thread's
//! group has used up its quota. Such switches are absent without a quota and 5–9 % of all
//! switches away under the caps that hurt a client (measured on Apache, MariaDB, nginx and
//! PostgreSQL), so an anomaly during which they appeared is the environment whatever τ
//! says ([`ThrottleTest`]).
//!
//! How a thread blocked says where it waited. Uninterruptibly (`D`) inside a call, it
//! waits for the call's own I/O; uninterruptibly *between* calls, in practice for a page
//! fault (a page reclaim evicted, read back; a few kernel paths on the way back to user
//! space block so too, see `docs/configuration.md`). A memory limit below the working set makes most
//! of the threads' waits such faults (PostgreSQL under a cgroup limit: 2 → 11,474 in
//! 30 s), and which calls slowed then misleads (reclaim's kernel workers take the CPU as
//! a hog would, so the CPU tests fire). So an anomaly during which they rose is a memory
//! matter ([`PagingTest`]). It needs call halves: a source of complete calls cannot say
//! whether a switch fell inside a call.
//!
//! Memory: [`CpuBins`] is 2,056 bytes, allocated only for threads that have such records.
//!
//! [`EventKind::OnCpu`]: crate::event::EventKind::OnCpu
//! [`EventKind::OffCpu`]: crate::event::EventKind::OffCpu

use serde::{Deserialize, Serialize};

use crate::thread::{ring_seek, RING_BINS};

/// One activity bin of a thread's CPU account: 8 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct CpuBin {
    /// Share of the bin's wall-clock time on a CPU, in units of 1/[`CpuBins::FULL`].
    units: u16,
    /// Switches away while still runnable (saturating).
    preempted: u8,
    /// Switches away to wait (saturating).
    blocked: u8,
    /// Switches away, of either kind, that handed the CPU to another process's task
    /// (saturating).
    foreign: u8,
    /// Switches away, of either kind, that left the CPU idle (saturating).
    idle: u8,
    /// Preemptions that left the CPU idle (saturating): the thread could run and nothing
    /// else wanted the CPU, so a CPU quota stopped it (see [`ThrottleTest`]).
    throttled: u8,
    /// Switches away, blocked uninterruptibly outside any call (saturating): waits in a
    /// page fault (see [`PagingTest`]).
    paging: u8,
}

/// On-CPU share and switches away per bin over the last [`RING_BINS`] bins (the engine's
/// activity bins), in constant memory.
///
/// A bin's share is full at most: a thread runs on one CPU at a time (more only when
/// records overlap, and then it saturates).
#[derive(Clone, Copy, Debug)]
pub struct CpuBins {
    latest: u64,
    bins: [CpuBin; 256],
}

impl Default for CpuBins {
    fn default() -> Self {
        Self {
            latest: 0,
            bins: [CpuBin::default(); 256],
        }
    }
}

/// Switches away from the CPU over a span of bins.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Switches {
    pub preempted: u64,
    pub blocked: u64,
    /// Of those, switches that handed the CPU to another process's task.
    pub foreign: u64,
    /// Of those, switches that left the CPU idle.
    pub idle: u64,
    /// Of those, preemptions that left the CPU idle: throttled by a CPU quota.
    pub throttled: u64,
    /// Of the blocked, those blocked uninterruptibly outside any call: waits in a page
    /// fault.
    pub paging: u64,
    /// Threads with such a wait in the span (summed over threads, each counts once).
    pub paging_threads: u64,
}

impl Switches {
    /// All switches away.
    pub fn total(&self) -> u64 {
        self.preempted + self.blocked
    }

    /// `n` as a share of all switches away (0 with none).
    fn share(&self, n: u64) -> f64 {
        match self.total() {
            0 => 0.0,
            all => n as f64 / all as f64,
        }
    }

    /// Share of the switches away that were preemptions (0 with none).
    pub fn preempted_share(&self) -> f64 {
        self.share(self.preempted)
    }

    /// Share of the switches away that handed the CPU to another process (0 with none).
    pub fn foreign_share(&self) -> f64 {
        self.share(self.foreign)
    }

    /// Share of the switches away that left the CPU idle (0 with none).
    pub fn idle_share(&self) -> f64 {
        self.share(self.idle)
    }

    /// Share of the switches away that were preemptions leaving the CPU idle (0 with
    /// none).
    pub fn throttled_share(&self) -> f64 {
        self.share(self.throttled)
    }

    /// Share of the blocking switches away that waited in a page fault (0 with none).
    pub fn paging_share(&self) -> f64 {
        match self.blocked {
            0 => 0.0,
            all => self.paging as f64 / all as f64,
        }
    }

    /// Sums two spans' counts.
    pub fn plus(self, o: Switches) -> Switches {
        Switches {
            preempted: self.preempted + o.preempted,
            blocked: self.blocked + o.blocked,
            foreign: self.foreign + o.foreign,
            idle: self.idle + o.idle,
            throttled: self.throttled + o.throttled,
            paging: self.paging + o.paging,
            paging_threads: self.paging_threads + o.paging_threads,
        }
    }
}

impl CpuBins {
    /// Units of a bin the thread ran through.
    pub const FULL: u64 = 60_000;

    /// Adds a run of `runtime_ns` that ended at `end_ns`, spread over the bins it covered
    /// (a scheduler record usually covers at most a tick; a long one is split).
    pub fn add(&mut self, end_ns: u64, runtime_ns: u64, bin_ns: u64) {
        let bin_ns = bin_ns.max(1);
        let start_ns = end_ns.saturating_sub(runtime_ns);
        let last = end_ns / bin_ns;
        // Older than the ring can hold: only the covered part inside it counts.
        let first = (start_ns / bin_ns).max(last.saturating_sub(RING_BINS - 1));
        for bin in first..=last {
            let lo = (bin * bin_ns).max(start_ns);
            let hi = bin.saturating_add(1).saturating_mul(bin_ns).min(end_ns);
            let part = hi.saturating_sub(lo);
            // ≤ bin_ns × FULL / bin_ns: no overflow for any bin width up to 2^48 ns.
            let units = (u128::from(part) * u128::from(Self::FULL) / u128::from(bin_ns)) as u64;
            if let Some(b) = self.bin_mut(bin) {
                b.units = u64::from(b.units)
                    .saturating_add(units)
                    .min(u64::from(u16::MAX)) as u16;
            }
        }
    }

    /// Counts a switch away from the CPU at `ts_ns`, and who got the CPU (the tests'
    /// shorthand for [`CpuBins::switch_as`]).
    #[cfg(test)]
    fn switch(&mut self, ts_ns: u64, preempted: bool, next: NextTask, bin_ns: u64) {
        let left = if preempted {
            Left::Preempted
        } else {
            Left::Blocked
        };
        self.switch_as(ts_ns, left, next, bin_ns);
    }

    /// Counts a switch away at `ts_ns` that left as `left`, and who got the CPU.
    pub fn switch_as(&mut self, ts_ns: u64, left: Left, next: NextTask, bin_ns: u64) {
        let preempted = left == Left::Preempted;
        if let Some(b) = self.bin_mut(ts_ns / bin_ns.max(1)) {
            let n = if preempted {
                &mut b.preempted
            } else {
                &mut b.blocked
            };
            // A page wait counts only with its blocking switch: past the blocked count's
            // saturation the share would grow with the waits alone.
            if left == Left::Paging && *n < u8::MAX {
                b.paging = b.paging.saturating_add(1);
            }
            *n = n.saturating_add(1);
            match next {
                NextTask::OtherProcess => b.foreign = b.foreign.saturating_add(1),
                NextTask::Idle => {
                    b.idle = b.idle.saturating_add(1);
                    if preempted {
                        b.throttled = b.throttled.saturating_add(1);
                    }
                }
                NextTask::Own | NextTask::Unknown => {}
            }
        }
    }

    fn bin_mut(&mut self, bin: u64) -> Option<&mut CpuBin> {
        if !ring_seek(&mut self.bins, &mut self.latest, bin) {
            return None;
        }
        self.bins.get_mut((bin % RING_BINS) as usize)
    }

    /// The bins of `[lo, hi]` the ring still holds (none after the latest record).
    fn span(&self, lo: u64, hi: u64) -> impl Iterator<Item = &CpuBin> {
        let hi = hi.min(self.latest);
        let lo = lo.max(self.latest.saturating_sub(RING_BINS - 1));
        (lo..=hi).filter_map(move |b| self.bins.get((b % RING_BINS) as usize))
    }

    /// Share of the wall-clock time of bins `[lo, hi]` the thread ran (0 for bins older
    /// than the ring or after the latest record).
    pub fn share(&self, lo: u64, hi: u64) -> f64 {
        if hi < lo {
            return 0.0;
        }
        let bins = (hi - lo + 1) as f64;
        let units: u64 = self.span(lo, hi).map(|b| u64::from(b.units)).sum();
        units as f64 / (bins * Self::FULL as f64)
    }

    /// Switches away from the CPU in bins `[lo, hi]`.
    pub fn switches(&self, lo: u64, hi: u64) -> Switches {
        let s = self
            .span(lo, hi)
            .fold(Switches::default(), |s, b| Switches {
                preempted: s.preempted + u64::from(b.preempted),
                blocked: s.blocked + u64::from(b.blocked),
                foreign: s.foreign + u64::from(b.foreign),
                idle: s.idle + u64::from(b.idle),
                throttled: s.throttled + u64::from(b.throttled),
                paging: s.paging + u64::from(b.paging),
                paging_threads: 0,
            });
        Switches {
            paging_threads: u64::from(s.paging > 0),
            ..s
        }
    }
}

/// A thread that ran most of the time after the onset, far more than before, or that
/// rose to a smaller share but never blocked (a spinner sharing its CPU).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Burner {
    pub tid: u32,
    /// On-CPU share of the wall-clock time before the onset (the baseline span).
    pub share_before: f64,
    /// On-CPU share after the onset.
    pub share_after: f64,
    /// Share of its switches away from the CPU after the onset that were preemptions
    /// (absent when the source has no switch records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_share: Option<f64>,
}

/// Thresholds of the burner test (see [`crate::params::Params::burner_share`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BurnerTest {
    /// Minimum on-CPU share after the onset.
    pub share: f64,
    /// Minimum ratio of the share after to the share before.
    pub rise: f64,
    /// Minimum on-CPU share after the onset of a spinner.
    pub spin_share: f64,
    /// Minimum share of a spinner's switches away that were preemptions.
    pub spin_preempted: f64,
    /// Minimum preemptions of a spinner over the span after the onset: a thread switched
    /// away twice is no evidence either way.
    pub spin_min_preemptions: u64,
}

impl BurnerTest {
    /// Whether shares `before` → `after` make a burner.
    pub fn burns(&self, before: f64, after: f64) -> bool {
        after >= self.share && after >= self.rise * before
    }

    /// Whether shares `before` → `after`, with `switches` away after, make a spinner.
    pub fn spins(&self, before: f64, after: f64, switches: Switches) -> bool {
        self.spin_share > 0.0
            && after >= self.spin_share
            && after >= self.rise * before
            && switches.preempted >= self.spin_min_preemptions.max(1)
            && switches.preempted_share() >= self.spin_preempted
    }
}

/// How a thread left its CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Left {
    /// Still runnable.
    Preempted,
    /// To wait.
    Blocked,
    /// To wait in a page fault: blocked uninterruptibly outside any call.
    Paging,
}

/// Who got the CPU when a thread of the target left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextTask {
    /// A task of another process.
    OtherProcess,
    /// One of the target's own threads.
    Own,
    /// The CPU's idle task: nothing else wanted the CPU.
    Idle,
    /// The source does not say.
    Unknown,
}

/// Whether the CPU was the scarce resource after the onset: the target's threads left
/// their CPU idle often before (at least [`SaturationTest::IDLE_BEFORE`] of their switches
/// away) and next to never after (at most [`SaturationTest::IDLE_AFTER`]), and another
/// process got it (at least the neighbour test's `share` of the switches). Measured (see
/// the module doc): 0.47–0.79 → 0.00–0.03 under CPU hogs (runaway loops 0.46–0.76 →
/// 0.00); disk, memory and network faults 0.35–0.75 after. Constants, not parameters: they separate "often" from "never",
/// 8–10× apart on every recording, not a tuned threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SaturationTest {
    /// Minimum share of switches away that handed the CPU to another process after.
    pub foreign: f64,
    /// Minimum switches away after the onset.
    pub min_switches: u64,
}

impl SaturationTest {
    /// Idle share of the switches away before the onset that says the CPU was not scarce.
    pub const IDLE_BEFORE: f64 = 0.2;
    /// Idle share after the onset that says it was.
    pub const IDLE_AFTER: f64 = 0.05;

    /// Whether the target's switches away `before` → `after` say the CPU became scarce
    /// and other processes took it.
    pub fn saturated(&self, idle_before: f64, after: Switches) -> bool {
        self.foreign > 0.0
            && after.total() >= self.min_switches.max(1)
            && idle_before >= Self::IDLE_BEFORE
            && after.idle_share() <= Self::IDLE_AFTER
            && after.foreign_share() >= self.foreign
    }
}

/// Whether a CPU quota throttled the target after the onset: its threads were switched
/// away while still runnable, with nothing else to run on their CPU. The scheduler
/// preempts a runnable thread for another task; it leaves the CPU idle instead only when
/// the thread's group has used up its quota (cgroup `cpu.max`, a container's CPU limit:
/// the CFS bandwidth controller dequeues the group until the next period). So such
/// switches are next to absent without a quota and common under one, and a quota is the
/// environment whatever τ says: it stops every thread at once, but only when the group
/// runs out, so busy threads meet it at different times and τ can read like a bug
/// (MariaDB under a marginal cap read internal, τ 0.57, see EVALUATION.md, session 14).
/// Real-time throttling (`sched_rt_runtime_us`) and core scheduling's forced idle also
/// idle a CPU under a runnable thread; both are the host's doing too. Constants, not
/// parameters: measured in EVALUATION.md, session 38.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThrottleTest {
    /// Minimum throttled switches after the onset: a few are no evidence either way.
    pub min_throttled: u64,
}

impl ThrottleTest {
    /// Minimum share of the switches away after the onset that were throttled.
    pub const SHARE: f64 = 0.02;
    /// Minimum ratio of that share to the share before.
    pub const RISE: f64 = 4.0;

    /// Whether the target's throttled share before (`share_before`) and switches away
    /// after say a CPU quota throttled it.
    pub fn throttled(&self, share_before: f64, after: Switches) -> bool {
        rose(
            after.throttled,
            self.min_throttled,
            after.throttled_share(),
            Self::SHARE,
            Self::RISE * share_before,
        )
    }
}

/// Whether `count` switches of a kind (at least `min`, and 1), a `share` of the switches
/// at least `floor` and `risen_from` (the share before times the rise), say the kind rose:
/// the shape of the quota and paging tests.
fn rose(count: u64, min: u64, share: f64, floor: f64, risen_from: f64) -> bool {
    count >= min.max(1) && share >= floor && share >= risen_from
}

/// Whether the target's threads waited in page faults after the onset: they blocked
/// uninterruptibly (`D`) outside any call. In a call, such a wait is the call's own I/O
/// (a disk read, a flush); between calls, in practice only a fault on the thread's own
/// memory blocks it so: a major fault reading back a page that reclaim evicted, its
/// mapped file's or a swapped one's. Under a memory limit below the working set that is most of what the
/// threads wait for, and which calls then slowed says little (the faults land between
/// them; reclaim's kernel workers take the CPU as a hog would). Constants, not
/// parameters: measured in EVALUATION.md, session 39.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PagingTest {
    /// Minimum page-fault waits after the onset: a few are no evidence either way.
    pub min_paging: u64,
}

impl PagingTest {
    /// Minimum share of the blocking switches away after the onset that waited in a
    /// page fault.
    pub const SHARE: f64 = 0.2;
    /// Minimum ratio of that share to the share before.
    pub const RISE: f64 = 4.0;
    /// Minimum page-fault waits per thread that waited in one: paging repeats, while a
    /// thread stopped from outside (a frozen cgroup) blocks so once and stays.
    pub const REPEAT: u64 = 2;

    /// Whether the target's paging share before (`share_before`) and switches away after
    /// say its threads waited in page faults.
    pub fn paging(&self, share_before: f64, after: Switches) -> bool {
        after.paging >= Self::REPEAT * after.paging_threads
            && rose(
                after.paging,
                self.min_paging,
                after.paging_share(),
                Self::SHARE,
                Self::RISE * share_before,
            )
    }
}

/// Thresholds of the test for other processes taking the target's CPU (see
/// [`crate::params::Params::neighbour_share`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NeighbourTest {
    /// Minimum share of the target's switches away after the onset that handed the CPU
    /// to another process.
    pub share: f64,
    /// Minimum ratio of that share to the share before.
    pub rise: f64,
    /// Minimum switches away after the onset: a few switches are no evidence either way.
    pub min_switches: u64,
}

impl NeighbourTest {
    /// Whether the target's switches away `before` → `after` say another process took
    /// its CPU.
    pub fn taken(&self, before: Switches, after: Switches) -> bool {
        let share = after.foreign_share();
        self.share > 0.0
            && after.total() >= self.min_switches.max(1)
            && share >= self.share
            && share >= self.rise * before.foreign_share()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BIN: u64 = 1_000_000_000;

    #[test]
    fn a_thread_running_throughout_fills_its_bins() {
        let mut c = CpuBins::default();
        // 4 ms ticks through bins 10..=11.
        let mut t = 10 * BIN + 4_000_000;
        while t <= 12 * BIN {
            c.add(t, 4_000_000, BIN);
            t += 4_000_000;
        }
        assert!((c.share(10, 11) - 1.0).abs() < 1e-3, "{}", c.share(10, 11));
        assert_eq!(c.share(5, 9), 0.0);
        // Half the span had no running at all.
        assert!((c.share(10, 13) - 0.5).abs() < 1e-3);
    }

    #[test]
    fn a_long_record_is_spread_over_the_bins_it_covered() {
        let mut c = CpuBins::default();
        c.add(3 * BIN + BIN / 2, 2 * BIN, BIN);
        assert!((c.share(1, 1) - 0.5).abs() < 1e-3);
        assert!((c.share(2, 2) - 1.0).abs() < 1e-3);
        assert!((c.share(3, 3) - 0.5).abs() < 1e-3);
    }

    #[test]
    fn old_bins_fall_out_and_overlaps_saturate() {
        let mut c = CpuBins::default();
        c.add(BIN / 2, BIN / 4, BIN);
        c.add(400 * BIN, BIN / 4, BIN);
        assert_eq!(c.share(0, 0), 0.0);
        assert!((c.share(399, 399) - 0.25).abs() < 1e-3);
        // A record far older than the ring changes nothing; absurd runtimes saturate.
        c.add(BIN, BIN / 2, BIN);
        c.add(400 * BIN, u64::MAX, BIN);
        assert!(c.share(399, 399) <= f64::from(u16::MAX) / CpuBins::FULL as f64);
        assert_eq!(c.share(0, 1), 0.0);
    }

    const TEST: BurnerTest = BurnerTest {
        share: 0.5,
        rise: 3.0,
        spin_share: 0.05,
        spin_preempted: 0.9,
        spin_min_preemptions: 6,
    };

    #[test]
    fn the_burner_test_needs_a_high_share_and_a_rise() {
        let t = TEST;
        assert!(t.burns(0.05, 0.9));
        assert!(!t.burns(0.05, 0.3), "not most of the time");
        assert!(!t.burns(0.4, 0.9), "it already ran that much");
    }

    #[test]
    fn switches_are_counted_per_bin_and_fall_out_with_the_ring() {
        let mut c = CpuBins::default();
        let next = |i: u64| match i % 4 {
            0 | 2 => NextTask::OtherProcess,
            1 => NextTask::Idle,
            _ => NextTask::Own,
        };
        for i in 0..10 {
            c.switch(5 * BIN + i, true, next(i), BIN);
        }
        c.switch(5 * BIN + 20, false, NextTask::Unknown, BIN);
        c.switch(6 * BIN, false, NextTask::OtherProcess, BIN);
        assert_eq!(
            c.switches(5, 5),
            Switches {
                preempted: 10,
                blocked: 1,
                foreign: 5,
                idle: 3,
                throttled: 3,
                ..Switches::default()
            }
        );
        assert!((c.switches(5, 5).idle_share() - 3.0 / 11.0).abs() < 1e-9);
        assert_eq!(c.switches(5, 6).foreign, 6);
        assert!((c.switches(5, 5).foreign_share() - 5.0 / 11.0).abs() < 1e-9);
        assert_eq!(c.switches(5, 6).blocked, 2);
        assert!((c.switches(5, 5).preempted_share() - 10.0 / 11.0).abs() < 1e-9);
        assert_eq!(Switches::default().preempted_share(), 0.0);
        // Counts saturate; a bin the ring moved past is cleared.
        for _ in 0..300 {
            c.switch(6 * BIN, true, NextTask::OtherProcess, BIN);
            c.switch(7 * BIN, false, NextTask::Idle, BIN);
            c.switch(8 * BIN, true, NextTask::Idle, BIN);
        }
        assert_eq!(c.switches(6, 6).foreign, 255);
        assert_eq!(c.switches(6, 6).preempted, 255);
        assert_eq!(c.switches(7, 7).idle, 255);
        assert_eq!(c.switches(8, 8).throttled, 255);
        c.switch(300 * BIN, false, NextTask::Own, BIN);
        assert_eq!(c.switches(0, 299), Switches::default());
        // A switch older than the ring changes nothing.
        c.switch(BIN, true, NextTask::Idle, BIN);
        assert_eq!(c.switches(0, 2), Switches::default());
    }

    #[test]
    fn only_a_preemption_into_an_idle_cpu_is_throttled() {
        let mut c = CpuBins::default();
        c.switch(5 * BIN, false, NextTask::Idle, BIN);
        c.switch(5 * BIN, true, NextTask::OtherProcess, BIN);
        c.switch(5 * BIN, true, NextTask::Own, BIN);
        c.switch(5 * BIN, true, NextTask::Unknown, BIN);
        assert_eq!(c.switches(5, 5).throttled, 0);
        c.switch(5 * BIN, true, NextTask::Idle, BIN);
        let s = c.switches(5, 5);
        assert_eq!((s.throttled, s.idle, s.preempted), (1, 2, 4));
        assert!((s.throttled_share() - 0.2).abs() < 1e-9);
    }

    #[test]
    fn the_quota_test_needs_enough_throttled_switches_and_a_rise() {
        let t = ThrottleTest { min_throttled: 3 };
        let after = |throttled: u64, total: u64| Switches {
            preempted: throttled,
            blocked: total - throttled,
            idle: throttled,
            throttled,
            ..Switches::default()
        };
        assert!(t.throttled(0.0, after(10, 100)));
        assert!(!t.throttled(0.0, after(2, 10)), "too few to say");
        assert!(!t.throttled(0.0, after(3, 1000)), "too small a share");
        assert!(
            !t.throttled(0.05, after(10, 100)),
            "it was throttled as much before"
        );
        assert!(!t.throttled(0.0, Switches::default()));
    }

    #[test]
    fn only_counted_page_waits_are_paging_and_their_share_is_of_blocking_switches() {
        let mut c = CpuBins::default();
        c.switch_as(5 * BIN, Left::Paging, NextTask::Idle, BIN);
        c.switch(5 * BIN, false, NextTask::Idle, BIN);
        c.switch(5 * BIN, true, NextTask::Own, BIN);
        c.switch(5 * BIN, true, NextTask::Own, BIN);
        let s = c.switches(5, 5);
        assert_eq!((s.paging, s.blocked, s.preempted), (1, 2, 2));
        assert_eq!(s.paging_threads, 1, "one thread's span");
        assert_eq!(s.plus(s).paging_threads, 2, "two threads' spans");
        assert!((s.paging_share() - 0.5).abs() < 1e-9, "of the 2 blocking");
        assert_eq!(Switches::default().paging_share(), 0.0);
        // Waits count only while their blocking switches do: 250 blocked, then 50 page
        // waits, of which 5 before the blocked count saturated.
        for i in 0..300 {
            let left = if i < 250 { Left::Blocked } else { Left::Paging };
            c.switch_as(6 * BIN, left, NextTask::Idle, BIN);
        }
        let s = c.switches(6, 6);
        assert_eq!((s.blocked, s.paging), (255, 5));
        for _ in 0..300 {
            c.switch_as(7 * BIN, Left::Paging, NextTask::Idle, BIN);
        }
        let s = c.switches(7, 7);
        assert_eq!((s.blocked, s.paging), (255, 255));
        assert_eq!(std::mem::size_of::<CpuBins>(), 8 + 256 * 8);
    }

    #[test]
    fn the_paging_test_needs_enough_waits_a_share_and_a_rise() {
        let t = PagingTest { min_paging: 15 };
        let after = |paging: u64, blocked: u64| Switches {
            preempted: 10 * blocked,
            blocked,
            paging,
            ..Switches::default()
        };
        // The measured memory cap: most blocking switches were page faults, none before.
        assert!(t.paging(0.0, after(900, 1000)));
        assert!(!t.paging(0.0, after(14, 20)), "too few to say");
        assert!(
            !t.paging(0.0, after(20, 10_000)),
            "too small a share of the waits"
        );
        assert!(!t.paging(0.5, after(900, 1000)), "it paged as much before");
        let once_each = Switches {
            paging_threads: 400,
            ..after(500, 520)
        };
        assert!(!t.paging(0.0, once_each), "stopped once each: a freeze");
        let twice_each = Switches {
            paging_threads: 250,
            ..once_each
        };
        assert!(t.paging(0.0, twice_each));
        assert!(!t.paging(0.0, Switches::default()));
    }

    #[test]
    fn a_spinner_rose_and_never_blocked() {
        let t = TEST;
        let spinning = Switches {
            preempted: 90,
            blocked: 2,
            foreign: 0,
            idle: 0,
            throttled: 0,
            ..Switches::default()
        };
        assert!(t.spins(0.01, 0.1, spinning));
        assert!(!t.spins(0.01, 0.03, spinning), "too little CPU");
        assert!(!t.spins(0.05, 0.1, spinning), "it ran that much before");
        let paging = Switches {
            preempted: 20,
            blocked: 200,
            foreign: 0,
            idle: 0,
            throttled: 0,
            ..Switches::default()
        };
        assert!(!t.spins(0.01, 0.1, paging), "it blocks: a thrashing thread");
        let few = Switches {
            preempted: 3,
            blocked: 0,
            foreign: 0,
            idle: 0,
            throttled: 0,
            ..Switches::default()
        };
        assert!(!t.spins(0.01, 0.1, few), "too few switches to tell");
        let off = BurnerTest {
            spin_share: 0.0,
            ..t
        };
        assert!(!off.spins(0.01, 0.1, spinning), "0 turns the test off");
    }

    fn switches(preempted: u64, blocked: u64, foreign: u64) -> Switches {
        Switches {
            preempted,
            blocked,
            foreign,
            ..Switches::default()
        }
    }

    #[test]
    fn the_cpu_is_saturated_when_it_stops_going_idle_and_another_process_gets_it() {
        let t = SaturationTest {
            foreign: 0.15,
            min_switches: 20,
        };
        let after = |foreign, idle| Switches {
            preempted: 10,
            blocked: 90,
            foreign,
            idle,
            throttled: 0,
            ..Switches::default()
        };
        // The measured hogs: idle in 0.46–0.79 of the switches before, in 0–0.03 after,
        // 0.18–0.45 to the hog.
        assert!(t.saturated(0.51, after(18, 0)));
        assert!(t.saturated(0.8, after(43, 1)));
        assert!(
            !t.saturated(0.57, after(13, 48)),
            "a disk writer: the CPU still goes idle"
        );
        assert!(
            !t.saturated(0.51, after(7, 0)),
            "a runaway loop: its own threads got the CPU"
        );
        assert!(
            !t.saturated(0.05, after(30, 0)),
            "the CPU was scarce before already"
        );
        assert!(
            !t.saturated(
                0.8,
                Switches {
                    blocked: 10,
                    foreign: 10,
                    ..Switches::default()
                }
            ),
            "too few switches to tell"
        );
        let off = SaturationTest { foreign: 0.0, ..t };
        assert!(!off.saturated(0.8, after(43, 0)), "0 turns the test off");
    }

    #[test]
    fn the_neighbour_test_needs_a_high_foreign_share_and_a_rise() {
        let t = NeighbourTest {
            share: 0.15,
            rise: 2.5,
            min_switches: 20,
        };
        let quiet = switches(10, 90, 5);
        // The measured hog: a third of the switches hand the CPU to its processes.
        assert!(t.taken(quiet, switches(40, 60, 35)));
        assert!(
            !t.taken(quiet, switches(40, 60, 10)),
            "its own threads took the CPU"
        );
        assert!(
            !t.taken(switches(10, 90, 30), switches(40, 60, 35)),
            "as much before"
        );
        assert!(
            !t.taken(quiet, switches(5, 5, 8)),
            "too few switches to tell"
        );
        assert!(
            t.taken(Switches::default(), switches(10, 10, 10)),
            "no switches before"
        );
        let off = NeighbourTest { share: 0.0, ..t };
        assert!(
            !off.taken(quiet, switches(0, 100, 100)),
            "0 turns the test off"
        );
    }
}
