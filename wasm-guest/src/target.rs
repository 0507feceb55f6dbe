//! One monitored target (a service): its threads, pooled baselines, cadence and window.
//!
//! Hot path ([`Target::ingest`]): per event one thread lookup (a flat tid index, cached
//! across runs of the same tid), pairing, unit split, and at most three ring pushes and
//! confirmation steps (gap, execution time, inter-arrival). Per moving average the
//! baselines cost comparisons and Welford steps only: what an approved epoch implies
//! (winsorizing bounds, a lower bound of the outlier test) is derived at the epoch
//! boundary ([`Baseline::refresh`]), and the full test and the confirmation state are
//! touched only above that bound or inside a run. No allocation per event:
//! vectors grow only when a new thread or a new syscall of a thread appears. With many
//! threads (≥ 256) the loop prefetches a few events ahead (tid index line, then the
//! thread record, then the channels the call will touch) so cache misses overlap (the
//! WASM guest, from ~1,500 threads, a group of events at a time through its host:
//! `Target::hint_group`);
//! a unit split marks channels stale instead of resetting each one.
//!
//! Memory bound per target: `max_threads` × (`size_of::<Thread>` (960 B) +
//! `max_syscalls_per_thread` × (`size_of::<Chan>` + `size_of::<ChanCold>` (128 + 152 B, and
//! 8·k bytes of slab rings when k > [`INLINE_RING`]) + episodes
//! (≤ 8 × 96 B) + 520 B of lost-time bins once it had an outlier) + the pooled
//! baselines and activity ring (a few hundred KiB). With the defaults and 10,000 threads
//! each using all 16 channels that is ≈ 10,000 × (0.94 + 16 × 0.27 + 0.51) KiB ≈ 56 MiB;
//! a typical thread uses 5–10 syscalls (≈ 2–3 KiB).
//! [`Target::bytes`] reports the actual capacities.
//!
//! A channel is not held for good: once every channel of a thread is taken, a syscall
//! that recurs (k calls beyond the channels in one sketch epoch) takes the channel idle
//! longest for its next calls, if that one has been idle for 1 s and never learned a
//! baseline (a process's startup calls) or for a window `W` (counted:
//! `recycled_channels`; see [`Thread::recycle_chan`]). Rare syscalls do not take turns.
//!
//! Calls of syscalls beyond a thread's channel cap are not dropped silently: they are
//! counted (`untracked_calls`) and, per (thread, syscall), in a ChopStix epoch sketch
//! ([`crate::sketch::EpochSketch`], `sketch_width` × `sketch_depth`, created on first
//! overflow, fixed size ≈ 2·w·d·8 bytes = 1 MiB by default) instead of an exact map that
//! would grow with threads × syscalls. When an episode is confirmed, the thread's
//! overflowed syscalls get a frequency increase from the sketch (current epoch's rate vs
//! the previous epoch's), so the frequency ranking still covers them. Count-min error:
//! each estimate over-counts by at most e·N/w (N = calls added in the epoch) with
//! probability 1 − e^{−d}; with the defaults (w = 16,384, d = 4) that is < 0.02 % of
//! the epoch's overflowed calls, 98 % of the time.

use crate::clock_screen::{ClockScreen, LeapHold, Screened, MAX_CLOCK_JUMP_NS};
use crate::cpu_time::{
    Burner, BurnerTest, Left, NeighbourTest, NextTask, PagingTest, SaturationTest, Switches,
    ThrottleTest,
};
use crate::detector::{self, Baseline, Thresholds};
use crate::diagnosis::{self, Finding, Population};
use crate::event::{EventKind, PerfCounters, SyscallEvent};
use crate::net_loss::{LossTest, PathBaseline, SegmentBins, Segments, TcpRetransmits};
use crate::pairing::Call;
use crate::params::{seconds_to_ns, Params};
use crate::ranking::{self, Ranking, Vote};
use crate::report::{
    AffectedThread, Calibration, CpuTaken, DecisionPath, EngineCounters, OnsetDistribution, Report,
    SyscallActivity, ThreadCounts, Trigger, Verdict, REPORT_SCHEMA_VERSION,
};
use crate::sketch::{key2, EpochSketch, SamplerConfig};
use crate::stats::quantile_sorted;
use crate::stillness::Stillness;
use crate::syscalls::SyscallId;
use crate::thread::{
    materialize_cold, BinSet, Chan, ChanCold, ColdSlot, Episode, Increase, Series, SeriesCold,
    Thread, WouldBlock, EPISODE_TOP, GAP_KEY, INLINE_RING,
};
use crate::thread_store::ThreadStore;
use crate::tid_index::TidIndex;
use crate::vital_signs::{SignsState, VitalSigns};

/// The overflow sketch's key of a thread's syscall: one definition for the count, its
/// prefetch and the episode-time estimate, which must all name the same counters.
#[inline(always)]
fn overflow_key(tid: u32, syscall: u16) -> u64 {
    key2(u64::from(tid), u64::from(syscall))
}

/// A bin cache that matches no time (`lo > hi`).
const EMPTY_BIN: (u64, u64, u64) = (1, 0, 0);

/// How long a thread's channel that never learned a baseline stays unused before another
/// syscall of the thread may take it (one that did keeps it for a window, `W`).
/// Short, so a process that lives a second or two does not keep its startup calls'
/// channels: at 5 s, a PostgreSQL backend forked during a real trace (1.3 s) left 18.5 %
/// of the target's calls untracked; at 1 s, 9.9 %, with every verdict of the 103 real
/// cases unchanged. Only a recurring syscall asks (k calls in a sketch epoch), so churn
/// stays low: 2,231 hand-overs in 1.77 M calls of a generated stream with 50 syscall
/// types at 1,000 threads (1,831 at 5 s). Before that gate, 1 s swapped channels 10×
/// as often as 5 s.
const RECYCLE_FRESH_NS: u64 = 1_000_000_000;
/// Persistence spans before the onset a CPU burner's earlier share is the lowest of (15 s
/// by default: a runaway that began up to 12 s before the onset still shows its rise).
const BURNER_BEFORE: u64 = 5;
/// Preemptions a second a spinner needs after the onset (see [`BurnerTest::spins`]).
const SPINNER_MIN_PREEMPTIONS_PER_SECOND: f64 = 2.0;
/// Switches away a second, over all threads, the test for other processes taking the
/// CPU needs on each side of the onset (see [`NeighbourTest`]): a target that hardly
/// leaves its CPU says little about who gets it.
const NEIGHBOUR_MIN_SWITCHES_PER_SECOND: f64 = 5.0;
/// Throttled switches a second, over all threads, the quota test needs after the onset
/// (see [`ThrottleTest`]): a quota's period is 100 ms by default, so a throttled group
/// meets it several times a second.
const THROTTLED_MIN_PER_SECOND: f64 = 1.0;
/// Page-fault waits a second, over all threads, the paging test needs after the onset
/// (see [`PagingTest`]): a starting thread or a cold mapped file faults a few times (at
/// most 26 in a 3-s span of 28 recordings without a memory limit; 1,000–3,600 under the
/// limits that hurt).
const PAGING_MIN_PER_SECOND: f64 = 10.0;

/// Prefetch distances (events ahead) of the three stages in [`Target::ingest`]: far
/// enough to cover a memory latency, near enough that the lines are still in L1.
const INDEX_AHEAD: usize = 16;
/// Threads from which a target's state outgrows the caches and prefetching pays.
const PREFETCH_MIN_THREADS: usize = 256;
/// Whether the ingest loop prefetches a few events ahead: not in the WASM guest, which
/// has no prefetch instruction and asks its host for each group's hints instead (see
/// [`GROUPED`]). A constant, so the guest's loop has no trace of it.
const PREFETCH: bool = !cfg!(target_arch = "wasm32");
/// Whether the ingest loop instead hints the state of each group of `FAR` events ahead
/// of analysing it (the WASM guest; see [`Target::hint_group`]), in batches where most
/// events are of another thread than the one before ([`GROUP_MIN_CHANGES`]). The hints
/// go to the host's `fl_prefetch` in one call per group: a call inside the per-event
/// loop would spill its registers, and a load in place of a prefetch holds the CPU until
/// the line arrives.
const GROUPED: bool = cfg!(target_arch = "wasm32");
/// Share of consecutive events of different threads, in tenths, from which a batch's
/// events are hinted in groups: below it runs of one thread keep its state in cache
/// and the hints cost more than they save (measured 24 Nov, WASM, 3 interleaved runs,
/// 6 against 0: 10k threads bursty enter/exit +8 %, LTTng `many-threads` +20 %; against
/// 9: 10k threads uniform enter/exit +10 to +20 %, bursty complete +25 %).
const GROUP_MIN_CHANGES: usize = 6;
/// Threads from which the guest hints in groups, at one change of thread per event; a
/// batch with fewer changes needs proportionally more threads (the misses the hints hide
/// go as both). The guest's hints cost more than the native prefetch (queued, then a
/// host call per group), so they pay only once the state is well past the caches:
/// measured 24 Nov on a 4 MiB-L2 machine, WASM, 2 interleaved runs, grouped against not,
/// uniform complete calls (every event changes thread) and enter/exit (57 % change):
/// 1,000 threads −18 % and −23 %; 2,000: +5 % and −14 %; 4,000: +26 % and −1 %;
/// 10,000: +75 % and +10 %.
const GROUP_MIN_THREADS: usize = 1_500;
const FAR: usize = 8;
/// Thread records compared per eviction at `max_threads`: enough that the victim is
/// among the least recently seen few percent, few enough to cost no more than a call.
const EVICT_SAMPLE: usize = 64;
const NEAR: usize = 4;

/// How the anomaly onset T0 of an evaluation is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Onset {
    /// Continuous mode: the earliest confirmed outlier in the window.
    Detect,
    /// Calibration from a known fault start (the evaluation's `from`): as `Detect`, but
    /// only corroborated outliers make the onset, not a quota found in the scheduler's
    /// records alone: α is the largest onset of the threads the fault reached, and
    /// counted from the start of the throttling, an nginx worker's 9.9-s onset made α
    /// 9.9 s (measured, session 40).
    Calibration,
    /// On demand: a known time (an external alarm).
    At(u64),
}

/// Parameters converted once to the units the hot path uses.
#[derive(Clone, Debug)]
struct Derived {
    k: usize,
    gap_ns: u64,
    alpha_ns: u64,
    corroboration_ns: u64,
    window_ns: u64,
    cadence_ns: u64,
    bin_ns: u64,
    /// The last bin whose start fits in a `u64` of nanoseconds.
    last_bin: u64,
    min_n: f32,
    pool_min_n: f32,
    min_epochs: u16,
    refractory_ns: u64,
    persistence_ns: u64,
    max_n: f32,
    /// Execution times (with `min_time_increase_seconds` and the small-increase tier).
    time_th: Thresholds,
    /// Gaps between calls: as `time_th`, with `min_gap_seconds` instead.
    gap_th: Thresholds,
    freq_th: Thresholds,
    max_chans: usize,
}

impl Derived {
    fn new(p: &Params) -> Self {
        let window_ns = seconds_to_ns(p.window_seconds).max(1);
        let bin_ns = (window_ns / BinSet::BINS).max(1);
        let time_th = Thresholds {
            sigma: p.outlier_sigma as f32,
            min_increase: p.min_time_increase as f32,
            min_abs_increase: (p.min_time_increase_seconds * 1e9) as f32,
            min_level: f32::NEG_INFINITY,
            small_abs_increase: (p.small_time_increase_seconds * 1e9) as f32,
            min_small_increase: p.min_small_time_increase as f32,
            runs: p.confirm_runs,
            window_ns: seconds_to_ns(p.confirm_window_seconds),
            sustained: (2 * p.moving_average_k).min(u16::MAX as usize) as u16,
        };
        Self {
            k: p.moving_average_k,
            gap_ns: seconds_to_ns(p.gap_threshold()),
            alpha_ns: seconds_to_ns(p.alpha_seconds),
            corroboration_ns: seconds_to_ns(p.corroboration_seconds),
            window_ns,
            cadence_ns: seconds_to_ns(p.cadence_seconds).max(1),
            bin_ns,
            last_bin: u64::MAX / bin_ns,
            min_n: p.min_baseline_samples as f32,
            pool_min_n: 4.0 * p.min_baseline_samples as f32,
            min_epochs: p.min_baseline_epochs.min(u16::MAX as u32) as u16,
            refractory_ns: seconds_to_ns(p.confirm_window_seconds * 10.0)
                .max(seconds_to_ns(p.alpha_seconds * 4.0)),
            persistence_ns: seconds_to_ns(p.persistence_seconds),
            max_n: p.baseline_max_samples as f32,
            gap_th: Thresholds {
                min_abs_increase: 0.0,
                min_level: (p.min_gap_seconds * 1e9) as f32,
                small_abs_increase: 0.0,
                ..time_th
            },
            freq_th: Thresholds {
                min_increase: p.min_frequency_increase as f32,
                min_abs_increase: 0.0,
                small_abs_increase: 0.0,
                ..time_th
            },
            time_th,
            max_chans: p.max_syscalls_per_thread,
        }
    }
}

/// Pooled (per syscall, all threads) baselines: the fallback for threads without history.
#[derive(Clone, Copy, Debug, Default)]
struct Pool {
    dur: Baseline,
    ia: Baseline,
}

impl Pool {
    /// An empty pool, its gates consistent with the parameters.
    fn fresh(d: &Derived) -> Self {
        let mut p = Self::default();
        p.refresh(d);
        p
    }

    /// Re-derives the gates (after a rotation or a change of parameters).
    fn refresh(&mut self, d: &Derived) {
        let sigma = d.time_th.sigma;
        self.dur.refresh(d.pool_min_n, d.min_epochs, sigma);
        self.ia.refresh(d.pool_min_n, d.min_epochs, sigma);
    }
}

/// Re-derives the gates of a thread's own baselines (see [`Baseline::refresh`]).
fn refresh_thread(t: &mut Thread, d: &Derived) {
    let sigma = d.time_th.sigma;
    for (ch, cold) in t.chans.iter_mut().zip(&t.cold) {
        let (min_n, min_epochs) = (d.min_n, d.min_epochs);
        ch.dur
            .baseline
            .refresh(&cold.dur.baseline, min_n, min_epochs, sigma);
        ch.ia
            .baseline
            .refresh(&cold.ia.baseline, min_n, min_epochs, sigma);
    }
}

/// Per-syscall activity of one cadence epoch.
#[derive(Clone, Copy, Debug, Default)]
struct Activity {
    calls: u64,
    total_ns: u64,
}

/// State of one target.
#[derive(Debug)]
pub struct Target {
    pub name: String,
    params: Params,
    d: Derived,
    threads: ThreadStore,
    index: TidIndex,
    /// Pools indexed by syscall id + 1; index 0 is the gap channel.
    pools: Vec<Pool>,
    /// Activity ring: `epochs × stride` entries.
    activity: Vec<Activity>,
    activity_events: Vec<u64>,
    stride: usize,
    epoch_slot: usize,
    first_ns: Option<u64>,
    pub now_ns: u64,
    /// The latest record's time: `now_ns` runs ahead of it only by [`Target::advance`].
    records_ns: u64,
    next_tick_ns: Option<u64>,
    /// Threads with an episode in the current epoch.
    dirty_threads: u32,
    /// Per-(thread, syscall) call counts of syscalls beyond the channel cap.
    overflow: Option<EpochSketch>,
    /// Which syscall ids ever overflowed (bitset).
    overflow_ids: Vec<u64>,
    last_slot: Option<(u32, usize)>,
    /// `[lo, hi)` and index of the activity bin of the last call (see `bin_of`).
    bin_cache: (u64, u64, u64),
    /// When records were last reported lost (0: never; see [`EventKind::Lost`]).
    loss_ns: u64,
    /// Guards the clock against records stamped far from it.
    screen: ClockScreen,
    /// Records that leapt past the clock, until the stream confirms them.
    leap: LeapHold,
    /// Where the next eviction's sample starts (see `new_thread`).
    evict_hand: usize,
    /// Counter totals for the vital signs, from the first counters on (boxed: a source
    /// without counters adds 8 bytes to the target's record, whose hot fields stay
    /// where they were).
    signs: Option<Box<SignsState>>,
    /// What the host saw of the processes when it last moved the clock of the silent
    /// target (see [`Target::advance`]); reset by the next record at or past the clock.
    still: Stillness,
    /// The throttled share before the CPU quota a cadence report found throttling the
    /// target, kept until a whole cadence passes without a throttled switch: once the
    /// quota has lasted longer than the window, no span before it is left to have risen
    /// from, and without this continuous mode would go quiet while the quota still
    /// throttles.
    quota_before: Option<f64>,
    /// The TCP segments the target's network namespace sent and retransmitted, from its
    /// first such record on (boxed: most sources have none; see [`crate::net_loss`]).
    segments: Option<Box<SegmentBins>>,
    /// The retransmitted share before the packet loss a cadence report found, kept while
    /// the target goes on retransmitting (as `quota_before`, for a loss that outlasts
    /// the window).
    loss_before: Option<PathBaseline>,
}

impl Target {
    pub fn new(name: &str, params: Params) -> Self {
        let d = Derived::new(&params);
        let epochs = (d.window_ns.div_ceil(d.cadence_ns) as usize).clamp(1, 4096);
        let stride = SyscallId::count().max(1);
        Self {
            name: name.to_string(),
            params,
            d,
            threads: ThreadStore::new(),
            index: TidIndex::default(),
            pools: Vec::new(),
            activity: vec![Activity::default(); epochs * stride],
            activity_events: vec![0; epochs],
            stride,
            epoch_slot: 0,
            first_ns: None,
            now_ns: 0,
            records_ns: 0,
            next_tick_ns: None,
            dirty_threads: 0,
            overflow: None,
            overflow_ids: Vec::new(),
            last_slot: None,
            bin_cache: EMPTY_BIN,
            loss_ns: 0,
            screen: ClockScreen::default(),
            leap: LeapHold::default(),
            evict_hand: 0,
            signs: None,
            still: Stillness::Unknown,
            quota_before: None,
            segments: None,
            loss_before: None,
        }
    }

    pub fn params(&self) -> &Params {
        &self.params
    }

    /// New parameters: if k changed, the rings are rebuilt (moving averages restart).
    pub fn set_params(&mut self, params: Params) {
        let k_changed = params.moving_average_k != self.params.moving_average_k;
        if params.cadence_seconds != self.params.cadence_seconds {
            if let Some(s) = self.signs.as_mut() {
                s.reset_threads();
            }
        }
        let old_stride = self.stride;
        let epochs_before = self.activity_events.len();
        let bin_before = self.d.bin_ns;
        self.d = Derived::new(&params);
        self.params = params;
        self.bin_cache = EMPTY_BIN;
        if self.d.bin_ns != bin_before {
            // Its bins are in the old size; the next records start it again.
            self.segments = None;
            self.loss_before = None;
        }
        for p in &mut self.pools {
            p.refresh(&self.d);
        }
        for t in self.threads.iter_mut() {
            refresh_thread(t, &self.d);
        }
        if k_changed {
            let slab = self.d.k > INLINE_RING;
            for t in self.threads.iter_mut() {
                t.rings = if slab {
                    vec![0.0; t.chans.len() * 2 * self.d.k]
                } else {
                    Vec::new()
                };
                let at = t.unit_start_ns;
                t.start_unit(at);
            }
        }
        let epochs = (self.d.window_ns.div_ceil(self.d.cadence_ns) as usize).clamp(1, 4096);
        if epochs != epochs_before || old_stride != self.stride {
            self.activity = vec![Activity::default(); epochs * self.stride];
            self.activity_events = vec![0; epochs];
            self.epoch_slot = 0;
            if let Some(s) = self.signs.as_mut() {
                s.reset_epochs();
            }
        }
    }

    /// Feeds one time-ordered batch; returns the cadence reports that became due.
    /// Records far from the target's clock are screened out first, and records that leapt
    /// past it are held until the stream confirms them (see [`crate::clock_screen`]).
    pub fn ingest(&mut self, events: &[SyscallEvent], c: &mut EngineCounters) -> Vec<Report> {
        // A batch of TCP segment records alone comes from a sampler of its own, which
        // reads the counters as they are now while the calls' source hands its records
        // over a second or two late: its times must not move the clock (a cadence report
        // would be cut before the calls of its last seconds arrived).
        if events.iter().all(|e| e.kind == EventKind::TcpSegments) {
            // Screened as other records are, against the clock the calls made.
            for e in events {
                if self.first_ns.is_some() && e.ts_ns.abs_diff(self.now_ns) > MAX_CLOCK_JUMP_NS {
                    c.clock_outliers += 1;
                } else {
                    self.add_segments(e, c);
                }
            }
            return Vec::new();
        }
        let clock = self.first_ns.map(|_| self.now_ns);
        let near = match self.screen.screen(events, clock, &mut c.clock_outliers) {
            Screened::All => events,
            Screened::Part(r) => events.get(r).unwrap_or(&[]),
            Screened::Restart => {
                // (What was held for a leap goes with the rest of the old time's state.)
                c.clock_resets += 1;
                *self = Target::new(&self.name, self.params.clone());
                events
            }
            Screened::Jump => {
                // The records before this batch confirmed the jump. What was held for a
                // leap came before it, in the old time.
                let held = self.leap.take();
                let mut due = self.ingest_ending_near(&held, c);
                due.extend(self.ingest_ending_near(events, c));
                return due;
            }
        };
        let clock = self.first_ns.map(|_| self.now_ns);
        let now = self.leap.pass(near, clock, &mut c.clock_outliers);
        self.ingest_ending_near(&now, c)
    }

    /// Ingests the records held for a leap past the clock (see [`LeapHold`]) when a time
    /// from outside the stream reached them (the host's clock, an alarm); returns the
    /// cadence reports that became due.
    pub fn confirm_held(&mut self, at_ns: u64, c: &mut EngineCounters) -> Vec<Report> {
        match self.leap.confirmed_by(at_ns) {
            Some(held) => self.ingest_ending_near(&held, c),
            None => Vec::new(),
        }
    }

    /// Drops the records held for a leap past the clock (see [`LeapHold`]), counted as
    /// clock outliers: at the end of the stream nothing can confirm them.
    pub fn drop_held(&mut self, c: &mut EngineCounters) {
        self.leap.drop_held(&mut c.clock_outliers);
    }

    /// [`Target::ingest_near`] of the records whose calls also end near the clock: the
    /// screen saw only a completed call's start, and an exit stamped near `u64::MAX`
    /// would end its thread's last call for good (no gap, no new execution unit, no
    /// stall for it again). Such calls are clock outliers. A pass of its own over the
    /// batch, so the per-record analysis loop has no test more: as a test in that loop
    /// the guest read 0.84–0.93 of the build before on four bench rows, with this pass
    /// 0.95–0.99 (side by side, 6 rounds, medians; within this box's noise).
    fn ingest_ending_near(
        &mut self,
        events: &[SyscallEvent],
        c: &mut EngineCounters,
    ) -> Vec<Report> {
        let now = self.now_ns;
        let wild = |e: &SyscallEvent| {
            e.kind == EventKind::Complete
                && e.ts_ns.saturating_add(e.duration_ns)
                    > e.ts_ns.max(now).saturating_add(MAX_CLOCK_JUMP_NS)
        };
        if !events.iter().any(wild) {
            return self.ingest_near(events, c);
        }
        let kept: Vec<SyscallEvent> = events.iter().filter(|e| !wild(e)).copied().collect();
        c.clock_outliers += (events.len() - kept.len()) as u64;
        self.ingest_near(&kept, c)
    }

    /// [`Target::ingest`] of records near the clock.
    fn ingest_near(&mut self, events: &[SyscallEvent], c: &mut EngineCounters) -> Vec<Report> {
        let mut due = Vec::new();
        let Some(last) = events.last() else {
            return due;
        };
        // Time ordered (`Engine::ingest`): the last record is the latest.
        // Only a record at or past the clock says the target calls again: records behind
        // a clock its host moved on were made before the silence (a live source's
        // buffered last round, handed over late, as at shutdown).
        if last.ts_ns >= self.now_ns {
            self.still = Stillness::Unknown;
        }
        self.records_ns = self.records_ns.max(last.ts_ns);
        let grouped = GROUPED && self.threads.len() >= GROUP_MIN_THREADS && {
            let changes = events.windows(2).filter(|w| w[0].tid != w[1].tid).count();
            changes.saturating_mul(10) >= events.len().saturating_mul(GROUP_MIN_CHANGES)
                && changes.saturating_mul(self.threads.len())
                    >= events.len().saturating_mul(GROUP_MIN_THREADS)
        };
        if grouped {
            // The native loop's three stages, a group of `FAR` events per step: tid index
            // lines three groups ahead, thread records two groups ahead, the calls of the
            // next group (so the first calls of a group get a group's lead too, and an
            // exit fed right after its enter is hinted by the enter).
            let group = |g: usize| {
                let lo = g.saturating_mul(FAR).min(events.len());
                events
                    .get(lo..lo.saturating_add(FAR).min(events.len()))
                    .unwrap_or(&[])
            };
            // The slots the thread stage found, by group modulo 3.
            let mut slots = [[u32::MAX; FAR]; 3];
            for s in 0..events.len().div_ceil(FAR) + 2 {
                // Step `s` analyses group `s - 2` (the first two steps only hint).
                let calls = s.checked_sub(1).map_or(&[][..], group);
                let found = slots[(s + 2) % 3];
                self.hint_group([group(s + 1), group(s), calls], &found, &mut slots[s % 3]);
                if let Some(g) = s.checked_sub(2) {
                    let ahead = &mut slots[g % 3];
                    self.ingest_run(group(g), ahead, false, &mut due, c);
                }
            }
            return due;
        }
        // Only worth it when the threads' state cannot stay in cache: with a few dozen
        // threads the hints cost more than they save.
        let prefetch = PREFETCH && self.threads.len() >= PREFETCH_MIN_THREADS;
        // The slots stage 1 of the prefetch found, by event index modulo `FAR`.
        let mut ahead = [u32::MAX; FAR];
        if prefetch {
            // Staged prefetch: the tid index line `INDEX_AHEAD` events ahead, the thread
            // record `FAR` ahead, then (once that is in cache) the channels and counters
            // the call `NEAR` events ahead will touch.
            for ev in events.iter().take(INDEX_AHEAD) {
                self.index.prefetch(ev.tid);
            }
            for j in 0..FAR.min(events.len()) {
                self.prefetch_thread(events.get(j), j, &mut ahead);
            }
            for j in 0..NEAR.min(events.len()) {
                self.prefetch_call(events.get(j), j, &ahead);
            }
        }
        self.ingest_run(events, &mut ahead, prefetch, &mut due, c);
        due
    }

    /// The per-event loop of [`Target::ingest`] over `events` (the batch, or one group of
    /// it), with the staged prefetch when `prefetch`. Called from two places in the WASM
    /// guest, so not inlined there: one copy of the loop, with no call in it.
    #[cfg_attr(target_arch = "wasm32", inline(never))]
    fn ingest_run(
        &mut self,
        events: &[SyscallEvent],
        ahead: &mut [u32; FAR],
        prefetch: bool,
        due: &mut Vec<Report>,
        c: &mut EngineCounters,
    ) {
        for (i, ev) in events.iter().enumerate() {
            // The slot stage 1 found for this event (read before stage 1 reuses the entry).
            let hint = ahead.get(i % FAR).copied().unwrap_or(u32::MAX);
            if prefetch {
                // Large batches may come from memory too (a decoded file, a bench).
                if let Some(e) = events.get(i + 2 * INDEX_AHEAD) {
                    crate::prefetch::line(e);
                }
                if let Some(e) = events.get(i + INDEX_AHEAD) {
                    self.index.prefetch(e.tid);
                }
                self.prefetch_thread(events.get(i + FAR), i + FAR, ahead);
                self.prefetch_call(events.get(i + NEAR), i + NEAR, ahead);
            }
            if self.first_ns.is_none() {
                self.first_ns = Some(ev.ts_ns);
                self.next_tick_ns = Some(ev.ts_ns.saturating_add(self.d.cadence_ns));
            }
            // Cadence in event time: ticks strictly before this event are evaluated first.
            // (Tested here, looped in `ticks_before`: no inner loop per event, which in the
            // WASM guest would be an epoch check per event.)
            if self.next_tick_ns.is_some_and(|t| ev.ts_ns >= t) {
                self.ticks_before(ev.ts_ns, due, c);
            }
            self.now_ns = self.now_ns.max(ev.ts_ns);
            self.ingest_one(ev, hint, c);
        }
    }

    /// The WASM guest's form of the staged prefetch, for three groups of at most `FAR`
    /// events: `[index, thread, call]` get stage 1, 2 and 3. Stage 2 finds the slots of
    /// the thread group in `next`; stage 3 reads those of the call group in `now`. The
    /// hints are queued and issued by the host in one call ([`crate::prefetch::flush`]):
    /// inside the per-event loop a call would make the compiled loop spill its live values.
    #[inline(never)]
    fn hint_group(
        &self,
        [index, thread, call]: [&[SyscallEvent]; 3],
        now: &[u32; FAR],
        next: &mut [u32; FAR],
    ) {
        for e in index {
            self.index.prefetch(e.tid);
        }
        for (j, e) in thread.iter().enumerate() {
            self.prefetch_thread(Some(e), j, next);
        }
        for (j, e) in call.iter().enumerate() {
            self.prefetch_call(Some(e), j, now);
        }
        crate::prefetch::flush();
    }

    /// Moves the clock of a target that sent no record to `now_ns` (its host's estimate
    /// of the source clock), evaluating the cadence ticks it passes: the analysis runs in
    /// event time, so without this a target whose threads all stopped or all wait in a
    /// call would never be reported on. Only forward, at most the clock screen's
    /// [`MAX_CLOCK_JUMP_NS`] past the latest record (further, the records that follow
    /// would be screened out as outliers), and only once the target has a record.
    /// `still`: what the host saw of the target's processes, which holds until a record
    /// at or past the moved clock (late records were made before the silence).
    pub fn advance(
        &mut self,
        now_ns: u64,
        still: Stillness,
        c: &mut EngineCounters,
    ) -> Vec<Report> {
        if self.first_ns.is_none() {
            return Vec::new();
        }
        // The host's clock reached records held for a leap: the silence was real.
        let mut due = self.confirm_held(now_ns, c);
        self.still = still;
        if now_ns <= self.now_ns {
            return due;
        }
        // From the records, not the clock: repeated advances cannot walk it further.
        let now_ns = now_ns.min(self.records_ns.saturating_add(MAX_CLOCK_JUMP_NS));
        if now_ns <= self.now_ns {
            return due;
        }
        if self.next_tick_ns.is_some_and(|t| now_ns >= t) {
            self.ticks_before(now_ns, &mut due, c);
        }
        self.now_ns = now_ns;
        due
    }

    /// Seconds from the target's latest record to `to` (0 when a record reached it),
    /// never past the clock (an on-demand alarm ahead of the data is no silence).
    fn silent_seconds(&self, to: u64) -> f64 {
        to.min(self.now_ns).saturating_sub(self.records_ns) as f64 / 1e9
    }

    /// How the target's threads stopped by `to` (see [`Stops`]).
    fn stops(&self, to: u64) -> Stops {
        let r = self.records_ns;
        let silent_since = (to.saturating_sub(r) >= self.d.gap_ns).then_some(r);
        Stops {
            silent_since,
            asleep: silent_since.is_some() && self.still == Stillness::Asleep,
            exits: self
                .threads
                .iter()
                .filter_map(|t| Some((t, t.pairer.pending()?)))
                .filter(|(_, p)| p.syscall.ends_thread() && p.enter_ns <= to)
                .map(|(t, p)| Exit {
                    pid: t.pid,
                    tid: t.tid,
                    group: p.syscall.ends_process(),
                    at_ns: p.enter_ns,
                })
                .collect(),
        }
    }

    /// Evaluates the cadence ticks at or before `ts` (an event's time), in order.
    #[cold]
    fn ticks_before(&mut self, ts: u64, due: &mut Vec<Report>, c: &EngineCounters) {
        while let Some(mut tick) = self.next_tick_ns {
            if ts < tick {
                break;
            }
            // After a long silence, report at most one window's worth of ticks:
            // older ticks would describe windows with no data at all.
            let keep = self.activity_events.len() as u64 + 1;
            let missed = (ts - tick) / self.d.cadence_ns;
            if missed > keep {
                tick = tick.saturating_add((missed - keep) * self.d.cadence_ns);
            }
            self.now_ns = self.now_ns.max(tick);
            due.push(self.tick(tick, c));
            let next = tick.saturating_add(self.d.cadence_ns);
            // At the end of the clock's range there is no next tick.
            self.next_tick_ns = (next > tick).then_some(next);
        }
    }

    /// Stage 1 of the prefetch: finds event `j`'s thread (read-only; new threads are
    /// skipped) and prefetches its hot fields; remembers the slot for stage 2.
    #[inline(always)]
    fn prefetch_thread(&self, ev: Option<&SyscallEvent>, j: usize, ahead: &mut [u32; FAR]) {
        let Some(ev) = ev else {
            return;
        };
        let slot = match self.last_slot {
            Some((t, s)) if t == ev.tid => Some(s),
            _ => self.index.get(ev.tid).map(|s| s as usize),
        };
        if let Some(a) = ahead.get_mut(j % FAR) {
            *a = slot.map_or(u32::MAX, |s| s as u32);
        }
        if let Some(t) = slot.and_then(|s| self.threads.get(s)) {
            crate::prefetch::bytes(t, Thread::HOT_BYTES);
        }
    }

    /// Stage 2 of the prefetch: the call event `j` completes or begins (its thread is
    /// cached by now).
    /// Both stages are always inlined: in the WASM guest each call would also cost an
    /// epoch-deadline check, per event.
    #[inline(always)]
    fn prefetch_call(&self, ev: Option<&SyscallEvent>, j: usize, ahead: &[u32; FAR]) {
        let Some(ev) = ev else {
            return;
        };
        let Some(&slot) = ahead.get(j % FAR) else {
            return;
        };
        // The slot may be stale (the thread was evicted since): then skip the hint.
        let Some(th) = self.threads.get(slot as usize).filter(|t| t.tid == ev.tid) else {
            return;
        };
        let (key, enter_ns) = match ev.kind {
            EventKind::OnCpu
            | EventKind::OffCpu
            | EventKind::Lost
            | EventKind::Counters
            | EventKind::TcpSegments => return,
            EventKind::Complete => (ev.syscall.0, ev.ts_ns),
            // For the exit that will complete it: an exit that follows its enter within
            // `NEAR` events finds no pending call here, since the enter is not fed yet.
            EventKind::Enter if ev.syscall != SyscallId::UNKNOWN => (ev.syscall.0, ev.ts_ns),
            EventKind::Enter => return,
            EventKind::Exit => match th.pairer.pending() {
                Some(p) if ev.syscall == SyscallId::UNKNOWN => (p.syscall.0, p.enter_ns),
                Some(p) => (ev.syscall.0, p.enter_ns),
                None => return,
            },
        };
        if !th.prefetch_call(key, self.d.k) {
            if let Some(sk) = &self.overflow {
                sk.prefetch_add(overflow_key(th.tid, key));
            }
        }
        // A call in a later bin than the thread's latest folds into the bin counts (the
        // test multiplies; the division is left to calls that need it).
        // Saturating, without `saturating_mul`: on wasm32 a 64-bit multiply with an
        // overflow check is a call to a 128-bit multiply routine.
        let next_bin = th.calls().latest().saturating_add(1);
        let next_bin_ns = if next_bin <= self.d.last_bin {
            next_bin * self.d.bin_ns
        } else {
            u64::MAX
        };
        if enter_ns >= next_bin_ns {
            th.calls().prefetch_add(enter_ns / self.d.bin_ns);
        }
    }

    /// `ns / bin_ns`, without the 64-bit division when `ns` falls in the same bin as
    /// the previous call (time-ordered streams almost always do).
    #[inline]
    fn bin_of(&mut self, ns: u64) -> u64 {
        let (lo, hi, bin) = self.bin_cache;
        if ns >= lo && ns < hi {
            return bin;
        }
        let bin = ns / self.d.bin_ns;
        let lo = bin * self.d.bin_ns;
        self.bin_cache = (lo, lo.saturating_add(self.d.bin_ns), bin);
        bin
    }

    /// The slot of `tid`'s thread (created or evicting if new). `hint`: a slot found
    /// for it a few events earlier (`u32::MAX` = none), taken when it still holds `tid`
    /// (a tid has at most one record, so that is the slot the index would give).
    fn slot_of(&mut self, ev: &SyscallEvent, hint: u32, c: &mut EngineCounters) -> usize {
        let tid = ev.tid;
        if let Some((t, s)) = self.last_slot {
            if t == tid {
                return s;
            }
        }
        let h = hint as usize;
        if self.threads.get(h).is_some_and(|t| t.tid == tid) {
            self.last_slot = Some((tid, h));
            return h;
        }
        let slot = match self.index.get(tid) {
            Some(s) => s as usize,
            None => self.new_thread(ev, c),
        };
        self.last_slot = Some((tid, slot));
        slot
    }

    /// A record for a thread not seen before: a new slot, or the least recently seen
    /// thread's (evicted, counted) at `max_threads`. Out of line: the 960-byte record is
    /// built in this function's frame, not in the per-event loop's (in the WASM guest a
    /// frame object's addresses are kept live across the whole loop).
    #[cold]
    #[inline(never)]
    fn new_thread(&mut self, ev: &SyscallEvent, c: &mut EngineCounters) -> usize {
        let (pid, tid, ts) = (ev.pid, ev.tid, ev.ts_ns);
        let s = if self.threads.len() < self.params.max_threads {
            self.threads.push(Thread::new(pid, tid, ts))
        } else {
            // Evict the least recently seen of the next `EVICT_SAMPLE` records after a
            // rotating hand (counted): an approximate LRU in O(1) per new thread. The
            // exact one scanned every record, for every new thread once a target was
            // full: a fork-heavy target, or a client inventing tids, paid max_threads
            // reads per event.
            let n = self.threads.len().max(1);
            let start = self.evict_hand % n;
            let victim = (0..EVICT_SAMPLE.min(n))
                .map(|i| (start + i) % n)
                .min_by_key(|&i| self.threads.get(i).map_or(0, |t| t.last_seen_ns))
                .unwrap_or(0);
            self.evict_hand = (start + EVICT_SAMPLE) % n;
            c.evicted_threads += 1;
            if let Some(old) = self.threads.get(victim) {
                self.index.remove(old.tid);
            }
            if let Some(t) = self.threads.get_mut(victim) {
                *t = Thread::new(pid, tid, ts);
            }
            victim
        };
        self.index.insert(tid, s as u32);
        s
    }

    fn ingest_one(&mut self, ev: &SyscallEvent, hint: u32, c: &mut EngineCounters) {
        match ev.kind {
            EventKind::Lost => {
                // Applied lazily, at each thread's next exit and next call: O(1) per report.
                self.loss_ns = self.loss_ns.max(ev.ts_ns);
                c.loss_reports += 1;
                return;
            }
            EventKind::Counters => {
                // Not a call: no thread record for it (a thread known only by its
                // counters has no syscall state to keep).
                self.add_counters(ev, c);
                return;
            }
            EventKind::TcpSegments => {
                self.add_segments(ev, c);
                return;
            }
            _ => {}
        }
        if ev.perf.is_some() {
            self.add_counters(ev, c);
        }
        let slot = self.slot_of(ev, hint, c);
        let Some(th) = self.threads.get_mut(slot) else {
            return;
        };
        th.last_seen_ns = th.last_seen_ns.max(ev.ts_ns);
        if ev.is_scheduling() {
            // A switch that handed the CPU to a task that is none of the target's threads
            // (nor the idle task): another process took it.
            let foreign = ev
                .switched_in()
                .is_some_and(|next| next != 0 && self.index.get(next).is_none());
            add_cpu_time(th, ev, foreign, self.d.bin_ns, self.loss_ns, c);
            if ev.kind == EventKind::OffCpu && self.signs.is_some() {
                self.add_switch(ev);
            }
            return;
        }
        // An id no name table has (from a batch, never from the tables) is an unknown
        // syscall from here on: the gap channel's key is one, so no part of the analysis
        // (the pending entry, a blocked or stuck call) takes it for the thread's gap
        // series; and the pooled baselines are indexed by id, so 65,534 would grow them
        // to 8 MiB. Counted once per call, at its first half. One compare covers both.
        const _: () = assert!((GAP_KEY as usize) >= SyscallId::count());
        let mapped;
        let ev = if usize::from(ev.syscall.0) >= SyscallId::count() {
            if ev.kind != EventKind::Exit {
                c.reserved_syscall_ids += 1;
            }
            mapped = SyscallEvent {
                syscall: SyscallId::UNKNOWN,
                ..*ev
            };
            &mapped
        } else {
            ev
        };
        let Some(call) = th.pairer.feed_after_loss(ev, self.loss_ns, c) else {
            return;
        };
        c.calls += 1;
        let a = self.epoch_slot * self.stride + (call.syscall.0 as usize).min(self.stride - 1);
        if let Some(act) = self.activity.get_mut(a) {
            act.calls += 1;
            act.total_ns = act.total_ns.saturating_add(call.duration_ns);
        }
        if let Some(e) = self.activity_events.get_mut(self.epoch_slot) {
            *e += 1;
        }
        let bin = self.bin_of(call.enter_ns);
        if let Some(th) = self.threads.get_mut(slot) {
            th.add_call(bin);
        }
        self.analyse_call(slot, call, bin, c);
    }

    /// Execution units, moving averages, baselines and the CUSUM test for one call.
    fn analyse_call(&mut self, slot: usize, call: Call, bin: u64, c: &mut EngineCounters) {
        let d = &self.d;
        let Some(th) = self.threads.get_mut(slot) else {
            return;
        };
        let mut confirmed: Option<(u64, u16, bool)> = None;
        // 1. Execution units: split on a gap larger than the threshold.
        let mut gap = None;
        // Calls of this thread may have been lost since its last one: the gap and the
        // inter-arrival times would span them, so a new unit begins (and the gap is no
        // evidence of a stall).
        let after_loss = th.last_exit_ns < self.loss_ns;
        if th.last_exit_ns == 0
            || after_loss
            || call.enter_ns > th.last_exit_ns.saturating_add(d.gap_ns)
        {
            let stall = if after_loss {
                None
            } else {
                stall_episode(th, call.enter_ns, d, &self.params)
            };
            if let Some(e) = stall {
                if !th.dirty {
                    th.dirty = true;
                    self.dirty_threads += 1;
                }
                th.last_episode_ns = e.alarm_ns.max(1);
                th.push_episode(e);
            }
            th.start_unit(call.enter_ns);
        } else if call.enter_ns >= th.last_exit_ns {
            gap = Some(call.enter_ns - th.last_exit_ns);
        }
        th.last_exit_ns = th
            .last_exit_ns
            .max(call.enter_ns.saturating_add(call.duration_ns));
        let k = d.k;
        // Whether any series was tested, and whether any test was an outlier (`run`
        // mirrors the last test of a series): the bins are marked once per call.
        let mut tested = false;
        let mut outlying = false;
        // Time lost to this call's outliers (see `LostBins`).
        let mut lost = 0.0f32;
        // 2. The gap channel (off-CPU / user time between calls).
        let ts = call.enter_ns;
        if let Some(g) = gap {
            let ci = th.chan_index(GAP_KEY, k, d.max_chans);
            if let Some(ch) = ci.and_then(|ci| th.chan_mut(ci, k)) {
                let x = g as f32;
                let pools = &mut self.pools;
                let mut cold = ch.cold;
                if let Some(r) = feed(
                    ch.dur,
                    &mut cold,
                    ch.dur_ring,
                    GAP_KEY,
                    pools,
                    false,
                    x,
                    ts,
                    d,
                    &mut lost,
                ) {
                    tested = true;
                    outlying |= ch.dur.run;
                    if let Some(run) = r {
                        confirmed.get_or_insert((run, GAP_KEY, false));
                    }
                }
            }
        }
        // 3. The syscall's execution time and frequency channels (never the gap
        // channel's key: `ingest_one` read that id as unknown).
        let key = call.syscall.0;
        // Whether the thread's own execution-time baseline judged this call.
        let mut own_judged = false;
        let ci = th.chan_index(key, k, d.max_chans);
        match ci {
            Some(ci) => {
                let mut key_tested = false;
                // (The rings always match the channels, so the parts are always there.)
                if let Some(ch) = th.chan_mut(ci, k) {
                    let last = *ch.last_enter_ns;
                    let ia = (ch.dur.len > 0 && ts >= last).then(|| ts - last);
                    *ch.last_enter_ns = ts.max(1);
                    let pools = &mut self.pools;
                    let x = call.duration_ns as f32;
                    let mut cold = ch.cold;
                    if let Some(r) = feed(
                        ch.dur,
                        &mut cold,
                        ch.dur_ring,
                        key,
                        pools,
                        false,
                        x,
                        ts,
                        d,
                        &mut lost,
                    ) {
                        own_judged = ch.dur.baseline.gate_usable();
                        key_tested = true;
                        outlying |= ch.dur.run;
                        if let Some(run) = r {
                            confirmed.get_or_insert((run, key, false));
                        }
                    }
                    if let Some(x) = ia {
                        let x = -(x as f32);
                        if let Some(r) = feed(
                            ch.ia, &mut cold, ch.ia_ring, key, pools, true, x, ts, d, &mut lost,
                        ) {
                            key_tested = true;
                            outlying |= ch.ia.run;
                            if let Some(run) = r {
                                confirmed.get_or_insert((run, key, true));
                            }
                        }
                    }
                }
                if key_tested {
                    tested = true;
                    if key != GAP_KEY && SyscallId(key).subsystem().is_io() {
                        th.mark_tested_io(bin);
                    }
                }
            }
            None => {
                c.untracked_calls += 1;
                if self.overflow.is_none() {
                    self.overflow = EpochSketch::new(
                        self.params.sketch_width,
                        self.params.sketch_depth,
                        SamplerConfig::default(),
                    )
                    .ok();
                }
                let calls = self
                    .overflow
                    .as_mut()
                    .map_or(0, |sk| sk.add_estimate(overflow_key(th.tid, key), 1).0);
                // A syscall that recurs (k calls beyond the channels in this sketch
                // epoch, enough to fill one moving average) takes an idle channel for
                // its next calls. Without the count, rare syscalls took turns at the
                // idle channels, none ever learned, and each swap cost the analysis
                // of calls that could not be judged.
                if calls >= k as u64
                    && th
                        .recycle_chan(key, k, ts, RECYCLE_FRESH_NS, d.window_ns)
                        .is_some()
                {
                    c.recycled_channels += 1;
                }
                let (w, b) = ((key / 64) as usize, key % 64);
                if self.overflow_ids.len() <= w {
                    self.overflow_ids.resize(w + 1, 0);
                }
                if let Some(word) = self.overflow_ids.get_mut(w) {
                    *word |= 1 << b;
                }
            }
        }
        if tested {
            th.mark_tested(bin);
        }
        if outlying {
            th.outlying.mark(bin);
            if lost > 0.0 {
                th.add_lost(bin, lost / d.bin_ns as f32);
            }
        }
        // 4. A call of a kind with a baseline that stayed stuck as long as an open one
        //    must (see `resumed_stuck_episode`); cheap to rule out, as no such call is
        //    shorter than the unit gap plus the persistence.
        if call.duration_ns >= d.gap_ns.saturating_add(d.persistence_ns) {
            if let Some(e) = resumed_stuck_episode(th, call, d, &self.params) {
                if !th.dirty {
                    th.dirty = true;
                    self.dirty_threads += 1;
                }
                th.last_episode_ns = e.alarm_ns.max(1);
                th.push_episode(e);
            }
        }
        // 5. A long call no baseline can judge (see `blocked_episode`).
        let longest_ns = u64::from(th.longest_call_us) * 1000;
        th.longest_call_us = th
            .longest_call_us
            .max((call.duration_ns / 1000).min(u64::from(u32::MAX)) as u32);
        let limit_ns = blocked_limit_ns(longest_ns, d);
        if !own_judged && call.duration_ns >= limit_ns {
            let pooled = pooled_mean(&self.pools, call.syscall.0, d);
            let stop = Stop {
                enter_ns: call.enter_ns,
                key: call.syscall.0,
                elapsed_ns: call.duration_ns,
                limit_ns,
                mean: pooled,
            };
            if let Some(e) = blocked_episode(th, stop, d, &self.params) {
                // (Its baselines stay clean: no baseline judged the call.)
                th.last_episode_ns = e.alarm_ns.max(1);
                th.push_episode(e);
            }
        }
        // Rare (a receive that found nothing, a futex whose word changed): one branch on
        // the per-call path. A futex's EAGAIN says nothing about clients, so receives only
        // (inline: out of line, the guest's per-call loop measured 1-4 % slower).
        if call.ret == Some(crate::syscalls::WOULD_BLOCK) && call.syscall.receives() {
            if ci.is_some() {
                th.would_block.note(call.enter_ns);
            } else {
                // No channel holds its entry, so no wait can be matched to it: the thread
                // is judged as one with no such receive on record.
                th.would_block = WouldBlock::default();
            }
        }
        if let Some((run, key, frequency)) = confirmed {
            let refractory_over = run.saturating_sub(th.last_episode_ns) >= d.refractory_ns
                || th.last_episode_ns == 0;
            if !th.unit_has_episode || refractory_over {
                th.unit_has_episode = true;
                th.last_episode_ns = run.max(1);
                if !th.dirty {
                    th.dirty = true;
                    self.dirty_threads += 1;
                }
                let epoch_start = self
                    .next_tick_ns
                    .map_or(call.enter_ns, |t| t.saturating_sub(d.cadence_ns));
                let frac = (call.enter_ns.saturating_sub(epoch_start) as f32 / d.cadence_ns as f32)
                    .clamp(0.05, 1.0);
                let over = self
                    .overflow
                    .as_ref()
                    .map(|sk| (sk, self.overflow_ids.as_slice(), frac));
                let top = snapshot(th, &self.pools, d, over);
                th.push_episode(Episode {
                    alarm_ns: run,
                    unit_start_ns: th.unit_start_ns,
                    key,
                    frequency,
                    stall: false,
                    busy: false,
                    mid_request: false,
                    top,
                });
            }
        }
    }

    /// A cadence tick at `tick_ns`: rotate the baseline epochs, then report.
    fn tick(&mut self, tick_ns: u64, c: &EngineCounters) -> Report {
        let report = self.evaluate(
            tick_ns.saturating_sub(self.d.window_ns),
            tick_ns,
            Onset::Detect,
            Trigger::Cadence,
            c,
        );
        // Kept while the quota goes on throttling (a lull of a few seconds does not end
        // it, a whole cadence without a throttled switch does), whichever rule found
        // this report's anomaly; set by the first report that found the quota.
        // (Summed only while a quota is remembered: no work per tick otherwise.)
        let seen = tick_ns.min(self.now_ns);
        let cadence_bins = (self.d.cadence_ns / self.d.bin_ns).max(1);
        let last = seen / self.d.bin_ns;
        let throttling = || {
            self.switches_between(last.saturating_add(1).saturating_sub(cadence_bins), last)
                .throttled
                > 0
        };
        self.quota_before = self.quota_before.filter(|_| throttling()).or_else(|| {
            report
                .cpu_taken
                .filter(|c| c.throttled)
                .map(|c| c.throttled_share_before)
        });
        // Likewise the loss's share before, kept while the reports find the loss (the
        // first one's: later ones measure from it).
        // A lull of a few seconds does not end it, a whole cadence without a
        // retransmission does (as the quota's).
        let retransmitting = || {
            self.segments.as_ref().is_some_and(|s| {
                s.between(last.saturating_add(1).saturating_sub(cadence_bins), last)
                    .retransmitted
                    > 0
            })
        };
        self.loss_before = self.loss_before.filter(|_| retransmitting()).or_else(|| {
            report
                .tcp_retransmits
                .filter(|l| l.lossy && report.verdict == Verdict::External)
                .map(|l| PathBaseline {
                    share: l.share_before,
                    retransmitted: l.per_second_before,
                    sent: l.sent_per_second_before,
                })
        });
        self.rotate_epoch();
        report
    }

    fn rotate_epoch(&mut self) {
        // One thread's outlier only taints its own baselines; two or more threads in
        // the same epoch mean the target may be anomalous: nobody learns from it.
        let target_clean = (self.dirty_threads as usize) < 2;
        let max_n = self.d.max_n;
        let (min_n, min_epochs, sigma) = (self.d.min_n, self.d.min_epochs, self.d.time_th.sigma);
        let epoch_start = self.now_ns.saturating_sub(self.d.cadence_ns);
        for t in self.threads.iter_mut() {
            t.longest_call_us -= t.longest_call_us / 8;
            // Only a working thread's habit moves on: a thread stopped in a wait keeps
            // the count it had when it entered it.
            if t.last_seen_ns >= epoch_start {
                t.would_block.decay();
            }
            let clean = target_clean && !t.dirty;
            if t.cold.len() < t.chans.len() {
                // Without cold records and with nothing learnt, a rotation leaves every
                // record at its default and every gate as it is: keep them absent.
                let learnt = t.chans.iter().any(Chan::learning);
                if !learnt {
                    t.dirty = false;
                    continue;
                }
                materialize_cold(&mut t.cold, t.chans.len(), t.chans.capacity());
            }
            for (ch, cold) in t.chans.iter_mut().zip(t.cold.iter_mut()) {
                cold.dur.baseline.rotate(&mut ch.dur.baseline, clean, max_n);
                ch.dur
                    .baseline
                    .refresh(&cold.dur.baseline, min_n, min_epochs, sigma);
                cold.ia.baseline.rotate(&mut ch.ia.baseline, clean, max_n);
                ch.ia
                    .baseline
                    .refresh(&cold.ia.baseline, min_n, min_epochs, sigma);
            }
            t.dirty = false;
        }
        let clean = target_clean;
        self.dirty_threads = 0;
        if let Some(sk) = self.overflow.as_mut() {
            sk.rotate();
        }
        for p in &mut self.pools {
            p.dur.rotate(clean, max_n * 16.0);
            p.ia.rotate(clean, max_n * 16.0);
            p.refresh(&self.d);
        }
        let epochs = self.activity_events.len().max(1);
        self.epoch_slot = (self.epoch_slot + 1) % epochs;
        let s = self.epoch_slot * self.stride;
        if let Some(row) = self.activity.get_mut(s..s + self.stride) {
            row.fill(Activity::default());
        }
        if let Some(e) = self.activity_events.get_mut(self.epoch_slot) {
            *e = 0;
        }
        if let Some(s) = self.signs.as_mut() {
            s.clear_epoch(self.epoch_slot);
        }
    }

    /// Counts a switch away from the CPU as a context switch in the vital signs, once
    /// counters arrive: perf's sampled counters carry no switch counts, and without them
    /// the rule for a syscall loop (calls that never block) cannot judge.
    #[cold]
    #[inline(never)]
    fn add_switch(&mut self, ev: &SyscallEvent) {
        let epochs = self.activity_events.len();
        let one = PerfCounters {
            context_switches: 1,
            ..PerfCounters::default()
        };
        if let Some(s) = self.signs.as_mut() {
            s.add(
                ev.tid,
                ev.ts_ns,
                0,
                &one,
                self.epoch_slot,
                epochs,
                self.d.cadence_ns,
                self.params.max_threads,
            );
        }
    }

    /// Takes a TCP segment record into the target's bins (allocated on the first).
    #[cold]
    #[inline(never)]
    fn add_segments(&mut self, ev: &SyscallEvent, c: &mut EngineCounters) {
        let Some((sent, retransmitted)) = ev.segments() else {
            return;
        };
        let bin_ns = self.d.bin_ns;
        let taken = self
            .segments
            .get_or_insert_with(|| Box::new(SegmentBins::new(bin_ns)))
            .add(ev.ts_ns, sent, retransmitted);
        c.segment_records += u64::from(taken);
    }

    /// Takes a record's counters into the vital signs (a counters record's interval, or
    /// the call they were measured over). Out of line: sources without counters never
    /// come here, and the per-call path stays as it was.
    #[cold]
    #[inline(never)]
    fn add_counters(&mut self, ev: &SyscallEvent, c: &mut EngineCounters) {
        let Some(p) = ev.perf else {
            return;
        };
        let (end, interval) = match ev.kind {
            EventKind::Counters => (ev.ts_ns, ev.duration_ns),
            EventKind::Complete => (ev.ts_ns.saturating_add(ev.duration_ns), ev.duration_ns),
            _ => (ev.ts_ns, 0),
        };
        let epochs = self.activity_events.len();
        let tracked = self.signs.get_or_insert_default().add(
            ev.tid,
            end,
            interval,
            &p,
            self.epoch_slot,
            epochs,
            self.d.cadence_ns,
            self.params.max_threads,
        );
        c.counter_records += 1;
        if !tracked {
            c.untracked_counter_records += 1;
        }
    }

    /// Diagnoses the window `[from, to]` (PerfCompass Fig. 3) and builds a full report.
    pub fn evaluate(
        &self,
        from: u64,
        to: u64,
        onset: Onset,
        trigger: Trigger,
        c: &EngineCounters,
    ) -> Report {
        let d = &self.d;
        // A thread's earliest outlier at or after `lo` that lasted (see
        // `min_persistence`), with its persistence: a blip before the fault does not
        // hide the thread's later, real impact, and blips alone make no anomaly. The
        // flags say whether the episode stopped the thread (its stuck call, or a stall),
        // and whether the thread is still stuck in a call at `to`; the episode's
        // `mid_request`, whether any stop of the thread in the range was mid-request.
        // A call is known to be in flight only up to the latest event seen: an on-demand
        // alarm can name a time the data has not reached yet (a live perf pipeline lags
        // by seconds), and measuring open calls up to it would make every thread look
        // stuck (measured: a live PostgreSQL control read external, τ = 1.0).
        let seen = to.min(self.now_ns);
        let stops = self.stops(seen);
        let first = |t: &Thread, lo: u64| -> Option<(Episode, f64, bool, bool)> {
            // A thread still in the call it normally waits in (see `usual_wait`: for its
            // clients, or for a pool's next task), or parked right after closing a
            // connection (see `parked_after_close`), has run out of work, not into a
            // fault: when its clients stopped sending, or left, every report of a healthy
            // MariaDB read external (its sessions in poll, its InnoDB threads in futex).
            // Unless the whole target stopped (`stops`): an idle server's periodic threads
            // go on calling, and a frozen one's last records, as perf delivers them, leave
            // most threads in their usual waits. A silent target its host saw asleep
            // did not stop: it waits (an idle nginx has no periodic thread at all). A
            // thread that reads until a receive finds nothing waits for its clients only
            // when it entered the wait right after one (see `stuck_by_fault`).
            let stuck = self
                .lasting_inflight(t, seen, &stops)
                .filter(|e| self.stuck_by_fault(t, e, &stops))
                .map(|e| Episode {
                    mid_request: self.stopped_mid_request(t, e.key, &stops),
                    ..e
                });
            let mut best = stuck.filter(|e| e.alarm_ns >= lo).map(|e| (e, 1.0, true));
            let still = stuck.is_some();
            for e in t
                .episodes
                .iter()
                .filter(|e| e.alarm_ns >= lo && e.alarm_ns <= to)
            {
                if best.is_some_and(|(b, _, _)| b.alarm_ns <= e.alarm_ns) {
                    continue;
                }
                // A stall stopped the thread, like a stuck call: it lasted by definition.
                let stopped = stuck.is_some() || e.stall;
                // A lasting outlier of execution time or gaps must also have cost the
                // thread time (see `min_lost_share`); a higher call rate costs none.
                let costly = || {
                    stopped
                        || e.frequency
                        || self.lost_share(t, e.alarm_ns, to) >= self.params.min_lost_share
                };
                if let Some(p) = self.persistence(t, e.alarm_ns, to, stopped) {
                    if costly() {
                        best = Some((*e, p, e.stall));
                    }
                }
            }
            // A stop mid-request in the range says what the thread waits on, whichever
            // episode came first (the wait's own outlier on its execution time, confirmed
            // at its return, precedes the stop it is part of): its vote (see `Vote`).
            let mid_request = stuck.is_some_and(|e| e.mid_request)
                || t.episodes
                    .iter()
                    .any(|e| e.mid_request && e.alarm_ns >= lo && e.alarm_ns <= to);
            best.map(|(e, p, stopped)| (Episode { mid_request, ..e }, p, stopped, still))
        };
        // The target-level onset. Continuous mode: the first confirmed outlier
        // corroborated by `min_affected_threads` threads within `corroboration_seconds`
        // (an isolated thread's alarm is not an anomaly of the target). On demand: the alarm time T, as in the
        // paper (σ then measures how soon after T each thread showed it), or an earlier
        // corroborated onset in [T − W, T] when the alarm came late: the start of the
        // largest wave of alarms (each within `corroboration_seconds` of the one before),
        // the earliest of equals. Not the earliest cluster: a burst of two MariaDB
        // background threads 4.1 s before a CPU cap was T0, and the six sessions the cap
        // slowed within 1.2 s read σ 4.0–5.2 s (τ 0.44, internal). A wave, not a window of
        // `corroboration_seconds`: packet loss reached MariaDB's sessions over 2.6 s, and
        // the busiest 1-s window began 1.2 s in, leaving out the first two. Continuous mode
        // reports an anomaly as it begins, so there the earliest cluster is the onset.
        let lo = match onset {
            Onset::At(t) => t.saturating_sub(d.window_ns).max(from),
            Onset::Detect | Onset::Calibration => from,
        };
        // On demand, only an anomaly that had begun by the alarm is what the alarm
        // reports, give or take α plus `persistence_seconds`: the lag of the first
        // corroborated outliers (Apache workers at tens of calls/s under a CPU hog
        // corroborated 2.3 s after an alarm at fault + 10 s). Offline the data runs on
        // past the alarm, and a fault that began 10–20 s after it was answered as if it
        // were the alarm's (measured on the real recordings: alarms 20 s before a CPU cap
        // read external, 20 s before a runaway query external); a live plugin, which
        // cannot see the future, says `none` there.
        let begun_by_alarm = |at: u64| match onset {
            Onset::At(t) => at <= t.saturating_add(d.alpha_ns + d.persistence_ns),
            Onset::Detect | Onset::Calibration => true,
        };
        // (alarm, still stuck in its call at `to`, whichever episode came first: a lock's
        // waiter may have shown an outlier, or been woken from the same wait, before)
        let mut alarms: Vec<(u64, bool)> = self
            .threads
            .iter()
            .filter_map(|t| first(t, lo))
            .map(|(e, _, _, still)| (e.alarm_ns, still))
            .collect();
        alarms.sort_unstable();
        let need = self.params.min_affected_threads.max(1);
        // Threads all still stuck in a call at `to` are stopped at the same time, however
        // far apart their calls crossed the stuck limit (which depends on each thread's
        // baseline): a lock's waiters, whose limits differ by seconds.
        // Alarms in the wave from each alarm on (each within `corroboration_seconds` of the
        // one before: a fault's victims trickle in over seconds), in one backward pass.
        let mut wave = vec![1usize; alarms.len()];
        for i in (1..alarms.len()).rev() {
            let joined = matches!(
                (alarms.get(i - 1), alarms.get(i)),
                (Some(a), Some(b)) if b.0 - a.0 <= d.corroboration_ns
            );
            if let (true, Some(&after)) = (joined, wave.get(i)) {
                if let Some(w) = wave.get_mut(i - 1) {
                    *w = after + 1;
                }
            }
        }
        let mut clusters = alarms
            .windows(need)
            .enumerate()
            .filter(|(_, w)| match (w.first(), w.last()) {
                (Some(a), Some(b)) => {
                    b.0 - a.0 <= d.corroboration_ns || w.iter().all(|&(_, stuck)| stuck)
                }
                _ => false,
            })
            .filter_map(|(i, w)| Some((w.first()?.0, wave.get(i).copied().unwrap_or(1))))
            .filter(|&(at, _)| begun_by_alarm(at));
        let corroborated = match onset {
            Onset::At(_) => clusters
                .fold(None, |best: Option<(u64, usize)>, c| match best {
                    Some(b) if b.1 >= c.1 => Some(b),
                    _ => Some(c),
                })
                .map(|(at, _)| at),
            Onset::Detect | Onset::Calibration => clusters.next().map(|(at, _)| at),
        };
        // On demand the alarm corroborates: a busy thread that stopped and stayed stopped
        // (blocked on a lock, stuck in a call) is then an anomaly on its own — the one
        // sysbench session a held table lock stops (measured on MariaDB: 1 of 6 busy
        // threads). Continuous mode keeps asking for `min_affected_threads`: a single
        // thread stopping is not yet news about the target.
        let lone = match onset {
            Onset::At(_) if corroborated.is_none() && self.params.stall_min_calls > 0 => self
                .threads
                .iter()
                .filter_map(|t| self.lasting_stop(t, (lo, to, seen), &stops))
                .min()
                .filter(|&at| begun_by_alarm(at)),
            _ => None,
        };
        // A target whose load one thread carries (a single-threaded event loop: nginx's
        // one busy worker) has no second thread to corroborate: on demand the alarm
        // does (in continuous mode, the scheduler's account; below), for that thread's
        // lasting outlier when it was busy at its onset and no other thread was
        // (measured: nginx under a CPU hog read `none`, its worker's `sendfile` 29×
        // slower). Only an outlier of a call's execution time, not of its
        // usual wait nor of a frequency: a lone worker whose requests stop waits longer
        // and calls less, which is no fault. Not any lone outlier: letting one thread
        // suffice everywhere made idle PostgreSQL and MariaDB read external, a background
        // thread's waits lengthened once the load was gone (see EVALUATION.md, session 37).
        let sole = match onset {
            Onset::At(_) | Onset::Detect
                if corroborated.is_none() && lone.is_none() && !alarms.is_empty() =>
            {
                let busy_at = |t: &Thread, at: u64| at_activity_floor(t, at, d, &self.params);
                let mut busy_outliers = self.threads.iter().filter_map(|t| {
                    let e = first(t, lo)?.0;
                    // (A stall or a returned stuck call lasted by definition, but a
                    // single pause of one thread says nothing of its peers: measured on
                    // a generated event loop, one 1.5-s pause read external. And the
                    // gap channel is no call.)
                    let work =
                        !e.frequency && !e.stall && e.key != GAP_KEY && !usual_wait(t, e.key, d);
                    busy_at(t, e.alarm_ns).then_some((t.tid, e.alarm_ns, work))
                });
                match (busy_outliers.next(), busy_outliers.next()) {
                    (Some((tid, at, true)), None)
                        if begun_by_alarm(at)
                            && !self.threads.iter().any(|t| t.tid != tid && busy_at(t, at)) =>
                    {
                        Some(at)
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        // Continuous mode has no alarm to corroborate the lone thread: the scheduler's
        // account does when, in the `persistence_seconds` after its onset, other
        // processes took the CPU it gave up (`taken`) and the CPU stopped going idle
        // (`saturated`): a CPU neighbour, the environment (measured: nginx's worker under
        // a CPU hog, switches handing the CPU to another process 0.01 → 1.00, idle 0.98
        // → 0.00, read `none` in continuous mode). Only that span: a hog that came later
        // did not cause the outlier. Of the 33 recordings of sessions 38–39, only CPU
        // hogs and memory limits saturated the CPU in an on-demand report.
        let sole = match onset {
            Onset::Detect => sole.filter(|&at| {
                self.cpu_taken(at, None, seen, None)
                    .is_some_and(|c| c.taken && c.saturated)
            }),
            Onset::At(_) | Onset::Calibration => sole,
        };
        // Likewise a CPU burner at the alarm: a runaway query holds a CPU without a single
        // syscall, and the sessions it slows may not slow enough to show outliers
        // (measured on MariaDB: the runaway session at 0.80 of a CPU, client p99 ×2, no
        // corroborated outlier). No healthy thread measured came near a burner's share.
        let alone_burners = match onset {
            Onset::At(t) if corroborated.is_none() && lone.is_none() && sole.is_none() => {
                Some((t, self.cpu_burners(t, seen))).filter(|(_, b)| !b.is_empty())
            }
            _ => None,
        };
        let burner_alone = alone_burners.as_ref().map(|&(t, _)| t);
        // Likewise a CPU quota throttling the target in the span before the alarm: a
        // quota delays requests between calls more than in them, and a single busy
        // thread has no peer to corroborate what its calls show (measured: nginx's one
        // worker under a cap, client p99 ×22, no lasting outlier; see EVALUATION.md,
        // session 38). No recording without a cap had a throttled switch (ThrottleTest).
        // Continuous mode has no alarm: the quota's anomaly begins where the target's
        // latest throttled stretch does (see `quota_onset`), once that has lasted
        // `persistence_seconds` (a throttling burst of a second is no news, as a
        // blip of outliers is none), and the evidence is the span after it and the span
        // at the latest data.
        // A quota an earlier cadence report found, still throttling the target: the
        // throttled share before it (see `quota_before`).
        let ongoing = match onset {
            Onset::Detect => self.quota_before.filter(|_| self.throttled_now(seen)),
            Onset::Calibration | Onset::At(_) => None,
        };
        let quota_at_alarm = match onset {
            Onset::At(t) => self
                .cpu_taken(t.saturating_sub(self.d.persistence_ns), Some(t), seen, None)
                .filter(|c| c.throttled)
                .map(|c| (t, c)),
            Onset::Detect if corroborated.is_none() => self
                .quota_onset(from, seen)
                .filter(|&(t0, _)| seen.saturating_sub(t0) >= self.d.persistence_ns)
                .and_then(|(t0, reaches_from)| {
                    // Back to the window's start no span before is left to rise from, and
                    // after a lull the spans before hold the same quota: an ongoing one's
                    // share before it is the baseline.
                    let before = match (ongoing, reaches_from) {
                        (None, true) => return None,
                        (before, _) => before,
                    };
                    Some((t0, self.cpu_taken(t0, Some(seen), seen, before)?))
                })
                .filter(|(_, c)| c.throttled),
            Onset::Detect | Onset::Calibration => None,
        };
        let quota_alone =
            quota_at_alarm.filter(|_| corroborated.is_none() && lone.is_none() && sole.is_none());
        // Likewise packet loss in the TCP account: a non-blocking server's calls do not
        // slow when its segments are lost, the kernel retransmits behind them (measured:
        // nginx under 10 % loss, client p99 ×110–140, no call slower; see `crate::net_loss`).
        // On demand the span before the alarm, as for a quota; in continuous mode from
        // where the latest run of lossy spans began, once it lasted `persistence_seconds`.
        // Either needs samples before it to have risen from.
        // A loss an earlier cadence report found, still going on: the share before it,
        // in place of the spans before (which then hold the loss or left the window).
        let ongoing_loss = match onset {
            Onset::Detect => self.loss_before,
            Onset::Calibration | Onset::At(_) => None,
        };
        let at_alarm = match onset {
            Onset::At(t) => self
                .retransmits(t.saturating_sub(self.d.persistence_ns), t, from, None)
                .map(|l| (t, l)),
            Onset::Detect | Onset::Calibration => None,
        };
        // An anomaly by itself only while the path goes on sending: a service that stops
        // accepting makes the kernel retransmit its handshakes while it sends less.
        let loss_at_alarm = match onset {
            Onset::At(_) => at_alarm,
            Onset::Detect if corroborated.is_none() => self
                .loss_onset(from, seen, ongoing_loss)
                .filter(|&(t0, _)| seen.saturating_sub(t0) >= self.d.persistence_ns)
                .and_then(|(t0, before)| {
                    Some((t0, self.retransmits(t0, seen, from, Some(before))?))
                }),
            Onset::Detect | Onset::Calibration => None,
        }
        .filter(|(_, l)| l.lossy && l.steady);
        let loss_alone = loss_at_alarm.filter(|_| {
            corroborated.is_none()
                && lone.is_none()
                && sole.is_none()
                && burner_alone.is_none()
                && quota_alone.is_none()
        });
        let cluster = corroborated
            .or(lone)
            .or(sole)
            .or(burner_alone)
            .or(quota_alone.map(|(t, _)| t))
            .or(loss_alone.map(|(t, _)| t));
        let t0 = match onset {
            // An alarm usually comes after the slowdown began: an earlier corroborated
            // onset within the window wins; otherwise the alarm time, as in the paper.
            Onset::At(t) => Some(cluster.map_or(t, |c| c.min(t))),
            Onset::Detect | Onset::Calibration => cluster,
        };
        let mut findings = Vec::new();
        let mut onsets = Vec::new();
        let mut votes = Vec::new();
        let mut listed: Vec<AffectedThread> = Vec::new();
        let mut rank = Ranking::default();
        let (mut active, mut active_io) = (0u64, 0u64);
        if let Some(t0) = t0 {
            let (lo, hi) = (t0 / d.bin_ns, t0.saturating_add(d.alpha_ns) / d.bin_ns);
            // Threads outside τ's population that went on unaffected, under the activity
            // floor or not yet tested (no baseline learned): (calls over α after T0,
            // tested on I/O).
            let mut quiet: Vec<(u64, bool)> = Vec::new();
            // The fewest calls over the α before T0 of a stopped thread that joined the
            // population below the floor.
            let mut stopped_floor: Option<u64> = None;
            for t in self.threads.iter() {
                let calls_after = t.calls().sum(lo, hi);
                let busy = calls_after >= self.params.min_active_calls as u64;
                let testable = busy && t.tested().any(lo, hi);
                if testable {
                    active += 1;
                    if t.tested_io().any(lo, hi) {
                        active_io += 1;
                    }
                }
                let affected = first(t, t0);
                // Untested (no baseline of its own yet), it went on only if it was as
                // busy before the onset: a thread the onset started or woke says
                // nothing. (Slowed, it would have shown outliers against the pooled
                // baselines, as far as a stop could be seen at all.) Not on I/O: none of
                // its channels was tested, so filtering mode's population leaves it out.
                let untested_busy = busy
                    && !testable
                    && self.calls_between(t, t0.saturating_sub(d.alpha_ns), t0)
                        >= f64::from(self.params.min_active_calls);
                let tested_quiet = !busy && t.tested().any(lo, hi);
                if affected.is_none() && calls_after > 0 && (untested_busy || tested_quiet) {
                    quiet.push((calls_after, t.tested_io().any(lo, hi)));
                }
                if let Some((e, persistence, stuck, _)) = affected {
                    // Only a thread working at T0 can have been parked after it (an idle
                    // one is judged by its own activity, below).
                    let start = if testable {
                        resumed_at(t, t0.max(e.unit_start_ns), e.alarm_ns, d)
                    } else {
                        t0.max(e.unit_start_ns)
                    };
                    let sigma = e.alarm_ns.saturating_sub(start) as f64 / 1e9;
                    let io = e.key != GAP_KEY && SyscallId(e.key).subsystem().is_io();
                    let onset_calls = self.calls_between(t, t0, e.alarm_ns);
                    // Direct in its own activity: idle at T0, it showed the fault within
                    // its first `direct_within_calls` calls (see the parameter).
                    let by_activity = !testable
                        && !stuck
                        && sigma >= self.params.alpha_seconds
                        && self.params.direct_within_calls > 0
                        && onset_calls <= f64::from(self.params.direct_within_calls);
                    // A thread the fault stopped (stuck in one call) cannot be busy after
                    // T0, yet it is part of the population τ is a share of: without it a
                    // lock that blocks 4 of 10 backends reads as 2 direct of 2 active.
                    // Likewise a thread directly affected in its own activity.
                    let stopped = stuck && !testable && sigma < self.params.alpha_seconds;
                    if stopped {
                        let before =
                            self.calls_between(t, t0.saturating_sub(d.alpha_ns), t0) as u64;
                        stopped_floor = Some(stopped_floor.map_or(before, |f| f.min(before)));
                    }
                    if stopped || by_activity {
                        active += 1;
                        if io {
                            active_io += 1;
                        }
                    }
                    findings.push(Finding {
                        onset_seconds: sigma,
                        io,
                        by_activity,
                    });
                    onsets.push(sigma);
                    votes.push(if e.mid_request {
                        Vote::WaitsOnPeer
                    } else {
                        Vote::Channel(e.key)
                    });
                    listed.push(AffectedThread {
                        tid: t.tid,
                        onset_seconds: sigma,
                        syscall: if e.key == GAP_KEY && e.stall {
                            "stall".to_string()
                        } else if e.key == GAP_KEY {
                            "cpu_gap".to_string()
                        } else {
                            SyscallId(e.key).name().to_string()
                        },
                        channel: if e.frequency { "frequency" } else { "time" }.to_string(),
                        persistence,
                        onset_calls,
                        calls_per_second_before: self.calls_between(
                            t,
                            t0.saturating_sub(d.persistence_ns),
                            t0,
                        ) / (d.persistence_ns as f64 / 1e9).max(1e-9),
                        active: testable,
                        lost_share: if stuck {
                            1.0
                        } else {
                            self.lost_share(t, e.alarm_ns, to)
                        },
                    });
                    rank.add(
                        &e.top,
                        self.params.min_time_increase as f32,
                        self.params.min_frequency_increase as f32,
                    );
                }
            }
            // Stopped threads joined the population below the floor, so threads that
            // busy could show the fault; those as busy after T0 that went on unaffected
            // belong to it too. Measured: a PostgreSQL table lock stopped the 4 TPC-B
            // backends (118–134 calls/s before), while 7 select-only backends at
            // 106–173 calls/s went on, all under the 200 calls/s floor: τ read 4 of 4.
            // Likewise busy threads with no baseline yet: a stop needs none to show (the
            // stopped threads' calls were judged by the pooled baseline), and going on at
            // their pace they showed none. Measured: 30 s after a MariaDB started, too
            // soon for the sessions' own baselines, row locks stopped 2 of 6 sysbench
            // sessions while 4 went on at 570–670 calls/s: τ read 2 of 2, external.
            if let Some(floor) = stopped_floor {
                for &(_, io) in quiet.iter().filter(|(c, _)| *c >= floor.max(1)) {
                    active += 1;
                    if io {
                        active_io += 1;
                    }
                }
            }
        }
        // Corroborated: `min_affected_threads` lasting outliers within
        // `corroboration_seconds` of each other
        // somewhere in the window (on demand too: outliers scattered after an alarm are
        // not one anomaly).
        let found = cluster.is_some()
            && (lone.is_some()
                || sole.is_some()
                || burner_alone.is_some()
                || quota_alone.is_some()
                || loss_alone.is_some()
                || findings.len() >= self.params.min_affected_threads);
        // Found by a burner alone, T0 is the alarm time the burners were measured from.
        let burners = match (t0, alone_burners) {
            (_, Some((_, b))) => b,
            (Some(t0), None) if found => self.cpu_burners(t0, seen),
            _ => Vec::new(),
        };
        // On demand, an anomaly no thread showed within α of T0 began later than the
        // alarm says the target became slow: it is not what the alarm reported, and
        // diagnosing it with onsets counted from the alarm would make every thread
        // indirect (τ = 0, "internal"). Measured: a 2-s slowdown 14 s after the alarm of a
        // PostgreSQL control (client p99 3 → 39 ms for those 2 s) read internal, 0 of 4
        // direct. A CPU burner is the exception: a runaway thread makes no syscalls, so
        // the threads it starves may show it only later; so is a quota throttling the
        // target at the alarm, measured on the scheduler's records, not on the calls
        // (the anomaly then rests on the quota, as when no call showed one).
        let late = matches!(onset, Onset::At(_))
            && burners.is_empty()
            && !findings.iter().any(|f| f.direct(self.params.alpha_seconds));
        let by_quota = quota_alone.or(quota_at_alarm.filter(|_| late));
        let by_loss = loss_alone.or(loss_at_alarm.filter(|_| late && by_quota.is_none()));
        let late_only = late && by_quota.is_none() && by_loss.is_none();
        let anomalous = found && !late_only;
        let top_time = rank.by_time(self.params.top_n);
        let top_freq = rank.by_frequency(self.params.top_n);
        let top_io = top_time
            .first()
            .or(top_freq.first())
            .is_some_and(|r| r.subsystem.is_io());
        let th = diagnosis::Thresholds {
            alpha_seconds: self.params.alpha_seconds,
            beta_seconds: self.params.beta_seconds,
            external: self.params.external_threshold,
            internal: self.params.internal_threshold,
        };
        let pop = Population { active, active_io };
        let diff = if anomalous {
            diagnosis::differentiate(&findings, pop, th, top_io)
        } else {
            diagnosis::differentiate(&[], pop, th, false)
        };
        let diff = diagnosis::with_cpu_burners(diff, burners.len());
        // Where the service is known to be slow: the alarm on demand; in continuous mode
        // the latest data, since the anomaly is reported as ongoing.
        let alarm = match onset {
            Onset::At(t) => t,
            Onset::Detect | Onset::Calibration => seen,
        };
        let cpu_taken = match (t0, by_quota) {
            // What the anomaly rests on: the span before the alarm.
            (_, Some((_, c))) => Some(c),
            (Some(t0), None) if anomalous => self.cpu_taken(t0, Some(alarm), seen, ongoing),
            _ => None,
        };
        // The quota first: when both hold (a throttled thread's CPU went to another
        // process), the quota is the more specific cause.
        let diff = diagnosis::with_cpu_quota(
            diff,
            cpu_taken.is_some_and(|c| c.throttled),
            burners.len(),
            by_quota.is_some(),
        );
        let diff =
            diagnosis::with_cpu_neighbours(diff, cpu_taken.is_some_and(|c| c.taken), burners.len());
        // The TCP account over the span after the onset (what the anomaly rests on, when
        // the loss alone found it).
        let tcp_retransmits = match (t0, by_loss) {
            (_, Some((_, l))) => Some(l),
            (Some(t0), None) if anomalous => {
                // Only a whole span: a bin or two after an onset at the latest data would
                // let one healthy burst overrule the calls.
                let end = t0.saturating_add(self.d.persistence_ns);
                let after_onset = (end <= seen)
                    .then(|| self.retransmits(t0, end, from, ongoing_loss))
                    .flatten();
                // Or the span before the alarm, when the loss came after the onset
                // (the scheduler's account likewise tests both).
                match (after_onset, at_alarm) {
                    (Some(a), Some((_, l))) if !a.lossy && l.lossy => Some(l),
                    (a, l) => a.or(l.map(|(_, l)| l)),
                }
            }
            _ => None,
        };
        let diff = diagnosis::with_packet_loss(
            diff,
            tcp_retransmits.is_some_and(|l| l.lossy && l.steady),
            burners.len(),
            by_loss.is_some(),
        );
        // The TCP account names the network before the calls do (their votes follow
        // whichever calls the lost segments delayed), after the CPU and memory rules: it
        // decided the verdict, or confirms an external one.
        let packet_loss = diff.decided_by == DecisionPath::PacketLoss;
        let lossy_external =
            diff.verdict == Verdict::External && tcp_retransmits.is_some_and(|l| l.lossy);
        // The scheduler's account names the subsystem before the calls do: a thread of
        // the target burning a CPU, or other processes taking a CPU that no longer went
        // idle, slow every call their threads make, so the slowed calls' own classes
        // (a disk flush that waited for the CPU after the disk answered) mislead. Not
        // `taken` alone, even when it decided the verdict: kernel workers doing a disk
        // fault's I/O raise the foreign share too, while the CPU still goes idle
        // (measured: a MariaDB disk writer decided by the neighbour rule, idle 0.68 →
        // 0.51, named the CPU; hogs leave it idle in 0.00–0.03 of the switches).
        // Saturation only for an environment verdict: an internal one with CPU
        // scheduling would tell the on-call engineer to look for a loop in the service.
        let cpu_still_idle =
            cpu_taken.is_some_and(|c| c.idle_share_after > SaturationTest::IDLE_AFTER);
        let cpu_bound = !burners.is_empty()
            || (diff.verdict == Verdict::External
                && cpu_taken.is_some_and(|c| c.saturated || c.throttled))
            || (diff.decided_by == DecisionPath::CpuNeighbour && !cpu_still_idle)
            || matches!(
                diff.decided_by,
                DecisionPath::CpuBurner | DecisionPath::CpuThrottled
            );
        // Waits in page faults name memory before the CPU's account does: a memory
        // limit's reclaim runs in kernel workers that take the CPU as a hog would (the
        // neighbour and saturation tests fire; the neighbour rule's external verdict
        // stands, as other processes did take the CPU), and the calls that slowed are
        // whichever the threads made after their faults. Not over a burner (the
        // service's own loop is then the finding, and paging at most a consequence), nor
        // over a quota (its rule proved runnable threads stopped, and its hint names the
        // limit to raise first).
        let paging = burners.is_empty() && cpu_taken.is_some_and(|c| c.paging && !c.throttled);
        let subsystem = if diff.verdict == Verdict::None {
            crate::report::Subsystem::None
        } else if packet_loss {
            crate::report::Subsystem::NetworkIo
        } else if paging {
            crate::report::Subsystem::Memory
        } else if cpu_bound {
            crate::report::Subsystem::CpuScheduling
        } else if lossy_external {
            crate::report::Subsystem::NetworkIo
        } else {
            ranking::dominant_subsystem(&votes, top_time.first())
        };
        onsets.sort_by(|a, b| a.total_cmp(b));
        let onset_dist = if anomalous && !onsets.is_empty() {
            OnsetDistribution {
                count: onsets.len() as u64,
                min: quantile_sorted(&onsets, 0.0),
                p50: quantile_sorted(&onsets, 0.5),
                p90: quantile_sorted(&onsets, 0.9),
                max: quantile_sorted(&onsets, 1.0),
                mean: onsets.iter().sum::<f64>() / onsets.len() as f64,
            }
        } else {
            OnsetDistribution::default()
        };
        let (syscalls, events) = self.activity_summary(from, to);
        let quota = diff.verdict == Verdict::External && cpu_taken.is_some_and(|c| c.throttled);
        let names_loss =
            packet_loss || (lossy_external && subsystem == crate::report::Subsystem::NetworkIo);
        let mut hint = if tcp_retransmits.is_some() && names_loss {
            crate::advice::packet_loss(top_time.first())
        } else if paging && diff.verdict != Verdict::None {
            crate::advice::paging(diff.verdict, top_time.first())
        } else if quota {
            crate::advice::throttled(top_time.first())
        } else {
            crate::advice::hint_for(diff.verdict, subsystem, top_time.first())
        };
        let silent = self.silent_seconds(to);
        if silent * 1e9 >= self.d.cadence_ns as f64 {
            let asleep = self.still == Stillness::Asleep;
            let between_calls = subsystem == crate::report::Subsystem::CpuScheduling || paging;
            hint = crate::advice::silent(diff.verdict, between_calls, &hint, asleep);
        }
        let mut report = Report {
            schema_version: REPORT_SCHEMA_VERSION,
            target: self.name.clone(),
            trigger,
            window_start_ns: from,
            window_end_ns: to,
            anomaly_onset_ns: if diff.verdict == Verdict::None {
                None
            } else {
                t0
            },
            verdict: diff.verdict,
            decided_by: if anomalous {
                diff.decided_by
            } else {
                DecisionPath::NoAnomaly
            },
            impact_factor: diff.impact_factor,
            impact_factor_filtered: diff.impact_factor_filtered,
            onset_dispersion_seconds: if anomalous {
                diff.dispersion_seconds
            } else {
                0.0
            },
            threads: ThreadCounts {
                total: self.threads_seen(from, to),
                affected: if anomalous { diff.affected } else { 0 },
                directly_affected: if anomalous { diff.directly_affected } else { 0 },
            },
            onset_times_seconds: onset_dist,
            top_syscalls_by_time: if anomalous { top_time } else { Vec::new() },
            top_syscalls_by_frequency: if anomalous { top_freq } else { Vec::new() },
            subsystem,
            hint,
            syscalls,
            events_analyzed: events,
            counters: *c,
            parameters: self.params.clone(),
            active_threads: diff.active,
            affected_threads: if anomalous {
                listed.sort_by(|a, b| a.onset_seconds.total_cmp(&b.onset_seconds));
                listed.truncate(32);
                listed
            } else {
                Vec::new()
            },
            cpu_gap_increase_ratio: if anomalous {
                rank.gap.map(|g| g as f64)
            } else {
                None
            },
            cpu_burners: burners,
            cpu_taken,
            tcp_retransmits,
            vital_signs: self.vital_signs(to, events),
            silent_seconds: self.silent_seconds(to),
        };
        report.tidy();
        report
    }

    /// [`Self::inflight_episode`] once the call has stayed stuck for `persistence_seconds`
    /// past its outlier threshold (or at once when `min_persistence` is 0): a backend
    /// blocked on a lock stays blocked, while threads whose clients paused for a second
    /// resume (measured on a fault-free PostgreSQL run).
    fn lasting_inflight(&self, t: &Thread, to: u64, stops: &Stops) -> Option<Episode> {
        let e = self.inflight_episode(t, to, stops)?;
        let lasted = e.alarm_ns.saturating_add(self.d.persistence_ns) <= to;
        (lasted || self.params.min_persistence <= 0.0).then_some(e)
    }

    /// A call still in flight at `to` that has already lasted far beyond its baseline:
    /// a thread blocked on a lock (or a stalled disk) makes no more calls, so only its
    /// open call can show the impact. It counts as an outlier from the moment its
    /// elapsed time crossed max(8×, Θ·σ·√k above) the baseline geometric mean, and at
    /// least the execution-unit gap threshold after its entry. A thread in no call that
    /// has been silent since its last one is asked whether it spins ([`spin_episode`]).
    /// `stops`: how the target's threads stopped ([`Self::stops`]).
    fn inflight_episode(&self, t: &Thread, to: u64, stops: &Stops) -> Option<Episode> {
        let d = &self.d;
        let Some(p) = t.pairer.pending() else {
            // Asleep: in a call whose entry has not arrived yet, neither spinning nor
            // stopped between calls.
            if stops.killed(t) || stops.asleep {
                return None;
            }
            // A thread whose last call returned within a unit gap of the target's last
            // record stopped with it, however little it was doing before.
            let with_target = stops
                .silent_since
                .is_some_and(|r| t.last_exit_ns.saturating_add(d.gap_ns) >= r);
            return spin_episode(t, to, d, &self.params, with_target);
        };
        if p.syscall.ends_thread() {
            // Gone, not stuck: a process that exits leaves its threads in these calls
            // (a stopped service would otherwise read as every thread stuck at once).
            return None;
        }
        let baseline = t
            .find_chan(p.syscall.0)
            .and_then(|ci| t.cold.get(ci))
            .and_then(|c| c.dur.baseline.usable(d.min_n, d.min_epochs));
        let Some(r) = baseline else {
            // No baseline of its own: a busy thread blocked in it (see `blocked_episode`).
            let stop = Stop {
                enter_ns: p.enter_ns,
                key: p.syscall.0,
                elapsed_ns: to.saturating_sub(p.enter_ns),
                limit_ns: blocked_limit_ns(u64::from(t.longest_call_us) * 1000, d),
                mean: pooled_mean(&self.pools, p.syscall.0, d),
            };
            let e = blocked_episode(t, stop, d, &self.params)?;
            return (e.alarm_ns <= to).then_some(Episode { stall: false, ..e });
        };
        let limit_ns = single_value_limit(&r, d);
        let crossed = p.enter_ns.saturating_add(limit_ns);
        if crossed > to {
            return None;
        }
        let stop = Stop {
            enter_ns: p.enter_ns,
            key: p.syscall.0,
            elapsed_ns: to - p.enter_ns,
            limit_ns,
            mean: Some(r.mean),
        };
        // Still open, so no stall (a thread stopped outside calls, or in a call that
        // returned).
        Some(Episode {
            stall: false,
            ..stopped_in_call(t, stop, d, &self.params)
        })
    }

    /// Whether `t`'s call in flight (`e`, from [`Self::lasting_inflight`]) stopped it
    /// rather than ended its work: not the call it normally waits in (see `usual_wait`:
    /// for its clients, or for a pool's next task), nor one it parked in right after
    /// closing a connection (see `parked_after_close`), unless the whole target stopped
    /// (`stops`). One rule for the outliers and the on-demand lone stop: the lone stop
    /// once left out only the usual wait, and a MariaDB whose clients left read external
    /// on demand, τ 1 of 1, with its six parked sessions as the "stopped" thread.
    ///
    /// The usual wait of a thread that reads until a receive finds nothing (its habit,
    /// see `reads_until_would_block`) ends its work only when it entered it right after
    /// such a receive (see `waits_for_input`): a PostgreSQL backend waits for an
    /// advisory or table lock in the same `epoll_wait` it waits for its client in, but
    /// after reading its query. Threads without that habit, and sources without return
    /// values, keep the rule above.
    fn stuck_by_fault(&self, t: &Thread, e: &Episode, stops: &Stops) -> bool {
        e.key == GAP_KEY
            || stops.silent_since.is_some() && !stops.asleep
            || !(self.idle_in_usual_wait(t, e.key) || parked_after_close(t))
    }

    /// Whether `t`'s open call of kind `key` is its usual wait entered mid-request (see
    /// [`waits_mid_request`]). Not when the whole target stopped from outside: a frozen
    /// server leaves backends mid-request too, and the freeze is what stopped them.
    fn stopped_mid_request(&self, t: &Thread, key: u16, stops: &Stops) -> bool {
        let frozen = stops.silent_since.is_some() && !stops.asleep;
        !frozen
            && t.pairer
                .pending()
                .is_some_and(|p| waits_mid_request(t, key, p.enter_ns, &self.d))
    }

    /// Whether `t`, in its call of kind `key`, waits in its usual wait for work (see
    /// [`Self::stuck_by_fault`]).
    fn idle_in_usual_wait(&self, t: &Thread, key: u16) -> bool {
        usual_wait(t, key, &self.d)
            && t.pairer.pending().is_none_or(|p| {
                !reads_until_would_block(t, p.enter_ns, &self.d) || waits_for_input(t, p.enter_ns)
            })
    }

    /// When a busy thread stopped for good in `[lo, to]`: still stuck in its call (see
    /// [`Self::lasting_inflight`]), or blocked or stalled and it stayed stopped.
    fn lasting_stop(
        &self,
        t: &Thread,
        (lo, to, seen): (u64, u64, u64),
        stops: &Stops,
    ) -> Option<u64> {
        let stuck = self
            .lasting_inflight(t, seen, stops)
            .filter(|e| e.busy && e.alarm_ns >= lo && self.stuck_by_fault(t, e, stops))
            .map(|e| e.alarm_ns);
        let stopped = t
            .episodes
            .iter()
            .filter(|e| e.alarm_ns >= lo && e.alarm_ns <= to)
            // A stop knows whether it stopped a busy thread; an outlier (a lock's waiter
            // whose timed waits have a baseline) asks the bins before it.
            .filter(|e| {
                if e.stall {
                    e.busy
                } else {
                    at_activity_floor(t, e.alarm_ns, &self.d, &self.params)
                }
            })
            .filter(|e| self.stayed_stopped(t, e, seen) && !usual_wait(t, e.key, &self.d))
            .map(|e| e.alarm_ns)
            .min();
        match (stuck, stopped) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether a thread stopped by `e` (a stall or a block) stayed stopped: in the
    /// `persistence_seconds` after it, it made fewer than `stall_min_calls` calls a second
    /// (a lock's waiter wakes once a second to re-check; a thread back at work is far above).
    /// Undecided (false) until that much data followed.
    fn stayed_stopped(&self, t: &Thread, e: &Episode, seen: u64) -> bool {
        let end = e.alarm_ns.saturating_add(self.d.persistence_ns);
        let per_second =
            self.calls_between(t, e.alarm_ns, end) / self.params.persistence_seconds.max(1e-9);
        end <= seen && per_second < f64::from(self.params.stall_min_calls)
    }

    /// Share of `t`'s tested bins in the `persistence_seconds` after an outlier at
    /// `from` that hold an outlier (1 when `stuck`: the thread is in a call far beyond its
    /// baseline), when it lasted: `None` when it fell below `min_persistence`, or when
    /// less than `persistence_seconds` of data followed it (undecided yet: a later
    /// evaluation decides), unless `min_persistence` is 0.
    fn persistence(&self, t: &Thread, from: u64, to: u64, stuck: bool) -> Option<f64> {
        let d = &self.d;
        let rho = self.params.min_persistence;
        if stuck {
            return Some(1.0);
        }
        let end = from.saturating_add(d.persistence_ns);
        let (lo, hi) = (from / d.bin_ns, end.min(to) / d.bin_ns);
        let tested = t.tested().count(lo, hi);
        let share = if tested == 0 {
            0.0
        } else {
            f64::from(t.outlying.count(lo, hi)) / f64::from(tested)
        };
        if rho <= 0.0 {
            return Some(share);
        }
        (end <= to && share >= rho).then_some(share)
    }

    /// Share of the `persistence_seconds` after an outlier at `from` (up to `to`) that
    /// `t` lost to outlying execution times and gaps (see `LostBins`).
    fn lost_share(&self, t: &Thread, from: u64, to: u64) -> f64 {
        let d = &self.d;
        let end = from.saturating_add(d.persistence_ns).min(to);
        t.lost(from / d.bin_ns, end / d.bin_ns) * d.bin_ns as f64 / d.persistence_ns.max(1) as f64
    }

    /// The threads that burned a CPU right after the onset `t0` (see
    /// [`crate::cpu_time`]): on-CPU share over `persistence_seconds` after it (up to the
    /// data seen) against the lowest share of the `BURNER_BEFORE` spans of that length
    /// before it. The lowest, because a runaway that began before a late onset (continuous
    /// mode detects it seconds after the fault) has already raised the span just before.
    fn cpu_burners(&self, t0: u64, seen: u64) -> Vec<Burner> {
        let secs = self.params.persistence_seconds;
        let test = BurnerTest {
            share: self.params.burner_share,
            rise: self.params.burner_rise,
            spin_share: self.params.spinner_share,
            spin_preempted: self.params.spinner_preempted,
            // A spinner sharing its CPU is preempted at every slice (tens a second); 2 a
            // second keeps a thread preempted once or twice out of the test.
            spin_min_preemptions: (SPINNER_MIN_PREEMPTIONS_PER_SECOND * secs).ceil() as u64,
        };
        if test.share <= 0.0 {
            return Vec::new();
        }
        let bin = self.d.bin_ns;
        let span = (self.d.persistence_ns / bin).max(1);
        let first_after = t0 / bin;
        let end = t0.saturating_add(self.d.persistence_ns).min(seen.max(t0));
        let last_after = (end / bin).max(first_after);
        self.threads
            .iter()
            .filter_map(|t| {
                let cpu = t.cpu.as_ref()?;
                let after = cpu.share(first_after, last_after);
                let before = (0..BURNER_BEFORE)
                    .map_while(|i| {
                        let hi = first_after.checked_sub(i * span + 1)?;
                        Some(cpu.share(hi.saturating_sub(span - 1), hi))
                    })
                    .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.min(s))))
                    .unwrap_or(0.0);
                let switches = cpu.switches(first_after, last_after);
                let burns = test.burns(before, after) || test.spins(before, after, switches);
                burns.then_some(Burner {
                    tid: t.tid,
                    share_before: before,
                    share_after: after,
                    preempted_share: (switches.total() > 0).then(|| switches.preempted_share()),
                })
            })
            .collect()
    }

    /// How often the target's threads handed their CPU to another process when they left
    /// it: in the `persistence_seconds` after `t0` (up to the data seen) against the
    /// median of the spans of that length in the window before it that had enough
    /// switches. The median, because the onset can come seconds into a hog, when the
    /// spans just before already hold it, while the lowest span would let a host whose
    /// neighbours come and go pass the rise; the whole window, not the last few spans,
    /// because an alarm that comes late is T0 when no earlier onset is corroborated
    /// (measured: an Apache hog with the alarm 10 s in read 0.34 over the 15 s before it,
    /// 0.41 after, and stayed internal). The span before the `alarm` (on demand
    /// the alarm, in continuous mode the latest data) counts too, when it is later: that
    /// is when the service is known to be slow, and the onset found can be an earlier blip
    /// (measured: a PostgreSQL hog whose corroborated onset was a blip 5.8 s before it,
    /// where nothing had taken the CPU yet: 0.06, against 0.37 before the alarm).
    /// `quota_before`: the throttled share to rise from in place of the spans' (an
    /// ongoing quota that began before the window, see `quota_onset`). `None` without
    /// switch records.
    fn cpu_taken(
        &self,
        t0: u64,
        alarm: Option<u64>,
        seen: u64,
        quota_before: Option<f64>,
    ) -> Option<CpuTaken> {
        let test = NeighbourTest {
            share: self.params.neighbour_share,
            rise: self.params.neighbour_rise,
            min_switches: (NEIGHBOUR_MIN_SWITCHES_PER_SECOND * self.params.persistence_seconds)
                .ceil() as u64,
        };
        let bin = self.d.bin_ns;
        let span = (self.d.persistence_ns / bin).max(1);
        let first_after = t0 / bin;
        let end = t0.saturating_add(self.d.persistence_ns).min(seen.max(t0));
        let last_after = (end / bin).max(first_after);
        let sum = |lo: u64, hi: u64| self.switches_between(lo, hi);
        let mut after = sum(first_after, last_after);
        let mut throttled_after = after;
        // Paging is tested on each span, not on the one with the higher share: the span
        // before a continuous report's latest data may hold one bin, a share of a few
        // waits, when the onset's span held thousands.
        let mut paging_spans = vec![after];
        if let Some(a) = alarm.filter(|&a| a > end) {
            // The span ending at the alarm, or at the latest data when it has not got
            // there, after the span the onset gave.
            let hi = a.min(seen) / bin;
            let at_alarm = sum((hi + 1).saturating_sub(span).max(last_after + 1), hi);
            if at_alarm.total() >= test.min_switches.max(1) {
                if at_alarm.foreign_share() > after.foreign_share() {
                    after = at_alarm;
                }
                if at_alarm.throttled_share() > throttled_after.throttled_share() {
                    throttled_after = at_alarm;
                }
                paging_spans.push(at_alarm);
            }
        }
        if after.total() == 0 && paging_spans.iter().all(|s| s.total() == 0) {
            return None;
        }
        let spans = (self.d.window_ns / (span * bin)).max(BURNER_BEFORE);
        let mut before: Vec<Switches> = (0..spans)
            .map_while(|i| {
                let hi = first_after.checked_sub(i * span + 1)?;
                Some(sum(hi.saturating_sub(span - 1), hi))
            })
            .filter(|s| s.total() >= test.min_switches.max(1))
            .collect();
        let median_of = |share: fn(&Switches) -> f64| {
            let mut v: Vec<f64> = before.iter().map(share).collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let idle_before = median_of(Switches::idle_share);
        let throttled_before = quota_before.unwrap_or_else(|| median_of(Switches::throttled_share));
        let paging_before = median_of(Switches::paging_share);
        before.sort_by(|a, b| a.foreign_share().total_cmp(&b.foreign_share()));
        let median = before.get(before.len() / 2).copied().unwrap_or_default();
        let saturation = SaturationTest {
            foreign: test.share,
            min_switches: test.min_switches,
        };
        let throttle = self.throttle_test();
        let paging = PagingTest {
            min_paging: (PAGING_MIN_PER_SECOND * self.params.persistence_seconds).ceil() as u64,
        };
        // Against a baseline too: a target that always pages has always been slow.
        let pages = |s: &Switches| !before.is_empty() && paging.paging(paging_before, *s);
        let paging_after = paging_spans
            .iter()
            .copied()
            .max_by(|a, b| {
                pages(a)
                    .cmp(&pages(b))
                    .then(a.paging_share().total_cmp(&b.paging_share()))
            })
            .unwrap_or(after);
        Some(CpuTaken {
            share_before: median.foreign_share(),
            share_after: after.foreign_share(),
            switches_after: after.total(),
            taken: test.taken(median, after),
            idle_share_before: idle_before,
            idle_share_after: after.idle_share(),
            saturated: saturation.saturated(idle_before, after),
            throttled_share_before: throttled_before,
            throttled_share_after: throttled_after.throttled_share(),
            // Only against a baseline: a target seen throttled from its first span may
            // always run at its quota, which is no new fault.
            throttled: (!before.is_empty() || quota_before.is_some())
                && throttle.throttled(throttled_before, throttled_after),
            paging_share_before: paging_before,
            paging_share_after: paging_after.paging_share(),
            paging: pages(&paging_after),
        })
    }

    /// Where the target's current CPU throttling began, in continuous mode, and whether
    /// it reaches back to `from`: the first bin with a throttled switch of the run of
    /// one-second parts, back from the latest data (`seen`), each of which had one.
    /// `None` unless the target is throttled now (see `throttled_now`). Parts of a
    /// second, not spans: a burst of half a second across two spans passed each span's
    /// floors (the review of session 40). The caller runs the full test, with its rise,
    /// from the onset. Measured: nginx's one worker under a cap that raised client p99
    /// ×22 showed no lasting outlier in any call, so continuous mode said nothing
    /// (session 38).
    fn quota_onset(&self, from: u64, seen: u64) -> Option<(u64, bool)> {
        if !self.throttled_now(seen) {
            return None;
        }
        let bin = self.d.bin_ns;
        let part = 1_000_000_000u64.div_ceil(bin).max(1);
        let first = from / bin;
        let mut hi = seen / bin;
        let mut earliest = None;
        let reaches_from = loop {
            let lo = hi.saturating_sub(part - 1).max(first);
            if self.switches_between(lo, hi).throttled == 0 {
                break false;
            }
            earliest = Some((lo, hi));
            if lo <= first {
                break true;
            }
            hi = lo - 1;
        };
        let (lo, hi) = earliest?;
        let at = (lo..=hi).find(|&b| self.switches_between(b, b).throttled > 0)?;
        Some(((at * bin).max(from), reaches_from))
    }

    /// What the TCP account says of `[a, b]` against the spans of `[from, a)`, or against
    /// the `before` an earlier report measured (see `loss_before`): `None` without segment
    /// samples after, or before when there is no such measure.
    fn retransmits(
        &self,
        a: u64,
        b: u64,
        from: u64,
        before: Option<PathBaseline>,
    ) -> Option<TcpRetransmits> {
        let seg = self.segments.as_ref()?;
        let bin = self.d.bin_ns;
        let (lo, hi) = (a / bin, b / bin);
        let after = seg.between(lo, hi);
        if after.samples == 0 {
            return None;
        }
        // The medians over the spans of `persistence_seconds` before, as for the
        // scheduler's shares: one sum over the window would dilute a loss that began
        // well before a late alarm into a rise it never shows.
        let before = match before {
            Some(b) => b,
            None => PathBaseline::of(&self.spans_before(seg, lo, from / bin))?,
        };
        let n = after.samples as f64;
        Some(TcpRetransmits {
            share_before: before.share,
            share_after: after.retransmitted_share(),
            per_second_before: before.retransmitted,
            per_second_after: after.retransmitted as f64 / n,
            sent_per_second_before: before.sent,
            sent_per_second_after: after.sent as f64 / n,
            lossy: LossTest::lossy(before, after),
            steady: LossTest::steady(before, after),
        })
    }

    /// Where the target's latest run of lossy spans began, and the path's measure before
    /// it: spans of `persistence_seconds` back from the latest data (`seen`), each passing
    /// the loss test against the medians of the window's spans before the latest (or the
    /// measure an earlier report took, `remembered`); the onset is the first of the lossy
    /// samples (retransmissions risen) that lead, within a span and without another
    /// sample between, into the run's earliest span, and the measure before is the
    /// medians of the spans before the run. `None` when the latest span is not lossy (no
    /// samples: a sampler that stopped says nothing of the path now), or when the run
    /// reaches back to the window's start and nothing was remembered (no span before it
    /// is left to have risen from).
    fn loss_onset(
        &self,
        from: u64,
        seen: u64,
        remembered: Option<PathBaseline>,
    ) -> Option<(u64, PathBaseline)> {
        let seg = self.segments.as_ref()?;
        let bin = self.d.bin_ns;
        let span = (self.d.persistence_ns / bin).max(1);
        let (first, last) = (from / bin, seen / bin);
        let spans = self.spans_before(seg, last.saturating_add(1), first);
        let provisional = remembered.or_else(|| PathBaseline::of(spans.get(1..)?))?;
        let run = spans
            .iter()
            .take_while(|s| LossTest::lossy(provisional, **s))
            .count();
        if run == 0 {
            return None;
        }
        let before = match remembered {
            Some(b) => b,
            None => PathBaseline::of(spans.get(run..)?)?,
        };
        let hi = last.checked_sub((run as u64 - 1).saturating_mul(span))?;
        let lo = hi.saturating_sub(span - 1).max(first);
        let lossy = |s: Segments| {
            s.retransmitted > 0
                && s.retransmitted_share() >= LossTest::SHARE
                && s.retransmitted_share() >= LossTest::RISE * before.share
                && s.retransmitted as f64
                    >= LossTest::RISE * before.retransmitted * s.samples as f64
        };
        let mut at = (lo..=hi).find(|&b| lossy(seg.between(b, b)))?;
        // Spans are aligned on the latest data, not on the loss: the lossy samples just
        // before the run's earliest span are part of it (at most a span back: past a
        // sampler's gap an earlier burst is no part of it).
        for b in (lo.saturating_sub(span).max(first)..at).rev() {
            let s = seg.between(b, b);
            if lossy(s) {
                at = b;
            } else if s.samples > 0 {
                break;
            }
        }
        Some(((at * bin).max(from), before))
    }

    /// The segment sums of the spans of `persistence_seconds` that end before bin `end`,
    /// back to bin `first` (the window's start; no further than the ring holds), latest
    /// first.
    fn spans_before(&self, seg: &SegmentBins, end: u64, first: u64) -> Vec<Segments> {
        let span = (self.d.persistence_ns / self.d.bin_ns).max(1);
        let first = first.max(end.saturating_sub(SegmentBins::LEN));
        (0..)
            .map_while(|i: u64| {
                let hi = end.checked_sub(i.checked_mul(span)?.checked_add(1)?)?;
                (hi >= first).then(|| seg.between(hi.saturating_sub(span - 1).max(first), hi))
            })
            .collect()
    }

    /// Whether the span of `persistence_seconds` ending at `seen` passed the quota test's
    /// floors (`ThrottleTest` without its rise): a quota throttles the target now.
    fn throttled_now(&self, seen: u64) -> bool {
        let bin = self.d.bin_ns;
        let span = (self.d.persistence_ns / bin).max(1);
        let last = seen / bin;
        let s = self.switches_between(last.saturating_add(1).saturating_sub(span), last);
        self.throttle_test().throttled(0.0, s)
    }

    /// The quota test with its floor scaled to `persistence_seconds`.
    fn throttle_test(&self) -> ThrottleTest {
        ThrottleTest {
            min_throttled: (THROTTLED_MIN_PER_SECOND * self.params.persistence_seconds).ceil()
                as u64,
        }
    }

    /// The switches away of all the target's threads in bins `lo..=hi`.
    fn switches_between(&self, lo: u64, hi: u64) -> Switches {
        self.threads
            .iter()
            .filter_map(|t| t.cpu.as_ref())
            .fold(Switches::default(), |s, c| s.plus(c.switches(lo, hi)))
    }

    /// `t`'s calls in `[a, b)`, edge bins counted pro rata.
    fn calls_between(&self, t: &Thread, a: u64, b: u64) -> f64 {
        calls_in(t, a, b, self.d.bin_ns)
    }

    fn threads_seen(&self, from: u64, to: u64) -> u64 {
        self.threads
            .iter()
            .filter(|t| t.last_seen_ns >= from && t.last_seen_ns <= to.max(from))
            .count() as u64
            + self.threads.iter().filter(|t| t.last_seen_ns > to).count() as u64
    }

    /// Busiest syscalls over the epochs kept (≈ the window), and the calls counted.
    fn activity_summary(&self, from: u64, to: u64) -> (Vec<SyscallActivity>, u64) {
        let mut per: Vec<(usize, Activity)> = Vec::new();
        for (i, a) in self.activity.iter().enumerate() {
            if a.calls == 0 {
                continue;
            }
            let id = i % self.stride;
            match per.iter_mut().find(|(k, _)| *k == id) {
                Some(e) => {
                    e.1.calls += a.calls;
                    e.1.total_ns = e.1.total_ns.saturating_add(a.total_ns);
                }
                None => per.push((id, *a)),
            }
        }
        per.sort_by(|a, b| b.1.calls.cmp(&a.1.calls).then(a.0.cmp(&b.0)));
        let kept = self.activity_events.len() as u64 * self.d.cadence_ns;
        // A target younger than the epochs kept made its calls since its first record:
        // over the whole span its rates read low until it is as old (a restarted
        // faultline's rates climbed for 90 s). At least a second, so a target's first
        // calls are no burst of millions a second.
        let since = self.first_ns.map_or(from, |first| first.max(from));
        let whole = kept.min(to.saturating_sub(from)).max(1);
        let lived = kept.min(to.saturating_sub(since)).max(1_000_000_000);
        let span = lived.min(whole) as f64 / 1e9;
        let list = per
            .into_iter()
            .take(self.params.top_n)
            .map(|(id, a)| SyscallActivity {
                syscall: SyscallId(id as u16).name().to_string(),
                calls: a.calls,
                calls_per_second: a.calls as f64 / span,
                mean_latency_seconds: a.total_ns as f64 / a.calls.max(1) as f64 / 1e9,
            })
            .collect();
        (list, self.activity_events.iter().sum())
    }

    /// The vital signs of the window ending at `to` (see [`crate::vital_signs`]), when
    /// the source delivered counters; `calls`: the target's calls over the kept epochs.
    fn vital_signs(&self, to: u64, calls: u64) -> Option<VitalSigns> {
        let signs = self.signs.as_ref()?;
        // The ring's slots end at the cadence ticks, the current one at the next tick
        // (which is `to` when a tick reports): its counters cover the time since then
        // (or since the first counters), up to the latest data.
        let kept = self.activity_events.len() as u64 * self.d.cadence_ns;
        let kept_from = self.next_tick_ns.unwrap_or(to).saturating_sub(kept);
        let to = to.min(self.now_ns);
        let bin = self.d.bin_ns;
        let thread_calls = |tid: u32, a: u64, b: u64| {
            self.index
                .get(tid)
                .and_then(|s| self.threads.get(s as usize))
                .filter(|t| t.tid == tid)
                .map_or(0, |t| calls_in(t, a, b, bin).round() as u64)
        };
        signs.report(to, kept_from, calls, self.d.cadence_ns, thread_calls)
    }

    /// End of stream: the final report over the last window.
    pub fn finish(&self, c: &EngineCounters) -> Report {
        let to = self.now_ns;
        self.evaluate(
            to.saturating_sub(self.d.window_ns),
            to,
            Onset::Detect,
            Trigger::EndOfStream,
            c,
        )
    }

    /// On-demand diagnosis: an external alarm at `at_ns`.
    pub fn trigger(&self, at_ns: u64, c: &EngineCounters) -> Report {
        let to = self
            .now_ns
            .min(at_ns.saturating_add(self.d.window_ns))
            .max(at_ns);
        self.evaluate(
            at_ns.saturating_sub(self.d.window_ns),
            to,
            Onset::At(at_ns),
            Trigger::OnDemand,
            c,
        )
    }

    /// α and β from a run under a known external fault (PerfCompass §3.6).
    pub fn calibrate(
        &self,
        fault_start_ns: Option<u64>,
        c: &EngineCounters,
    ) -> Option<Calibration> {
        let to = self.now_ns;
        let from = fault_start_ns.unwrap_or(to.saturating_sub(self.d.window_ns));
        // Onsets count from the fault's first corroborated victims at or after the known
        // start, not from the start itself: a cgroup cap can take seconds to bite (2.5 s
        // on one PostgreSQL recording), and that delay is not the threads' onset.
        let r = self.evaluate(from, to, Onset::Calibration, Trigger::EndOfStream, c);
        if r.onset_times_seconds.count == 0 {
            return None;
        }
        // α is the largest onset of the threads that could show the fault at once (τ's
        // population): under an external fault all of them are hit directly. Threads
        // that were idle and only picked up work later show it tens of seconds after
        // the fault; their onsets would inflate α until every thread counts as direct.
        let mut onsets: Vec<f64> = r
            .affected_threads
            .iter()
            .filter(|a| a.active)
            .map(|a| a.onset_seconds)
            .collect();
        if onsets.is_empty() {
            onsets = r.affected_threads.iter().map(|a| a.onset_seconds).collect();
        }
        onsets.sort_by(f64::total_cmp);
        let kept = without_far_out(&onsets);
        // Never below the configured α: a CPU cap is the quickest fault to show (busy
        // threads in 0.1–0.5 s on the recorded servers), while disk and memory faults
        // take the same threads 1–2 s; an α fitted to the cap alone made those read as
        // internal (calibrated accuracy 9/22 against 17/22 uncalibrated, RESULTS.md).
        let raw_alpha = kept.last().copied().unwrap_or(0.0);
        let alpha = raw_alpha.max(self.params.alpha_seconds).max(0.01);
        let (_, beta) = crate::stats::mean_std(kept);
        let beta = beta.max(0.01);
        // The activity floors are call counts over α (a rate): they grow with it.
        let scale = alpha / self.params.alpha_seconds.max(0.01);
        let scaled = |n: u32| (f64::from(n) * scale).round().min(f64::from(u32::MAX >> 8)) as u32;
        Some(Calibration {
            target: self.name.clone(),
            alpha_seconds: crate::report::tidy(alpha),
            beta_seconds: crate::report::tidy(beta),
            measured_alpha_seconds: crate::report::tidy(raw_alpha),
            min_active_calls: scaled(self.params.min_active_calls),
            direct_within_calls: scaled(self.params.direct_within_calls),
            affected_threads: r.threads.affected,
            stragglers: (onsets.len() - kept.len()) as u64,
            window_start_ns: r.window_start_ns,
            window_end_ns: r.window_end_ns,
        })
    }

    /// Bytes held by this target's state.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.name.capacity()
            + self.threads.iter().map(Thread::bytes).sum::<usize>()
            + self.threads.spare_bytes()
            + self.index.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.pools.capacity() * std::mem::size_of::<Pool>()
            + self.activity.capacity() * std::mem::size_of::<Activity>()
            + self.activity_events.capacity() * 8
            + self.overflow.as_ref().map_or(0, EpochSketch::bytes)
            + self.overflow_ids.capacity() * 8
            + self.leap.bytes()
            + self
                .signs
                .as_ref()
                .map_or(0, |s| std::mem::size_of::<SignsState>() + s.bytes())
            + self.segments.as_ref().map_or(0, |s| s.bytes())
    }

    /// Number of threads tracked.
    pub fn thread_count(&self) -> usize {
        self.threads.len()
    }
}

/// `t`'s calls in `[a, b)` from its per-bin counts (bins of `bin` ns), edge bins counted
/// pro rata.
/// Takes an on-CPU record into the thread's CPU time (allocated on its first record:
/// sources without scheduler records cost nothing). Kept out of line: the per-call path
/// stays as small as it was.
#[inline(never)]
fn add_cpu_time(
    th: &mut Thread,
    ev: &SyscallEvent,
    foreign: bool,
    bin_ns: u64,
    loss_ns: u64,
    c: &mut EngineCounters,
) {
    let cpu = th.cpu.get_or_insert_with(Box::default);
    if ev.kind == EventKind::OffCpu {
        c.switch_records += 1;
        // `foreign` is decided by the caller, which has the target's thread index (kept
        // there as it was: the guest's compiled loop is sensitive to what is inlined
        // into it, measured −10 % with the index passed down instead).
        let next = match ev.switched_in() {
            _ if foreign => NextTask::OtherProcess,
            None => NextTask::Unknown,
            Some(0) => NextTask::Idle,
            Some(_) => NextTask::Own,
        };
        // Outside any call, as far as the thread's own halves since the latest loss say
        // (a source of complete calls says nothing until the call ended): only a page
        // fault blocks a thread uninterruptibly there.
        let left = if ev.preempted() {
            Left::Preempted
        } else if ev.blocked_uninterruptibly() && th.pairer.between_calls(loss_ns) {
            c.page_wait_records += 1;
            Left::Paging
        } else {
            Left::Blocked
        };
        cpu.switch_as(ev.ts_ns, left, next, bin_ns);
    } else {
        c.cpu_records += 1;
        cpu.add(ev.ts_ns, ev.duration_ns, bin_ns);
    }
}

fn calls_in(t: &Thread, a: u64, b: u64, bin: u64) -> f64 {
    if b <= a || bin == 0 {
        return 0.0;
    }
    let (la, lb) = (a / bin, b / bin);
    let part = |bi: u64, from: u64, to: u64| {
        t.calls().sum(bi, bi) as f64 * (to - from) as f64 / bin as f64
    };
    if la == lb {
        return part(la, a, b);
    }
    // `a < (la + 1)·bin ≤ lb·bin ≤ b` here, so neither product overflows.
    let head = part(la, a, (la + 1) * bin);
    let tail = part(lb, lb * bin, b);
    let mid = if lb > la + 1 {
        t.calls().sum(la + 1, lb - 1) as f64
    } else {
        0.0
    };
    head + mid + tail
}

/// When `t` last resumed work before `until`: the end of its latest pause of at least α
/// (and the unit gap) in `[from, until)` during which it began no call, or `from` if it
/// never paused that long.
///
/// A pause inside one call is no unit boundary for the detector (its moving averages go
/// on: splitting units there lost the table-lock waiters of MariaDB, whose long wait is
/// the outlier), but it is one for σ: a worker parked in `epoll_wait` cannot show a fault
/// before it runs again. Measured: under packet loss three Apache workers, busy at the
/// alarm, sat 18 s in one call after their connections closed and showed the loss on the
/// first calls of their next connections, σ 24 s from the alarm (Ω 7.1 s: read internal).
fn resumed_at(t: &Thread, from: u64, until: u64, d: &Derived) -> u64 {
    let bin = d.bin_ns;
    if bin == 0 || until <= from {
        return from;
    }
    let kept = t.calls().oldest_kept();
    // At least α (and the unit gap): a pause shorter than the time a thread may take to
    // show a fault and still count as direct is no parking (on generated streams with
    // heavy-tailed waits, every pause over the 1-s gap counting answered an alarm 15 s
    // before a slowdown with it).
    let need = d.gap_ns.max(d.alpha_ns).div_ceil(bin).max(1);
    // Bins wholly after `from` and still in the ring (older ones read as empty).
    let first = (from / bin + 1).max(kept);
    // `end` is the bin after the current run of empty bins, scanning back from the
    // alarm's bin (at most the ring: later bins read as empty too): the latest pause long
    // enough wins. Only a pause a call ended is one the thread resumed from: a thread
    // stuck in the very call that is its alarm is in the pause, not after it.
    let mut end = (until / bin).min(kept.saturating_add(crate::thread::RING_BINS));
    let mut ran = t.calls().sum(end, end) != 0;
    let mut b = end;
    while b > first {
        b -= 1;
        if t.calls().sum(b, b) != 0 {
            end = b;
            ran = true;
        } else if ran && end - b >= need {
            return end.saturating_mul(bin).clamp(from, until);
        }
    }
    from
}

/// The least single value (ns) that alone lifts a moving average over the outlier
/// threshold of `r` whatever the other k − 1 values are (k × the threshold), and no less
/// than the execution-unit gap: the same "longer than any normal pause" the unit split
/// uses, independent of how soon after an onset a thread counts as directly affected (α).
fn single_value_limit(r: &crate::detector::Reference, d: &Derived) -> u64 {
    let per_ma =
        r.hi.max(r.mean + d.time_th.sigma * r.sd)
            .max(r.mean * (1.0 + d.time_th.min_increase));
    ((d.k as f32 * per_ma) as u64).max(d.gap_ns)
}

/// A *stall*: the thread, busy until its last call returned at `th.last_exit_ns`, made
/// no call until `resume_ns`, without being in one — stopped outside the kernel's
/// syscall path (page-fault reclaim under a memory cap, CPU throttling, a user-space
/// spin). Such a gap is longer than the unit gap, so it starts a new execution unit and
/// never reaches the gap channel's moving averages; without this rule the fault is
/// invisible exactly where it hits hardest (measured: PostgreSQL under a memory cap, 9–10
/// busy backends stopped 1.2–8.8 s at once; no busy thread of 29 fault-free recordings
/// ever paused over 1 s outside a call). It counts when the thread made `min_calls` calls
/// in the second before (`Params::stall_min_calls`) and the gap alone lifts its gap
/// channel over the threshold ([`single_value_limit`]), the rule a stuck call meets.
fn stall_episode(th: &Thread, resume_ns: u64, d: &Derived, p: &Params) -> Option<Episode> {
    let last = th.last_exit_ns;
    if last == 0 || th.pairer.pending().is_some() || !busy_before(th, last, d, p.stall_min_calls) {
        return None;
    }
    let r = gap_reference(th, d)?;
    let limit_ns = single_value_limit(&r, d);
    let gap = resume_ns.checked_sub(last)?;
    (gap >= limit_ns).then(|| {
        stopped_outside_calls(
            th,
            limit_ns,
            gap,
            Some(r.mean),
            at_activity_floor(th, last, d, p),
        )
    })
}

/// The usable baseline of `th`'s gap channel (time between calls), if any.
fn gap_reference(th: &Thread, d: &Derived) -> Option<crate::detector::Reference> {
    let ci = th.find_chan(GAP_KEY)?;
    th.cold.get(ci)?.dur.baseline.usable(d.min_n, d.min_epochs)
}

/// The episode of a thread stopped outside any call for `silent_ns` since its last call
/// returned (a stall or a spin): it counts from `limit_ns` after that return.
fn stopped_outside_calls(
    th: &Thread,
    limit_ns: u64,
    silent_ns: u64,
    gap_mean: Option<f32>,
    busy: bool,
) -> Episode {
    let mut top = [Increase::default(); EPISODE_TOP];
    top[0] = Increase {
        key: GAP_KEY,
        time: gap_mean.map_or(0.0, |m| detector::increase(silent_ns as f32, m).max(0.0)),
        freq: 0.0,
    };
    Episode {
        alarm_ns: th.last_exit_ns.saturating_add(limit_ns),
        unit_start_ns: th.unit_start_ns,
        key: GAP_KEY,
        frequency: false,
        stall: true,
        busy,
        mid_request: false,
        top,
    }
}

/// A *spin*: the thread, busy until its last call returned at `th.last_exit_ns`, has
/// made no call since, and is in none, at `to`: it is running in user space without
/// system calls (a runaway loop or query) or was stopped outside the syscall path (killed,
/// frozen). The ongoing form of a stall ([`stall_episode`] only sees a stall once the
/// thread resumes, and a runaway query never does). No thread of 33 fault-free
/// recordings (PostgreSQL, MariaDB, Apache) was ever silent outside a call for over
/// 0.5 s, while the MariaDB session running `SELECT BENCHMARK(...)` was for the whole
/// fault (20–45 s, after a burst of 22 calls). Counted from its gap channel's
/// single-value limit, or from the unit gap when the thread has no gap baseline (a
/// pooled connection thread woken for the query has none). A spin stopped a thread
/// that was working, so it counts as busy for the on-demand lone-stop rule.
/// `with_target`: the whole target fell silent when this thread did (a frozen cgroup
/// wakes blocked calls, which return, and stops every thread between calls, right
/// after a scheduler record of it leaving its CPU): then the thread need not have been
/// busy — PostgreSQL backends at 9 transactions a second were not, and a healthy
/// thread is not outside a call for seconds either way.
fn spin_episode(
    th: &Thread,
    to: u64,
    d: &Derived,
    p: &Params,
    with_target: bool,
) -> Option<Episode> {
    let last = th.last_exit_ns;
    // Scheduler records after the last call (it ran on, or left its CPU) are no call:
    // once the target is silent they are as old as its last record.
    if last == 0
        || p.stall_min_calls == 0
        || th.pairer.pending().is_some()
        || !(with_target || th.last_seen_ns <= last && burst_before(th, last, d, p.stall_min_calls))
    {
        return None;
    }
    let reference = gap_reference(th, d);
    let limit_ns = reference.map_or(d.gap_ns, |r| single_value_limit(&r, d));
    let silent = to.checked_sub(last)?;
    (silent >= limit_ns)
        .then(|| stopped_outside_calls(th, limit_ns, silent, reference.map(|r| r.mean), true))
}

/// Whether `th` made `min_calls` calls in the second before `at` (0 switches the stop
/// rules off): it was working, so a stop right after is news.
fn busy_before(th: &Thread, at: u64, d: &Derived, min_calls: u32) -> bool {
    min_calls > 0
        && calls_in(th, at.saturating_sub(1_000_000_000), at, d.bin_ns) >= f64::from(min_calls)
}

/// [`busy_before`] counted over the whole bins the second before `at` touches, not pro
/// rata: the calls right before a spin are often a burst of a millisecond (a pooled
/// thread woken for the query) whose pro-rata share of its 0.35 s bin is under 20.
fn burst_before(th: &Thread, at: u64, d: &Derived, min_calls: u32) -> bool {
    min_calls > 0
        && th
            .calls()
            .sum(at.saturating_sub(1_000_000_000) / d.bin_ns, at / d.bin_ns)
            >= u64::from(min_calls)
}

/// Whether `th` ran at the activity floor of τ's population (`min_active_calls` per α)
/// in the α before `at`.
fn at_activity_floor(th: &Thread, at: u64, d: &Derived, p: &Params) -> bool {
    calls_in(th, at.saturating_sub(d.alpha_ns), at, d.bin_ns) >= f64::from(p.min_active_calls)
}

/// A *block*: a busy thread (see [`busy_before`]) spent longer than the unit gap in one
/// call of a kind it had no baseline for — a connection thread that waits on a lock
/// (futex) it normally takes uncontended, so rarely that the call never got a
/// baseline of its own (measured on MariaDB: a backend blocked on a metadata or row lock
/// had made 7–12 futex calls in 45 s before). Judged by the same "longer than any normal
/// pause" as a stall: the unit gap. A thread stuck in such a call is caught while it is
/// still in it by [`Target::inflight_episode`].
fn blocked_episode(th: &Thread, stop: Stop, d: &Derived, p: &Params) -> Option<Episode> {
    // A thread whose other calls have no baseline yet is new (or the trace is): every
    // call of it lacks one, and a busy start followed by a first idle wait is no fault
    // (measured: Apache workers at the start of a trace).
    let known = th.chans.iter().zip(&th.cold).any(|(c, cold)| {
        c.key != stop.key
            && c.key != GAP_KEY
            && cold.dur.baseline.usable(d.min_n, d.min_epochs).is_some()
    });
    (p.stall_min_calls > 0 && known && at_activity_floor(th, stop.enter_ns, d, p))
        .then(|| stopped_in_call(th, stop, d, p))
}

/// A call that stayed stuck and then returned: it lasted its single-value limit plus
/// `persistence_seconds`, so while it was open the in-flight rule
/// ([`Target::lasting_inflight`]) would have caught it; once it returns, only its moving
/// averages remain, which one value in a run of k never confirms. A lock's waiter is
/// woken now and then and blocks again (measured: a PostgreSQL backend waiting on a
/// table lock returned from an 8.1 s `epoll_wait` 9.2 s into the fault, its baseline
/// 19 ms ± 54 ms, and blocked again), so a diagnosis made just after such a wake-up saw
/// neither. Counted like the open call from where it crossed the limit; it stopped the
/// thread, so it lasted by definition. Three kinds of long call are no stop: a wait that
/// ended by its own timeout (see [`crate::syscalls::timeout`]); one no longer than twice
/// the thread's longest earlier call (as for [`blocked_episode`]); and one of a thread
/// that was not working before it (under `stall_min_calls` calls a second over the
/// `persistence_seconds` before; a stop is a change from working, as for stalls). A
/// background thread's long wait may span the fault's start, and its crossing, before
/// the fault, then anchors the onset there (measured on MariaDB: a thread that waits
/// 1–1.5 s waited 5 s, woken with 0, and moved a disk fault's onset 2 s before it began;
/// the longest-call guard keeps it out. A working thread's 13-s wait across a CPU hog's
/// start still does: `rw3` `mariadb_cpu_hog`, see EVALUATION.md).
// Cold: it runs for a handful of calls a minute, and inlined it slows the per-call path
// under wasmtime (measured: −7 % on the MariaDB trace).
#[cold]
#[inline(never)]
fn resumed_stuck_episode(th: &Thread, call: Call, d: &Derived, p: &Params) -> Option<Episode> {
    if crate::syscalls::timeout::ended_by_timeout(call.syscall, call.ret) {
        return None;
    }
    // Working before it: `stall_min_calls` a second over the persistence before the call
    // (the mirror of [`Target::stayed_stopped`]).
    let before = calls_in(
        th,
        call.enter_ns.saturating_sub(d.persistence_ns),
        call.enter_ns,
        d.bin_ns,
    );
    if p.stall_min_calls == 0 || before < f64::from(p.stall_min_calls) * p.persistence_seconds {
        return None;
    }
    // A thread that found nothing to read and waited in its usual wait waited for its
    // clients, however long they took (see `waits_for_input`).
    if usual_wait(th, call.syscall.0, d) && waits_for_input(th, call.enter_ns) {
        return None;
    }
    let ci = th.find_chan(call.syscall.0)?;
    let r = th
        .cold
        .get(ci)?
        .dur
        .baseline
        .usable(d.min_n, d.min_epochs)?;
    // (`longest_call_us` does not hold this call yet.)
    let longest_ns = u64::from(th.longest_call_us) * 1000;
    let limit_ns = single_value_limit(&r, d).max(blocked_limit_ns(longest_ns, d));
    if call.duration_ns < limit_ns.saturating_add(d.persistence_ns) {
        return None;
    }
    let stop = Stop {
        enter_ns: call.enter_ns,
        key: call.syscall.0,
        elapsed_ns: call.duration_ns,
        limit_ns,
        mean: Some(r.mean),
    };
    Some(Episode {
        mid_request: waits_mid_request(th, call.syscall.0, call.enter_ns, d),
        ..stopped_in_call(th, stop, d, p)
    })
}

/// How a target's threads stopped, for the episodes of threads in no call
/// ([`Target::stops`]).
struct Stops {
    /// The target's last record, when the whole target has been silent for a unit gap
    /// or more (its clock moved on by its host, see [`Target::advance`]): every thread
    /// stopped at once.
    silent_since: Option<u64>,
    /// The target is silent and its host saw every thread of it asleep
    /// ([`Stillness::Asleep`]): each waits in a call, whatever its records say so far.
    asleep: bool,
    /// The threads that entered `exit` or `exit_group`.
    exits: Vec<Exit>,
}

/// A thread that entered `exit` (itself ends) or `exit_group` (its process ends: the
/// kernel kills the other threads, which make no exit call of their own).
struct Exit {
    pid: u32,
    tid: u32,
    group: bool,
    at_ns: u64,
}

/// How long after an `exit_group` the other threads' last records may come (their
/// interrupted calls return on the way to being killed).
const EXIT_KILLS_WITHIN_NS: u64 = 50_000_000;

impl Stops {
    /// Whether thread `th`, in no call, ended with its process: a thread of it entered
    /// `exit_group`, and `th` made no record after (a frozen thread it is not).
    fn killed(&self, th: &Thread) -> bool {
        self.exits.iter().any(|e| {
            e.group
                && e.pid == th.pid
                && e.tid != th.tid
                && th.last_seen_ns <= e.at_ns.saturating_add(EXIT_KILLS_WITHIN_NS)
        })
    }
}

/// How long a call without a baseline must last to block a thread whose longest call so
/// far took `longest_ns`: twice that, and at least the unit gap. Pool workers park for
/// long in calls they make too rarely for a baseline, again and again (measured: Apache
/// workers take turns idling 16 s in futex); a lock's waiter never waited that long.
fn blocked_limit_ns(longest_ns: u64, d: &Derived) -> u64 {
    longest_ns.saturating_mul(2).max(d.gap_ns)
}

/// Whether `key` is the call `th` normally waits in: by its baselines it spends at least
/// half its time in it (mean execution time over mean time between its calls). A pool
/// worker that parks longer in its usual wait has run out of work; a thread blocked on a
/// lock waits in a call it normally passes through (measured on MariaDB: InnoDB I/O pool
/// threads at 150–200 calls/s, 98 % of their time in futex, park 5–6 s there, woken by the
/// pool's timer, while the work moves to another; a session blocked by a table lock waits
/// in futex, where it had spent 0.1 % of its time, 98 % in poll waiting for its client).
fn usual_wait(th: &Thread, key: u16, d: &Derived) -> bool {
    let Some(cold) = th.find_chan(key).and_then(|ci| th.cold.get(ci)) else {
        return false;
    };
    match (
        cold.dur.baseline.usable(d.min_n, d.min_epochs),
        cold.ia.baseline.usable(d.min_n, d.min_epochs),
    ) {
        (Some(dur), Some(ia)) => -ia.mean > 0.0 && dur.mean >= 0.5 * -ia.mean,
        _ => false,
    }
}

/// How soon after closing a file or socket a thread's next call must begin for the thread
/// to count as parked by it (MariaDB's sessions: 70 µs from `close` to the futex).
const PARK_AFTER_CLOSE_NS: u64 = 10_000_000;

/// Whether `th` is in a call it entered right after a `close` or `shutdown`: a
/// connection thread whose client left, parked until the next one (measured: MariaDB's
/// sessions, after the client ended, read end-of-file, closed the socket and waited in
/// futex in the thread cache; a session blocked on a lock entered its futex after
/// reading the query). Read from the close channel's latest entry, so nothing per call.
fn parked_after_close(th: &Thread) -> bool {
    let Some(p) = th.pairer.pending() else {
        return false;
    };
    th.chans.iter().any(|c| {
        SyscallId(c.key).closes()
            && c.last_enter_ns != 0
            && c.last_enter_ns <= p.enter_ns
            && p.enter_ns - c.last_enter_ns <= PARK_AFTER_CLOSE_NS
    })
}

/// How soon after a receive found nothing a thread's next wait must begin for the thread
/// to wait for input (PostgreSQL's backends: 18 µs from `recvfrom` → EAGAIN, through the
/// drain of their latch, into `epoll_wait`).
const WAIT_AFTER_WOULD_BLOCK_NS: u64 = 10_000_000;

/// Whether `th` entered the call it began at `entry_ns` right after a receive found
/// nothing to read, and made no receive of that kind since: it waits for its clients'
/// next request, and a long wait there says the clients sent none (measured: PostgreSQL
/// backends whose clients paused, woken by a signal 0.8 s and 9 s in, read again,
/// found nothing and waited on; a backend blocked on a table lock waits in the same
/// `epoll_wait`, but entered it after its query's `recvfrom` returned data).
fn waits_for_input(th: &Thread, entry_ns: u64) -> bool {
    let at = th.would_block.latest_ns();
    at != 0
        && at <= entry_ns
        && entry_ns - at <= WAIT_AFTER_WOULD_BLOCK_NS
        && th
            .chans
            .iter()
            .any(|c| c.last_enter_ns == at && SyscallId(c.key).receives())
}

/// Whether `th`, in its usual wait of kind `key` entered at `entry_ns`, stopped in the
/// middle of a request: it reads until a receive finds nothing (see
/// [`reads_until_would_block`]) but did not enter this wait right after one (see
/// [`waits_for_input`]), so what it waits for is not its clients but another thread or
/// process (measured: PostgreSQL backends blocked on an advisory or table lock wait in
/// the `epoll_wait` they wait for clients in; by call, they voted network I/O).
fn waits_mid_request(th: &Thread, key: u16, entry_ns: u64, d: &Derived) -> bool {
    usual_wait(th, key, d)
        && reads_until_would_block(th, entry_ns, d)
        && !waits_for_input(th, entry_ns)
        && !follows_a_send(th, entry_ns)
}

/// Whether the latest call `th` began before `entry_ns`, as its channels hold them,
/// hands output to a descriptor (see [`SyscallId::sends`]): a wait entered right after a
/// send may wait for a full socket to drain (a send that found it full returns
/// `-EAGAIN`, which is not kept), the network's doing, not a peer's.
fn follows_a_send(th: &Thread, entry_ns: u64) -> bool {
    th.chans
        .iter()
        .filter(|c| c.key != GAP_KEY && c.last_enter_ns != 0 && c.last_enter_ns < entry_ns)
        .max_by_key(|c| c.last_enter_ns)
        .is_some_and(|c| SyscallId(c.key).sends())
}

/// Share of a thread's calls that must be receives finding nothing for that to be its
/// habit: PostgreSQL's backends make one per statement (about 1 call in 7), an event
/// loop that reads once per readiness next to none, a stray one (an eventfd, a pipe)
/// none at all.
const WOULD_BLOCK_HABIT: f64 = 0.05;

/// Whether `t` reads its input until a receive finds nothing, then waits: at least
/// [`WOULD_BLOCK_HABIT`] of its calls in the epoch before it entered its wait at
/// `entry_ns` (its count halves at the end of each epoch it works, so it holds one to
/// two epochs' worth; halved once more, it is still above a habit of twice the share).
/// Only then does a wait entered otherwise say it stopped mid-request.
fn reads_until_would_block(t: &Thread, entry_ns: u64, d: &Derived) -> bool {
    let count = t.would_block.count();
    let calls = calls_in(t, entry_ns.saturating_sub(d.cadence_ns), entry_ns, d.bin_ns);
    count > 0 && f64::from(count) >= WOULD_BLOCK_HABIT * calls
}

/// A call a thread stopped in, for [`stopped_in_call`].
#[derive(Clone, Copy)]
struct Stop {
    enter_ns: u64,
    key: u16,
    /// How long it lasted (or has lasted so far).
    elapsed_ns: u64,
    /// When it began to count, after the entry.
    limit_ns: u64,
    /// The mean execution time the ranking compares the call with, when known: the
    /// thread's own baseline's, or the target's pooled one when it has none.
    mean: Option<f32>,
}

/// The episode of a thread stopped in a call: stuck in it (still, or until it returned,
/// judged by its own baseline) or blocked in one it had no baseline for. It counts from
/// `limit_ns` after the entry.
fn stopped_in_call(th: &Thread, stop: Stop, d: &Derived, p: &Params) -> Episode {
    let mut top = [Increase::default(); EPISODE_TOP];
    top[0] = Increase {
        key: stop.key,
        time: stop.mean.map_or(0.0, |m| {
            detector::increase(stop.elapsed_ns as f32, m).max(0.0)
        }),
        freq: 0.0,
    };
    Episode {
        alarm_ns: stop.enter_ns.saturating_add(stop.limit_ns),
        unit_start_ns: th.unit_start_ns,
        key: stop.key,
        frequency: false,
        stall: true,
        busy: at_activity_floor(th, stop.enter_ns, d, p),
        mid_request: false,
        top,
    }
}

/// The target's pooled mean execution time of `key`, once its pool is usable.
fn pooled_mean(pools: &[Pool], key: u16, d: &Derived) -> Option<f32> {
    pools
        .get(pool_index(key))
        .and_then(|p| p.dur.usable(d.pool_min_n, d.min_epochs))
        .map(|r| r.mean)
}

/// `sorted` without its far-out high values (above Q3 + 3·IQR, Tukey's fence), when there
/// are at least 4: one busy thread that went quiet and met the fault 16 s after the others
/// (measured on MariaDB under a CPU cap) is not the fault's onset, yet as the maximum it
/// would make α 30× larger.
fn without_far_out(sorted: &[f64]) -> &[f64] {
    if sorted.len() < 4 {
        return sorted;
    }
    let q1 = crate::stats::quantile_sorted(sorted, 0.25);
    let q3 = crate::stats::quantile_sorted(sorted, 0.75);
    let fence = q3 + 3.0 * (q3 - q1);
    let keep = sorted.partition_point(|&x| x <= fence);
    &sorted[..keep.max(1)]
}

/// Pool index of a channel key: the syscall id + 1, and 0 for [`GAP_KEY`] (`u16::MAX`,
/// which wraps to 0; branch-free, as this runs per moving average).
#[inline(always)]
fn pool_index(key: u16) -> usize {
    const _: () = assert!(GAP_KEY == u16::MAX);
    usize::from(key.wrapping_add(1))
}

/// Pushes one value into a channel's series (`ring` is its ring), learns, tests.
/// `None`: nothing was tested (no moving average yet, or no usable baseline); else
/// whether an outlier was confirmed, with its run start.
///
/// The approved baselines change only at epoch boundaries, so their consequences are
/// precomputed there (see [`Baseline::refresh`]): per moving average this is two gated
/// Welford steps and a comparison; the full test runs only above the gate, and the
/// confirmation state only when it can change. Inlined into its three call sites: as
/// a call, its prologue and epilogue were a tenth of its instructions.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn feed(
    series: &mut Series,
    cold: &mut ColdSlot,
    ring: &mut [f32],
    key: u16,
    pools: &mut Vec<Pool>,
    frequency: bool,
    x: f32,
    ts: u64,
    d: &Derived,
    lost: &mut f32,
) -> Option<Option<u64>> {
    let ma = series.push(ring, x)?;
    let pi = pool_index(key);
    if pools.len() <= pi {
        pools.resize(pi + 1, Pool::fresh(d));
    }
    let pool = pools.get_mut(pi)?;
    let pool_b = if frequency {
        &mut pool.ia
    } else {
        &mut pool.dur
    };
    // The reference: the thread's own baseline when usable, else the pooled one.
    let own = series.baseline.gate_usable();
    let tested = own || pool_b.gate_usable();
    let may = if own {
        series.baseline.may_exceed(ma)
    } else {
        pool_b.may_exceed(ma)
    };
    series.baseline.learn_gated(ma);
    pool_b.learn_gated(ma);
    if !tested {
        return None;
    }
    // Chosen only past the gate: most calls stop before either use.
    let thr = || {
        if frequency {
            &d.freq_th
        } else if key == GAP_KEY {
            &d.gap_th
        } else {
            &d.time_th
        }
    };
    // Learning touched only the current epochs, so the reference is as it was before.
    let outlier = may && {
        let r = if own {
            // An own usable gate was derived from this record, so it exists (an absent
            // one would read as the default: not usable).
            cold.peek()
                .and_then(|c| c.series(frequency).baseline.usable(d.min_n, d.min_epochs))
        } else {
            pool_b.usable(d.pool_min_n, d.min_epochs)
        };
        r.is_some_and(|r| {
            let outlier = detector::is_outlier(ma, &r, thr());
            // Time lost (see `LostBins`); a higher call rate loses no time by itself.
            if outlier && !frequency {
                *lost += ma - r.mean;
            }
            outlier
        })
    };
    if !outlier && !series.run {
        // Outside a run a non-outlier leaves the confirmation state as it is.
        return Some(None);
    }
    series.run = outlier;
    let Some(cold) = cold.get() else {
        // Unreachable: the slot's index is one of the thread's channels.
        return Some(None);
    };
    Some(
        series
            .confirm(cold.series_mut(frequency))
            .step(outlier, ts, thr()),
    )
}

/// The thread's per-syscall increases right now, for the ranking (largest first).
fn snapshot(
    th: &Thread,
    pools: &[Pool],
    d: &Derived,
    overflow: Option<(&EpochSketch, &[u64], f32)>,
) -> [Increase; EPISODE_TOP] {
    let mut out = [Increase::default(); EPISODE_TOP];
    let mut n = 0usize;
    let mut all: Vec<Increase> = Vec::with_capacity(th.chans.len());
    let absent = ChanCold::default();
    for (i, ch) in th.chans.iter().enumerate() {
        let cold = th.cold.get(i).unwrap_or(&absent);
        let pool = pools.get(pool_index(ch.key));
        // A channel not used since the unit began has been reset (lazily): no average.
        let current = th.is_current(ch);
        let rel = |s: &Series, sc: &SeriesCold, pb: Option<&Baseline>| -> f32 {
            let Some(ma) = s.current(d.k).filter(|_| current) else {
                return 0.0;
            };
            let Some(r) = sc
                .baseline
                .usable(d.min_n, d.min_epochs)
                .or_else(|| pb.and_then(|b| b.usable(d.pool_min_n, d.min_epochs)))
            else {
                return 0.0;
            };
            detector::increase(ma, r.mean).max(0.0)
        };
        let inc = Increase {
            key: ch.key,
            time: rel(&ch.dur, &cold.dur, pool.map(|p| &p.dur)),
            freq: rel(&ch.ia, &cold.ia, pool.map(|p| &p.ia)),
        };
        if inc.time > 0.0 || inc.freq > 0.0 {
            all.push(inc);
        }
    }
    // Overflowed syscalls: rate this epoch (so far) vs the previous epoch, from the sketch.
    if let Some((sk, ids, frac)) = overflow {
        for (w, word) in ids.iter().enumerate() {
            let mut bits = *word;
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                // Syscall keys are u16: the bitmap holds no bit beyond them.
                let Ok(id) = u16::try_from(w * 64 + b as usize) else {
                    continue;
                };
                let key = overflow_key(th.tid, id);
                let (cur, prev) = (sk.estimate_current(key), sk.estimate_previous(key));
                if prev > 0 && cur > 0 {
                    let freq = (cur as f32 / frac) / prev as f32 - 1.0;
                    if freq > 0.0 {
                        all.push(Increase {
                            key: id,
                            time: 0.0,
                            freq,
                        });
                    }
                }
            }
        }
    }
    all.sort_by(|a, b| b.time.max(b.freq).total_cmp(&a.time.max(a.freq)));
    for inc in all.into_iter().take(EPISODE_TOP) {
        if let Some(o) = out.get_mut(n) {
            *o = inc;
            n += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn far_out_onsets_are_left_out_of_alpha() {
        // The MariaDB CPU-cap recording: six busy threads within 0.5 s, one at 16 s.
        let onsets = [0.08, 0.18, 0.28, 0.28, 0.38, 0.48, 16.28];
        assert_eq!(super::without_far_out(&onsets), &onsets[..6]);
        // A spread-out first wave is kept whole, and so are too few values to judge.
        let spread = [2.48, 2.48, 3.18, 3.78, 3.98];
        assert_eq!(super::without_far_out(&spread), &spread[..]);
        assert_eq!(super::without_far_out(&[0.1, 9.0]), &[0.1, 9.0][..]);
        assert_eq!(super::without_far_out(&[]), &[] as &[f64]);
    }

    use super::*;

    #[test]
    fn onsets_count_from_the_end_of_the_latest_long_pause() {
        let d = Derived::new(&Params::default());
        let bin = d.bin_ns;
        // α (2 s) is six bins of 90 s / 256; the unit gap (1 s) three.
        assert_eq!(d.gap_ns.max(d.alpha_ns).div_ceil(bin), 6);
        let mut t = Thread::new(1, 1, 0);
        // Busy in bins 1000–1009, parked in one call over 1010–1059, then busy again from
        // 1060; a pause of four bins (over the gap, under α) at 1070–1073; busy from 1074.
        for b in (1000..1010).chain(1060..1070).chain(1074..1080) {
            t.add_call(b);
        }
        let (from, alarm) = (1000 * bin + 5, 1077 * bin + 7);
        // The short pause does not count; the long one ended where bin 1060 begins.
        assert_eq!(resumed_at(&t, from, alarm, &d), 1060 * bin);
        // Before the long pause ended, or with the pause before `from`, nothing changes.
        assert_eq!(resumed_at(&t, from, 1009 * bin, &d), from);
        assert_eq!(resumed_at(&t, 1061 * bin, alarm, &d), 1061 * bin);
        // An alarm at or before `from` leaves it alone.
        assert_eq!(resumed_at(&t, alarm, from, &d), alarm);
        // A thread stuck since bin 1080 in the call that is its alarm (bin 1095) did not
        // resume: its σ still counts from the long pause it did resume from.
        assert_eq!(resumed_at(&t, from, 1095 * bin, &d), 1060 * bin);
        // Bins the ring no longer holds read as empty but are no pause.
        let mut late = t.clone();
        late.add_call(1000 + 400);
        assert_eq!(resumed_at(&late, from, alarm, &d), from);
    }

    #[test]
    fn syscalls_beyond_the_cap_go_to_the_sketch() {
        let p = Params {
            max_syscalls_per_thread: 2,
            ..Params::default()
        };
        let mut t = Target::new("t", p);
        let mut c = EngineCounters::default();
        let before = t.bytes();
        let evs: Vec<SyscallEvent> = (0..30u64)
            .map(|i| SyscallEvent::complete(1, 1, SyscallId(1 + (i % 3) as u16), i * 1000, 10))
            .collect();
        t.ingest(&evs, &mut c);
        // the gap channel and syscall 1 take the two channels: syscalls 2 and 3 overflow
        assert_eq!(c.untracked_calls, 20);
        let sk = t.overflow.as_ref().expect("sketch created on overflow");
        assert!(sk.estimate_current(key2(1, 2)) >= 10);
        assert!(t.bytes() >= before + sk.bytes());
        assert_eq!(t.overflow_ids.first().map(|w| w & 0b1100), Some(0b1100));
    }

    #[test]
    fn a_syscall_id_equal_to_the_gap_key_is_an_unknown_syscall() {
        let mut t = Target::new("t", Params::default());
        let mut c = EngineCounters::default();
        // Calls 3 ms long, 4 ms apart: gaps of 1 ms; the odd id's durations must not
        // reach the gap series.
        let evs: Vec<SyscallEvent> = (0..40u64)
            .map(|i| SyscallEvent::complete(1, 1, SyscallId(GAP_KEY), i * 4_000_000, 3_000_000))
            .collect();
        t.ingest(&evs, &mut c);
        let th = t.threads.get(0).expect("the thread");
        let chan = |key| {
            th.find_chan(key)
                .and_then(|i| th.chans.get(i))
                .expect("a channel")
        };
        let k = t.d.k;
        assert_eq!(chan(SyscallId::UNKNOWN.0).dur.current(k), Some(3_000_000.0));
        assert_eq!(chan(GAP_KEY).dur.current(k), Some(1_000_000.0));
        assert_eq!(th.chans.len(), 2);
        assert_eq!(c.reserved_syscall_ids, 40, "each counted");
    }

    /// An id past the name tables (only a malformed batch or library caller makes one)
    /// is an unknown syscall too: the pooled baselines are indexed by id, and 65,534
    /// grew them to 65,535 entries (8 MiB a target).
    #[test]
    fn a_syscall_id_past_the_name_tables_is_an_unknown_syscall() {
        let mut t = Target::new("t", Params::default());
        let mut c = EngineCounters::default();
        let last = SyscallId((SyscallId::count() - 1) as u16);
        let evs: Vec<SyscallEvent> = (0..40u64)
            .map(|i| {
                let id = if i % 2 == 0 {
                    SyscallId(u16::MAX - 1)
                } else {
                    last
                };
                SyscallEvent::complete(1, 1, id, i * 4_000_000, 3_000_000)
            })
            .collect();
        t.ingest(&evs, &mut c);
        assert_eq!(
            c.reserved_syscall_ids, 20,
            "the 20 odd ids, not the table's last"
        );
        assert!(
            t.pools.len() <= SyscallId::count() + 1,
            "{} pools",
            t.pools.len()
        );
        let th = t.threads.get(0).expect("the thread");
        assert!(th.find_chan(SyscallId::UNKNOWN.0).is_some());
        assert!(th.find_chan(last.0).is_some());
        assert!(th.find_chan(u16::MAX - 1).is_none());
    }

    /// A completed call whose end is stamped far ahead (a span ending in the year 2500, a
    /// duration near `u64::MAX`) is left out as a clock outlier: taken in, it ended the
    /// thread's last call for good, and its later calls formed no gap and no new unit.
    #[test]
    fn a_completed_call_ending_past_the_clock_screen_is_left_out() {
        let mut t = Target::new("t", Params::default());
        let mut c = EngineCounters::default();
        let read = SyscallId::from_name("read");
        let ms = 1_000_000;
        let calls = |from: u64, n: u64| -> Vec<SyscallEvent> {
            (from..from + n)
                .map(|i| SyscallEvent::complete(1, 1, read, i * 4 * ms, 3 * ms))
                .collect()
        };
        t.ingest(&calls(1_000, 20), &mut c);
        let wild = [
            SyscallEvent::complete(1, 1, read, 1_020 * 4 * ms, u64::MAX - 1_020 * 4 * ms),
            SyscallEvent::complete(1, 1, read, 1_020 * 4 * ms, MAX_CLOCK_JUMP_NS + ms),
        ];
        t.ingest(&wild, &mut c);
        assert_eq!(c.clock_outliers, 2);
        assert_eq!(c.calls, 20, "neither was taken as a call");
        // The thread's later calls still have their gaps (1 ms each).
        t.ingest(&calls(1_021, 20), &mut c);
        let th = t.threads.get(0).expect("the thread");
        let gap = th
            .find_chan(GAP_KEY)
            .and_then(|i| th.chans.get(i))
            .expect("the gap channel");
        assert_eq!(gap.dur.current(t.d.k), Some(ms as f32));
        assert_eq!(c.calls, 40);
        // A long call that ends before the bound is a call: the first of a target may
        // start anywhere, and one that lasted under an hour ends within the bound.
        let mut fresh = Target::new("u", Params::default());
        let long = [SyscallEvent::complete(1, 1, read, 5, MAX_CLOCK_JUMP_NS / 2)];
        fresh.ingest(&long, &mut c);
        assert_eq!((c.calls, c.clock_outliers), (41, 2));
    }

    #[test]
    fn a_pending_entry_with_the_gap_key_is_an_unknown_syscall() {
        // Its exit never comes: an in-flight call judged against the gap series would
        // be reported as a stall of the thread between calls.
        let mut t = Target::new("t", Params::default());
        let mut c = EngineCounters::default();
        let odd = SyscallId(GAP_KEY);
        let evs = [
            SyscallEvent::enter(1, 1, odd, 1_000),
            SyscallEvent::exit(1, 1, odd, 2_000, None),
            SyscallEvent::enter(1, 1, odd, 3_000),
        ];
        t.ingest(&evs, &mut c);
        let th = t.threads.get(0).expect("the thread");
        let pending = th.pairer.pending().expect("the open entry");
        assert_eq!(pending.syscall, SyscallId::UNKNOWN);
        assert_eq!(c.calls, 1);
        assert_eq!(c.reserved_syscall_ids, 2, "once per call, at its entry");
    }

    #[test]
    fn eviction_at_the_thread_cap_spares_a_busy_thread() {
        let p = Params {
            max_threads: 256,
            ..Params::default()
        };
        let mut t = Target::new("t", p);
        let mut c = EngineCounters::default();
        // A busy thread, each of its calls followed by one of a thread never seen before.
        let evs: Vec<SyscallEvent> = (0..20_000u32)
            .flat_map(|i| {
                let ts = 1_000_000_000 + u64::from(i) * 10_000;
                [
                    SyscallEvent::complete(1, 1, SyscallId(1), ts, 100),
                    SyscallEvent::complete(1, 1_000 + i, SyscallId(1), ts + 5_000, 100),
                ]
            })
            .collect();
        t.ingest(evs.get(..2).expect("two"), &mut c);
        let slot = t.index.get(1);
        t.ingest(evs.get(2..).expect("the rest"), &mut c);
        assert_eq!(c.evicted_threads, 20_001 - 256);
        assert_eq!(t.thread_count(), 256);
        assert!(slot.is_some());
        assert_eq!(t.index.get(1), slot, "the busy thread kept its record");
        // The index and the records agree after all the evictions.
        for (i, th) in t.threads.iter().enumerate() {
            assert_eq!(t.index.get(th.tid), Some(i as u32));
        }
    }
}
