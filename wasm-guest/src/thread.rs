//! Per-thread analysis state: pairing, execution units, per-syscall series and the
//! bounded record of confirmed outliers ("episodes").
//!
//! Memory per thread is bounded by `max_syscalls_per_thread` channels (each: two
//! k-rings of `f32`, two baselines, two confirmation states; 128 + 152 bytes, plus 8·k
//! for k > [`INLINE_RING`]) plus
//! an episode ring of at most [`EPISODES_PER_THREAD`] (allocated as episodes occur),
//! 256 bins of time lost to outliers ([`LostBins`], 520 bytes, allocated at the first),
//! a 256-bin call counter and three 256-bin bitmaps (the 960-byte [`Thread`] record);
//! see [`Thread::bytes`].
//!
//! Layout is chosen for the ingest hot path at thousands of threads, where every event
//! lands on a thread whose state is out of cache: the fields a call touches are packed
//! at the front of [`Thread`] (one prefetchable span), channel keys live inline in the
//! record, and each channel is split in two records kept in parallel vectors: [`Chan`]
//! holds what every call touches (the moving averages with their rings, the current
//! epoch and the precomputed gate of both series' baselines: 128 bytes, 64-aligned, so
//! exactly two cache lines, the first 72 bytes of which are all a gap channel's call
//! touches), and [`ChanCold`] the approved and pending epochs and the confirmation
//! states, read only on a possible outlier, at an epoch boundary or by evaluations.
//! Only the hot records are prefetched.
//! The rings sit inside the channel record for the paper's k = 5 (and any k up to
//! [`INLINE_RING`]); a larger k keeps them in a per-thread slab instead.

use crate::detector::{BaselineCold, BaselineHot, Confirm};
use crate::pairing::Pairer;

/// Channel key of the off-CPU/user-time gap between a thread's consecutive calls.
///
/// Not a syscall: under a CPU cap or a noisy neighbour the calls themselves barely
/// change on a modern kernel; the *time between* them grows (the thread is throttled or
/// preempted while in user space). Measured per execution unit like a syscall type.
pub const GAP_KEY: u16 = u16::MAX;

/// Episodes remembered per thread (most recent kept).
pub const EPISODES_PER_THREAD: usize = 8;
/// Channel keys kept inside the thread record (the default channel cap).
pub const INLINE_KEYS: usize = 16;

const _: () = assert!(INLINE_KEYS == 16, "key_hits compares exactly 16 keys");

/// Bit `i` set when `keys[i] == key`: two SIMD compares and a mask instead of a loop.
#[inline]
fn key_hits(keys: &[u16; INLINE_KEYS], key: u16) -> u32 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of the x86_64 baseline; the two unaligned 16-byte loads read
    // exactly the 32 bytes of `keys`.
    unsafe {
        use std::arch::x86_64::*;
        let p = keys.as_ptr().cast::<__m128i>();
        let k = _mm_set1_epi16(key as i16);
        let lo = _mm_cmpeq_epi16(_mm_loadu_si128(p), k);
        let hi = _mm_cmpeq_epi16(_mm_loadu_si128(p.add(1)), k);
        // Equal lanes are -1: packed to bytes, one mask bit per key, in key order.
        _mm_movemask_epi8(_mm_packs_epi16(lo, hi)) as u32
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    // SAFETY: `v128_load` reads unaligned; the two loads read exactly the 32 bytes of `keys`.
    unsafe {
        use std::arch::wasm32::*;
        let p = keys.as_ptr().cast::<v128>();
        let k = u16x8_splat(key);
        let lo = u16x8_eq(v128_load(p), k);
        let hi = u16x8_eq(v128_load(p.add(1)), k);
        // Equal lanes are -1: narrowed to bytes, one mask bit per key, in key order.
        u32::from(i8x16_bitmask(i8x16_narrow_i16x8(lo, hi)))
    }
    #[cfg(not(any(
        target_arch = "x86_64",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    {
        let mut hits = 0u32;
        for (i, &c) in keys.iter().enumerate() {
            hits |= u32::from(c == key) << i;
        }
        hits
    }
}

/// Channels a thread's channel vectors grow by at a time.
const CHAN_STEP: usize = 4;

/// Syscalls remembered per episode for the ranking.
pub const EPISODE_TOP: usize = 6;

/// A k-moving average over a ring stored in the thread's ring slab, and the hot part of
/// its baseline: what a call of the series touches.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct Series {
    pub len: u8,
    pub pos: u8,
    /// Mirrors the confirmation state's "inside an exceedance run": while it is false a
    /// non-outlier average leaves [`Confirm`] unchanged, so its (cold) bytes are not
    /// touched at all.
    pub run: bool,
    /// The series' [`SeriesCold::confirm`] must be reset before its next use: a new
    /// execution unit restarts it without touching the cold record (most units end
    /// before any test reaches it).
    pub confirm_stale: bool,
    pub sum: f32,
    pub baseline: BaselineHot,
}

/// What a series keeps outside the per-call bytes: the approved and pending baseline
/// epochs and the confirmation state.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct SeriesCold {
    pub baseline: BaselineCold,
    pub confirm: Confirm,
}

impl Series {
    /// Pushes `x` into `ring` (length k) and returns the moving average once full.
    #[inline(always)]
    pub fn push(&mut self, ring: &mut [f32], x: f32) -> Option<f32> {
        let k = ring.len();
        let mut pos = self.pos as usize;
        if pos >= k {
            // Only after a change of k (and for k = 0): `%` is an integer division.
            if k == 0 {
                return None;
            }
            pos %= k;
        }
        let slot = ring.get_mut(pos)?;
        if (self.len as usize) < k {
            self.len += 1;
        } else {
            self.sum -= *slot;
        }
        *slot = x;
        self.sum += x;
        let full = self.len as usize >= k;
        if pos + 1 < k {
            self.pos = (pos + 1) as u8;
        } else {
            self.pos = 0;
            if full {
                // Recompute exactly every wrap to stop f32 drift.
                self.sum = ring.iter().sum();
            }
        }
        full.then(|| self.sum / k as f32)
    }

    /// Starts a new execution unit: the moving average restarts, the baseline stays; the
    /// confirmation state restarts when next used ([`Series::confirm`]).
    pub fn reset_unit(&mut self) {
        self.len = 0;
        self.pos = 0;
        self.sum = 0.0;
        self.run = false;
        self.confirm_stale = true;
    }

    /// The series' confirmation state (`cold.confirm`), reset first if a new unit began
    /// since it was last used.
    #[inline]
    pub fn confirm<'a>(&mut self, cold: &'a mut SeriesCold) -> &'a mut Confirm {
        if self.confirm_stale {
            self.confirm_stale = false;
            cold.confirm.reset();
        }
        &mut cold.confirm
    }

    /// The current moving average, when the ring is full.
    pub fn current(&self, k: usize) -> Option<f32> {
        (k > 0 && self.len as usize >= k).then(|| self.sum / k as f32)
    }
}

/// Ring entries of each series kept inside its [`Chan`] record: the paper's k = 5.
///
/// In a separate slab the rings cost a call 1–2 more cache lines per channel, in
/// another page; at 2,000–10,000 threads, where every call misses, that was 10–30 % of
/// the native ingest time (measured with the ring misses removed). A larger k uses the
/// slab ([`Thread::rings`]) and leaves these entries unused.
pub const INLINE_RING: usize = 5;

/// What a call of one syscall type (or the gap) of one thread touches; the rest of the
/// channel is the [`ChanCold`] at the same index.
///
/// 128 bytes aligned to 64: exactly two cache lines, one aligned pair of them. Each
/// series' ring (k ≤ [`INLINE_RING`]) follows the series. What a gap call touches
/// (`unit`, `dur` and its ring) is the first line, alone: the gap channel has no
/// frequency series, and every call feeds it, so a call costs one line less than with
/// `last_enter_ns` in front.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
pub struct Chan {
    /// The thread's unit generation this channel's moving averages belong to; when it
    /// differs from [`Thread::unit`] they are reset on next use (see [`Thread::start_unit`]).
    pub unit: u16,
    pub key: u16,
    /// Execution time (or gap length for [`GAP_KEY`]).
    pub dur: Series,
    /// `dur`'s ring when k ≤ [`INLINE_RING`].
    pub dur_ring: [f32; INLINE_RING],
    /// Entry time of the latest call of this syscall (0 = none yet); of the current unit
    /// only when `dur.len > 0` (a call of this unit has been pushed). Kept across units:
    /// it tells how long the channel has been idle (see [`Thread::recycle_chan`]).
    pub last_enter_ns: u64,
    /// Inter-arrival time of this syscall within the unit: the frequency channel.
    pub ia: Series,
    /// `ia`'s ring when k ≤ [`INLINE_RING`].
    pub ia_ring: [f32; INLINE_RING],
}

const _: () = assert!(std::mem::size_of::<Chan>() == 128);
const _: () = assert!(GAP_CHAN_HOT_BYTES <= 64, "a gap call must touch one line");
const _: () = assert!(
    Thread::HOT_BYTES <= 128,
    "a call must touch two lines of its thread"
);

/// A channel's parts one call updates, borrowed apart so its series and their rings
/// (inside the record, or in the thread's slab for a larger k) can be used together.
#[derive(Debug)]
pub struct ChanMut<'a> {
    pub last_enter_ns: &'a mut u64,
    pub dur: &'a mut Series,
    pub ia: &'a mut Series,
    pub dur_ring: &'a mut [f32],
    pub ia_ring: &'a mut [f32],
    pub cold: ColdSlot<'a>,
}

impl Chan {
    /// Either series learned something in the current epoch (read by epoch rotation,
    /// which skips threads that learned nothing, and by channel recycling).
    #[inline]
    pub fn learning(&self) -> bool {
        self.dur.baseline.learn.w.n != 0.0 || self.ia.baseline.learn.w.n != 0.0
    }
}

/// The cold part of a channel: its series' approved and pending epochs and confirmation
/// states.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ChanCold {
    pub dur: SeriesCold,
    pub ia: SeriesCold,
}

/// Leading bytes of a [`Chan`] a gap channel's call touches (`unit`, `dur` and its ring).
const GAP_CHAN_HOT_BYTES: usize = std::mem::offset_of!(Chan, last_enter_ns);

impl ChanCold {
    /// The cold part of the execution-time (`false`) or frequency (`true`) series.
    #[inline]
    pub fn series(&self, frequency: bool) -> &SeriesCold {
        if frequency {
            &self.ia
        } else {
            &self.dur
        }
    }

    /// [`ChanCold::series`], mutable.
    #[inline]
    pub fn series_mut(&mut self, frequency: bool) -> &mut SeriesCold {
        if frequency {
            &mut self.ia
        } else {
            &mut self.dur
        }
    }
}

/// One channel's cold record, created (with the thread's others) only when written:
/// reading an absent one gives `None`, to be read as [`ChanCold::default`].
#[derive(Debug)]
pub struct ColdSlot<'a> {
    all: &'a mut Vec<ChanCold>,
    index: usize,
    /// The thread's channel count and capacity, which the cold records follow.
    chans: usize,
    capacity: usize,
}

impl<'a> ColdSlot<'a> {
    /// Slot `index` of `all`, whose thread has `chans` channels (capacity `capacity`).
    pub fn new(all: &'a mut Vec<ChanCold>, index: usize, chans: usize, capacity: usize) -> Self {
        Self {
            all,
            index,
            chans,
            capacity,
        }
    }

    /// The record, if the thread's cold records exist.
    #[inline]
    pub fn peek(&self) -> Option<&ChanCold> {
        self.all.get(self.index)
    }

    /// The record, creating the thread's cold records first if they do not exist.
    #[inline]
    pub fn get(&mut self) -> Option<&mut ChanCold> {
        if self.all.len() < self.chans {
            materialize_cold(self.all, self.chans, self.capacity);
        }
        self.all.get_mut(self.index)
    }
}

/// Creates the default cold records of a thread with `chans` channels (capacity
/// `capacity`, exactly, like the channels).
#[cold]
pub fn materialize_cold(all: &mut Vec<ChanCold>, chans: usize, capacity: usize) {
    if all.capacity() < capacity {
        all.reserve_exact(capacity - all.len());
    }
    all.resize(chans, ChanCold::default());
}

impl Chan {
    /// Starts generation `unit`: the moving averages restart, the baselines stay.
    pub fn reset_unit(&mut self, unit: u16) {
        self.dur.reset_unit();
        self.ia.reset_unit();
        self.unit = unit;
    }
}

/// One syscall's increase when an episode was confirmed (for the ranking).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Increase {
    pub key: u16,
    /// Relative execution-time increase of the moving average over the baseline mean.
    pub time: f32,
    /// Relative frequency increase.
    pub freq: f32,
}

/// A confirmed outlier of a thread: the first in its execution unit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Episode {
    /// When the shift began (start of the CUSUM run).
    pub alarm_ns: u64,
    /// Start of the execution unit it happened in.
    pub unit_start_ns: u64,
    /// The channel that confirmed first.
    pub key: u16,
    /// Confirmed on the frequency channel (rather than execution time).
    pub frequency: bool,
    /// The episode stopped the thread: a stall or a spin outside any call (`key` is the
    /// gap channel, see `target::stall_episode` and `target::spin_episode`) or a block
    /// in a call it had no baseline for (see `target::blocked_episode`).
    pub stall: bool,
    /// It stopped a thread that was busy right before (at the activity floor,
    /// `min_active_calls` per α; a spin always: it stopped a thread that was working):
    /// on demand, such a stop alone is an anomaly (see `Target::evaluate`).
    pub busy: bool,
    /// It stopped the thread in its usual wait after the thread had read a request, not
    /// right after a receive found nothing (see `target::waits_mid_request`): the thread
    /// waits on another thread or process, not on its clients, so it votes locking
    /// whatever call it waits in.
    pub mid_request: bool,
    pub top: [Increase; EPISODE_TOP],
}

/// A 256-bin bitmap of "this thread was tested during bin b": tells which threads were
/// testable (active) right after the onset, in constant memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct BinSet {
    base: u64,
    bits: [u64; 4],
}

impl BinSet {
    pub const BINS: u64 = 256;

    pub fn mark(&mut self, bin: u64) {
        // Fast path (almost every call: the same or a recent bin): inside the kept range
        // of a non-empty set, which is what the general path below also does then.
        if bin >= self.base && bin - self.base < Self::BINS && self.bits != [0; 4] {
            let off = bin - self.base;
            if let Some(word) = self.bits.get_mut((off / 64) as usize) {
                *word |= 1 << (off % 64);
            }
            return;
        }
        if self.bits == [0; 4] || bin < self.base {
            if bin < self.base && self.bits != [0; 4] {
                // Older than what we keep in front: only accept if within range.
                if self.base - bin >= Self::BINS {
                    return;
                }
                let shift = self.base - bin;
                self.shift_up(shift);
                self.base = bin;
            } else if self.bits == [0; 4] {
                self.base = bin;
            }
        }
        let mut off = bin - self.base;
        if off >= Self::BINS {
            let drop = off - Self::BINS + 1;
            self.shift_down(drop);
            self.base += drop;
            off = bin - self.base;
        }
        let (w, b) = ((off / 64) as usize, off % 64);
        if let Some(word) = self.bits.get_mut(w) {
            *word |= 1 << b;
        }
    }

    /// Bins in `[lo, hi]` marked.
    pub fn count(&self, lo: u64, hi: u64) -> u32 {
        let lo = lo.max(self.base);
        let hi = hi.min(self.base + Self::BINS - 1);
        (lo..=hi)
            .filter(|&b| {
                let off = b - self.base;
                self.bits
                    .get((off / 64) as usize)
                    .is_some_and(|w| w & (1 << (off % 64)) != 0)
            })
            .count() as u32
    }

    /// Any bin in `[lo, hi]` marked.
    pub fn any(&self, lo: u64, hi: u64) -> bool {
        let lo = lo.max(self.base);
        let hi = hi.min(self.base + Self::BINS - 1);
        (lo..=hi).any(|b| {
            let off = b - self.base;
            self.bits
                .get((off / 64) as usize)
                .is_some_and(|w| w & (1 << (off % 64)) != 0)
        })
    }

    fn shift_down(&mut self, n: u64) {
        // drop the n oldest bins
        if n >= Self::BINS {
            self.bits = [0; 4];
            return;
        }
        let words = (n / 64) as usize;
        let bits = n % 64;
        let mut out = [0u64; 4];
        for (i, o) in out.iter_mut().enumerate() {
            let src = i + words;
            let lo = self.bits.get(src).copied().unwrap_or(0);
            let hi = self.bits.get(src + 1).copied().unwrap_or(0);
            *o = if bits == 0 {
                lo
            } else {
                (lo >> bits) | (hi << (64 - bits))
            };
        }
        self.bits = out;
    }

    fn shift_up(&mut self, n: u64) {
        if n >= Self::BINS {
            self.bits = [0; 4];
            return;
        }
        let words = (n / 64) as usize;
        let bits = n % 64;
        let mut out = [0u64; 4];
        for (i, o) in out.iter_mut().enumerate() {
            if i < words {
                continue;
            }
            let src = i - words;
            let lo = self.bits.get(src).copied().unwrap_or(0);
            let below = if src >= 1 {
                self.bits.get(src - 1).copied().unwrap_or(0)
            } else {
                0
            };
            *o = if bits == 0 {
                lo
            } else {
                (lo << bits) | (below >> (64 - bits))
            };
        }
        self.bits = out;
    }
}

/// Calls per bin over the last 256 bins: how busy a thread was right after the onset
/// (τ's "active" threads), in constant memory.
///
/// Calls in the latest bin are counted in `pending` (next to `latest`, in the thread's
/// hot bytes) and folded into `counts` when a later bin starts: consecutive calls of a
/// thread almost always share a bin, so a call does not touch the 512-byte array.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct CallBins {
    latest: u64,
    /// Calls in bin `latest` not yet in `counts` (saturating, like the counts).
    pending: u16,
    counts: [u16; 256],
}

impl Default for CallBins {
    fn default() -> Self {
        Self {
            latest: 0,
            pending: 0,
            counts: [0; 256],
        }
    }
}

impl CallBins {
    /// Leading bytes a call touches (`latest` and `pending`).
    pub const HOT_BYTES: usize = std::mem::offset_of!(CallBins, counts);

    #[inline]
    pub fn add(&mut self, bin: u64) {
        if bin == self.latest {
            // `c.saturating_add(n)` equals n saturating increments, and `pending` saturates
            // only when the sum does too.
            self.pending = self.pending.saturating_add(1);
            return;
        }
        self.add_other(bin);
    }

    /// [`CallBins::add`] for a bin other than the latest.
    #[cold]
    fn add_other(&mut self, bin: u64) {
        if bin > self.latest {
            let pending = std::mem::take(&mut self.pending);
            if let Some(c) = self.counts.get_mut((self.latest % RING_BINS) as usize) {
                *c = c.saturating_add(pending);
            }
        }
        if !ring_seek(&mut self.counts, &mut self.latest, bin) {
            return;
        }
        if let Some(c) = self.counts.get_mut((bin % RING_BINS) as usize) {
            *c = c.saturating_add(1);
        }
    }

    /// The newest bin counted.
    #[inline(always)]
    pub fn latest(&self) -> u64 {
        self.latest
    }

    /// Hints the counts [`CallBins::add`] of `bin` touches when `bin` is not the latest:
    /// the latest bin's (where `pending` is folded) and `bin`'s. The 512-byte array lies
    /// past the thread's hot bytes, so each is a miss otherwise.
    #[inline(always)]
    pub fn prefetch_add(&self, bin: u64) {
        if bin == self.latest {
            return;
        }
        for b in [self.latest, bin] {
            if let Some(c) = self.counts.get((b % RING_BINS) as usize) {
                crate::prefetch::line(c);
            }
        }
    }

    /// Calls in bins `[lo, hi]` (bins older than the ring count as 0).
    pub fn sum(&self, lo: u64, hi: u64) -> u64 {
        ring_sum(&self.counts, self.latest, lo, hi, self.pending)
    }

    /// The oldest bin the ring still holds: older bins read as empty, not as idle.
    pub fn oldest_kept(&self) -> u64 {
        self.latest.saturating_sub(RING_BINS - 1)
    }
}

/// Time a thread lost to outliers per bin: the excess of each outlying moving average of
/// an execution time or of the gap between calls over its baseline mean, as a share of
/// the bin (in 1/65,535ths, saturating at the whole bin: a thread cannot lose more time
/// than passed; ~2.7 µs a part with the default 90 s window).
///
/// Why: a brief network hiccup can keep a thread's `sendto` moving averages above their
/// baseline for seconds (a few calls of 1–2 ms among calls of 30 µs), which the outlier
/// share alone reads as a lasting fault although the thread lost a fraction of a percent
/// of its time. Summed over a k-moving average's outliers the excesses add up to about
/// the excess of the calls behind them (each call is in k averages, at 1/k weight).
#[derive(Clone, Debug)]
pub struct LostBins {
    latest: u64,
    parts: [u16; 256],
}

/// Parts of a bin in a [`LostBins`] count.
const LOST_PARTS: f32 = u16::MAX as f32;

impl Default for LostBins {
    fn default() -> Self {
        Self {
            latest: 0,
            parts: [0; 256],
        }
    }
}

impl LostBins {
    /// Adds `share` of a bin's time to `bin`; bins older than the ring are ignored.
    pub fn add(&mut self, bin: u64, share: f32) {
        if !ring_seek(&mut self.parts, &mut self.latest, bin) {
            return;
        }
        let parts = (share * LOST_PARTS).round().clamp(0.0, LOST_PARTS) as u16;
        if let Some(c) = self.parts.get_mut((bin % RING_BINS) as usize) {
            *c = c.saturating_add(parts);
        }
    }

    /// Bins' worth of time lost in bins `[lo, hi]`.
    pub fn sum(&self, lo: u64, hi: u64) -> f64 {
        ring_sum(&self.parts, self.latest, lo, hi, 0) as f64 / f64::from(LOST_PARTS)
    }
}

/// Bins of the per-thread rings ([`CallBins`], [`crate::cpu_time::CpuBins`]).
pub const RING_BINS: u64 = 256;

/// Moves a ring whose newest bin is `latest` to `bin` when that is newer, zeroing the bins
/// it skips; false when `bin` is older than the ring still holds.
pub fn ring_seek<T: Copy + Default>(slots: &mut [T; 256], latest: &mut u64, bin: u64) -> bool {
    if bin > *latest {
        let clear = (bin - *latest).min(RING_BINS);
        for i in 0..clear {
            if let Some(c) = slots.get_mut(((bin - i) % RING_BINS) as usize) {
                *c = T::default();
            }
        }
        *latest = bin;
        true
    } else {
        *latest - bin < RING_BINS
    }
}

/// Sum of a ring's bins `[lo, hi]` (bins older than the ring or newer than `latest` count
/// as 0), plus `extra` when the range holds `latest` (counts not yet folded in).
pub fn ring_sum(slots: &[u16; 256], latest: u64, lo: u64, hi: u64, extra: u16) -> u64 {
    let hi = hi.min(latest);
    let lo = lo.max(latest.saturating_sub(RING_BINS - 1));
    if lo > hi {
        return 0;
    }
    (lo..=hi)
        .map(|b| {
            let c = slots.get((b % RING_BINS) as usize).copied().unwrap_or(0);
            u64::from(if b == latest {
                c.saturating_add(extra)
            } else {
                c
            })
        })
        .sum()
}

/// [`Thread::latest_marks`] flag: a channel was tested in the latest bin.
const LATEST_TESTED: u8 = 1;
/// [`Thread::latest_marks`] flag: an I/O channel was tested in the latest bin.
const LATEST_TESTED_IO: u8 = 2;

/// Everything the engine keeps about one thread.
///
/// `repr(C)` keeps the declared order: the fields every call touches come first so a
/// call costs few cache lines (at 10,000 threads each event hits a cold thread); the
/// episode list, read only by evaluations, is last and allocated on first use.
#[derive(Clone, Debug, Default)]
#[repr(C, align(64))]
pub struct Thread {
    pub last_seen_ns: u64,
    /// Exit time of the previous call (0 = no call yet).
    pub last_exit_ns: u64,
    pub tid: u32,
    /// Generation of the current execution unit (see [`Chan::unit`]).
    pub unit: u16,
    /// Index + 1 of the gap channel (0 = none yet): looked up twice per call, and a
    /// field read is cheaper than the key scan.
    gap_chan: u16,
    /// Longest call the thread completed (µs), decaying by 1/8 per epoch: what "blocked
    /// longer than it ever waits" is measured against (see `target::blocked_episode`).
    pub longest_call_us: u32,
    /// An episode was already recorded in the current unit (only the first counts).
    pub unit_has_episode: bool,
    /// The thread had an episode in the current epoch: its own baselines skip this epoch.
    pub dirty: bool,
    pub episode_pos: u8,
    /// Marks of bin `calls.latest()` not yet in `tested` ([`LATEST_TESTED`]) and
    /// `tested_io` ([`LATEST_TESTED_IO`]); see [`Thread::mark_tested`].
    latest_marks: u8,
    pub pairer: Pairer,
    /// Keys of the first [`INLINE_KEYS`] channels, parallel to `chans`: the per-call
    /// lookup scans 2 bytes per channel in the thread's own cache lines instead of whole
    /// channel records on the heap.
    pub keys: [u16; INLINE_KEYS],
    pub chans: Vec<Chan>,
    /// Calls per bin (its [`CallBins::HOT_BYTES`] end the per-call part of the record:
    /// at most two cache lines, see [`Thread::HOT_BYTES`]). Counted through
    /// [`Thread::add_call`], which keeps `latest_marks` true to its bin.
    calls: CallBins,
    /// Start of the current execution unit: written when a unit starts, read by
    /// episodes, so outside the per-call part.
    pub unit_start_ns: u64,
    /// Bins in which any channel was tested, but for the latest bin's mark while it is
    /// a flag in `latest_marks` (read it through [`Thread::tested`]).
    tested: BinSet,
    /// When the last episode was recorded (for the refractory period; read when an
    /// outlier is confirmed, so outside the per-call part).
    pub last_episode_ns: u64,
    /// Ring slab, used only when k > [`INLINE_RING`] (else empty): channel i owns
    /// `[i·2k, i·2k+k)` (execution time) and `[i·2k+k, (i+1)·2k)` (inter-arrival).
    pub rings: Vec<f32>,
    /// Bins in which a disk/network I/O channel was tested (filtering mode), like
    /// `tested` (read it through [`Thread::tested_io`]).
    tested_io: BinSet,
    /// Keys of channels beyond [`INLINE_KEYS`] (only with a larger channel cap).
    pub more_keys: Vec<u16>,
    /// Cold parts of `chans`, index for index: empty until one is first written (see
    /// [`ColdSlot`]), then as long as `chans`. An absent record reads as
    /// [`ChanCold::default`], which is what it would hold: most threads of a
    /// thread-per-task server live shorter than an epoch and never learn a baseline, so
    /// they never allocate one.
    pub cold: Vec<ChanCold>,
    /// Bins in which a tested moving average was an outlier: how long an anomaly lasted
    /// (a fault persists; a checkpoint burst nobody felt does not). Touched only by
    /// outlier tests, so it sits in the cold part of the record.
    pub outlying: BinSet,
    /// Most recent episodes, a ring of at most [`EPISODES_PER_THREAD`] (slot
    /// `episode_pos` is written next); grows one at a time since most threads have none.
    pub episodes: Vec<Episode>,
    /// On-CPU time per bin, for sources with scheduler records (absent otherwise).
    pub cpu: Option<Box<crate::cpu_time::CpuBins>>,
    /// Time lost per bin to outlying execution times and gaps (see [`LostBins`]);
    /// allocated at the thread's first outlier, which most threads never have.
    pub lost: Option<Box<LostBins>>,
    /// No channel can be recycled before this time (see [`Thread::recycle_chan`]): a
    /// thread with more busy syscalls than channels does not rescan on every call.
    pub recycle_after_ns: u64,
    /// Process (thread group) of the thread, as its first record said: a process that
    /// exits takes all its threads with it (see `target::Stops`).
    pub pid: u32,
    /// The thread's receives that found nothing to read ([`WouldBlock`]).
    pub would_block: WouldBlock,
}

/// A thread's receives that returned [`crate::syscalls::WOULD_BLOCK`]: the latest one's
/// entry time (0 = none) and how many there were, halving at the end of each epoch the
/// thread works. A wait right after such a receive waits for input, and the count says
/// whether finding nothing is the thread's habit (see `target::waits_for_input`,
/// `target::reads_until_would_block`). Written on those calls only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WouldBlock {
    latest_ns: u64,
    count: u32,
}

impl WouldBlock {
    /// Notes a receive entered at `enter_ns` that found nothing.
    #[inline]
    pub fn note(&mut self, enter_ns: u64) {
        self.latest_ns = enter_ns.max(1);
        self.count = self.count.saturating_add(1);
    }

    /// The latest one's entry time, 0 when none.
    pub fn latest_ns(self) -> u64 {
        self.latest_ns
    }

    /// How many there were, decayed: one to two epochs' worth of the thread's work.
    pub fn count(self) -> u32 {
        self.count
    }

    /// One epoch's decay.
    pub fn decay(&mut self) {
        self.count -= self.count / 2;
    }
}

impl Thread {
    pub fn new(pid: u32, tid: u32, now_ns: u64) -> Self {
        Self {
            tid,
            pid,
            last_seen_ns: now_ns,
            ..Self::default()
        }
    }

    /// Leading bytes every call touches; two cache lines, since at 10,000 threads each
    /// line of them is a miss per call.
    pub const HOT_BYTES: usize = std::mem::offset_of!(Thread, calls) + CallBins::HOT_BYTES;

    /// The thread's calls per bin.
    #[inline(always)]
    pub fn calls(&self) -> &CallBins {
        &self.calls
    }

    /// Counts a call in `bin`.
    #[inline]
    pub fn add_call(&mut self, bin: u64) {
        if bin != self.calls.latest() {
            // The latest bin may change: its pending marks go into the sets first.
            self.fold_tested();
        }
        self.calls.add(bin);
    }

    /// Marks `bin` as one in which a channel was tested.
    ///
    /// A mark of the latest bin (almost every call's) is only a flag in `latest_marks`,
    /// among the bytes every call touches; it goes into the bin set when another bin is
    /// counted or marked, so the set's bytes are off the per-call path. The set sees the
    /// same marks in the same order, less repeats of the same bin, which change nothing.
    #[inline]
    pub fn mark_tested(&mut self, bin: u64) {
        self.mark(LATEST_TESTED, bin);
    }

    /// Marks `bin` as one in which a disk or network I/O channel was tested, like
    /// [`Thread::mark_tested`].
    #[inline]
    pub fn mark_tested_io(&mut self, bin: u64) {
        self.mark(LATEST_TESTED_IO, bin);
    }

    #[inline(always)]
    fn mark(&mut self, which: u8, bin: u64) {
        if bin == self.calls.latest() {
            self.latest_marks |= which;
        } else {
            self.mark_other(which, bin);
        }
    }

    #[cold]
    fn mark_other(&mut self, which: u8, bin: u64) {
        self.fold_tested();
        if which == LATEST_TESTED {
            self.tested.mark(bin);
        } else {
            self.tested_io.mark(bin);
        }
    }

    fn fold_tested(&mut self) {
        let marks = std::mem::take(&mut self.latest_marks);
        if marks & LATEST_TESTED != 0 {
            self.tested.mark(self.calls.latest());
        }
        if marks & LATEST_TESTED_IO != 0 {
            self.tested_io.mark(self.calls.latest());
        }
    }

    /// `set` with the latest bin marked when `latest_marks` has `which`.
    fn with_latest(&self, mut set: BinSet, which: u8) -> BinSet {
        if self.latest_marks & which != 0 {
            set.mark(self.calls.latest());
        }
        set
    }

    /// Bins in which any channel was tested.
    pub fn tested(&self) -> BinSet {
        self.with_latest(self.tested, LATEST_TESTED)
    }

    /// Bins in which a disk or network I/O channel was tested.
    pub fn tested_io(&self) -> BinSet {
        self.with_latest(self.tested_io, LATEST_TESTED_IO)
    }

    /// Index of `key`'s channel, creating it while under `cap`.
    #[inline]
    pub fn chan_index(&mut self, key: u16, k: usize, cap: usize) -> Option<usize> {
        if let Some(i) = self.find_chan(key) {
            let unit = self.unit;
            if let Some(c) = self.chans.get_mut(i) {
                if c.unit != unit {
                    c.reset_unit(unit);
                }
            }
            return Some(i);
        }
        self.add_chan(key, k, cap)
    }

    /// Whether `c`'s moving averages belong to the current execution unit (if not, they
    /// count as just reset).
    #[inline]
    pub fn is_current(&self, c: &Chan) -> bool {
        c.unit == self.unit
    }

    /// Channel `ci`'s series, their rings and its cold record, for one call (k: the
    /// moving average's length).
    #[inline(always)]
    pub fn chan_mut(&mut self, ci: usize, k: usize) -> Option<ChanMut<'_>> {
        let (n, cap) = (self.chans.len(), self.chans.capacity());
        let Chan {
            last_enter_ns,
            dur,
            dur_ring,
            ia,
            ia_ring,
            ..
        } = self.chans.get_mut(ci)?;
        let (dur_ring, ia_ring) = if k <= INLINE_RING {
            (dur_ring.get_mut(..k)?, ia_ring.get_mut(..k)?)
        } else {
            let base = ci * 2 * k;
            self.rings
                .get_mut(base..base + 2 * k)?
                .split_at_mut_checked(k)?
        };
        Some(ChanMut {
            last_enter_ns,
            dur,
            ia,
            dur_ring,
            ia_ring,
            cold: ColdSlot::new(&mut self.cold, ci, n, cap),
        })
    }

    /// Index of `key`'s channel, if the thread has one.
    #[inline]
    pub fn find_chan(&self, key: u16) -> Option<usize> {
        if key == GAP_KEY {
            // Folds away where the key is the constant (the gap lookups).
            return usize::from(self.gap_chan).checked_sub(1);
        }
        let n = self.chans.len();
        // All inline keys compared at once; keys past `n` are masked off. Called up to
        // four times per call, a scalar scan was ~15 % of the ingest instructions.
        let hits = key_hits(&self.keys, key);
        let live = if n >= INLINE_KEYS {
            u32::MAX
        } else {
            (1u32 << n) - 1
        };
        let hits = hits & live;
        if hits != 0 {
            return Some(hits.trailing_zeros() as usize);
        }
        if n <= INLINE_KEYS {
            return None;
        }
        self.more_keys
            .iter()
            .position(|&c| c == key)
            .map(|i| i + INLINE_KEYS)
    }

    /// Prefetches what the next call of `key` will touch: its channel and rings, and the
    /// gap channel and its ring. False when `key` has no channel (the call will go to the
    /// target's sketch).
    // Always inlined: in the WASM guest a call per event also costs an epoch check.
    #[inline(always)]
    pub fn prefetch_call(&self, key: u16, k: usize) -> bool {
        let found = self.find_chan(key);
        let slab = k > INLINE_RING;
        if let Some(ci) = found {
            if let Some(c) = self.chans.get(ci) {
                crate::prefetch::bytes(c, std::mem::size_of::<Chan>());
            }
            if slab {
                if let Some(r) = self.rings.get(ci * 2 * k..(ci + 1) * 2 * k) {
                    crate::prefetch::slice(r);
                }
            }
        }
        if let Some(gi) = usize::from(self.gap_chan).checked_sub(1) {
            if let Some(c) = self.chans.get(gi) {
                crate::prefetch::bytes(c, GAP_CHAN_HOT_BYTES);
            }
            if slab {
                if let Some(r) = self.rings.get(gi * 2 * k..gi * 2 * k + k) {
                    crate::prefetch::slice(r);
                }
            }
        }
        found.is_some()
    }

    #[cold]
    fn add_chan(&mut self, key: u16, k: usize, cap: usize) -> Option<usize> {
        if self.chans.len() >= cap {
            return None;
        }
        // Growth in steps of CHAN_STEP channels: per-thread vectors are the bulk of the
        // state at 10,000 threads, and one reallocation per new syscall was a tenth of
        // the ingest time when threads are short-lived.
        if self.chans.len() == self.chans.capacity() {
            let step = CHAN_STEP.min(cap - self.chans.len());
            self.chans.reserve_exact(step);
        }
        if !self.cold.is_empty() && self.cold.len() == self.cold.capacity() {
            self.cold
                .reserve_exact(self.chans.capacity() - self.cold.len());
        }
        self.chans.push(Chan {
            key,
            unit: self.unit,
            ..Chan::default()
        });
        if !self.cold.is_empty() {
            self.cold.push(ChanCold::default());
        }
        let i = self.chans.len() - 1;
        if key == GAP_KEY {
            // `i` < cap ≤ 1024 (validated), so `i + 1` fits.
            self.gap_chan = u16::try_from(i + 1).unwrap_or(0);
        }
        match self.keys.get_mut(i) {
            Some(slot) => *slot = key,
            None => {
                self.more_keys.reserve_exact(1);
                self.more_keys.push(key);
            }
        }
        if k > INLINE_RING {
            // Slab rings follow the channels' capacity (exactly, never amortized doubling).
            let ring_cap = self.chans.capacity() * 2 * k;
            if self.rings.capacity() < ring_cap {
                self.rings.reserve_exact(ring_cap - self.rings.len());
            }
            self.rings.resize(self.chans.len() * 2 * k, 0.0);
        }
        Some(self.chans.len() - 1)
    }

    /// Hands the channel idle longest to `key`, when one is idle long enough: `fresh_ns`
    /// for a channel that never learned a baseline (a call made a few times, such as a
    /// process's startup calls), `learned_ns` for one that did. Returns its index.
    ///
    /// Channels go to syscalls first come, first served, up to the cap: without this, a
    /// process's startup calls held every channel for good (measured: a PostgreSQL
    /// backend forked during the trace spent its 15 channels on its startup calls, and
    /// 42,150 of its 42,283 calls went untested). The gap channel is never recycled.
    /// The caller asks only for a syscall that recurs (see the module docs of
    /// [`crate::target`]): rare syscalls taking turns would each evict another before
    /// either learned anything.
    #[cold]
    pub fn recycle_chan(
        &mut self,
        key: u16,
        k: usize,
        ts: u64,
        fresh_ns: u64,
        learned_ns: u64,
    ) -> Option<usize> {
        if ts < self.recycle_after_ns || key == GAP_KEY {
            return None;
        }
        let mut best: Option<(usize, u64)> = None;
        let mut next = u64::MAX;
        for (i, c) in self.chans.iter().enumerate() {
            if c.key == GAP_KEY {
                continue;
            }
            // The shorter wait first: most channels fail it, and then their cold
            // records (a cache miss each) are not read.
            let fresh_at = c.last_enter_ns.saturating_add(fresh_ns.min(learned_ns));
            if fresh_at > ts {
                next = next.min(fresh_at);
                continue;
            }
            let learned = c.learning()
                || self.cold.get(i).is_some_and(|cold| {
                    [&cold.dur, &cold.ia]
                        .iter()
                        .any(|s| s.baseline.base.w.n > 0.0 || s.baseline.prev.w.n > 0.0)
                });
            let free_at =
                c.last_enter_ns
                    .saturating_add(if learned { learned_ns } else { fresh_ns });
            if free_at > ts {
                next = next.min(free_at);
                continue;
            }
            let idle = ts - c.last_enter_ns;
            if let Some((_, b)) = best {
                // The one not taken is free for the next newcomer.
                next = ts;
                if idle <= b {
                    continue;
                }
            }
            best = Some((i, idle));
        }
        // Until then no channel frees: no scan (each reads every channel's record). A
        // thread whose channels are all busy rescans at most every quarter `fresh_ns`.
        self.recycle_after_ns = if best.is_some() {
            next
        } else {
            next.max(ts.saturating_add(fresh_ns / 4))
        };
        let (i, _) = best?;
        let unit = self.unit;
        let c = self.chans.get_mut(i)?;
        *c = Chan {
            key,
            unit,
            // In use from now (the caller's call), not idle since time 0.
            last_enter_ns: ts,
            ..Chan::default()
        };
        if let Some(cold) = self.cold.get_mut(i) {
            *cold = ChanCold::default();
        }
        // (Rings inside the record restarted with it; a larger k's are in the slab.)
        if let Some(ring) = self.rings.get_mut(i * 2 * k..(i + 1) * 2 * k) {
            ring.fill(0.0);
        }
        match self.keys.get_mut(i) {
            Some(slot) => *slot = key,
            None => {
                if let Some(slot) = self.more_keys.get_mut(i - INLINE_KEYS) {
                    *slot = key;
                }
            }
        }
        Some(i)
    }

    /// A new execution unit starts at `ts`: moving averages restart, baselines stay.
    ///
    /// The channels are reset lazily: bumping the generation marks them all stale, and
    /// [`Thread::chan_index`] resets one when it is next used, so a unit split costs
    /// O(1) instead of touching every channel (at 10,000 threads, all cache misses).
    /// When the generation would wrap, every channel is reset at once, so a stale
    /// channel can never look current.
    pub fn start_unit(&mut self, ts: u64) {
        self.unit_start_ns = ts;
        self.unit_has_episode = false;
        match self.unit.checked_add(1) {
            Some(u) => self.unit = u,
            None => {
                self.unit = 0;
                for c in &mut self.chans {
                    c.reset_unit(0);
                }
            }
        }
    }

    pub fn push_episode(&mut self, e: Episode) {
        let i = (self.episode_pos as usize) % EPISODES_PER_THREAD;
        if let Some(slot) = self.episodes.get_mut(i) {
            *slot = e;
        } else {
            // Until the ring is full, slot `episode_pos` is the next one to append.
            self.episodes.reserve_exact(1);
            self.episodes.push(e);
        }
        self.episode_pos = ((i + 1) % EPISODES_PER_THREAD) as u8;
    }

    /// Heap plus inline bytes held by this thread.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.chans.capacity() * std::mem::size_of::<Chan>()
            + self.cold.capacity() * std::mem::size_of::<ChanCold>()
            + self.more_keys.capacity() * std::mem::size_of::<u16>()
            + self.rings.capacity() * std::mem::size_of::<f32>()
            + self.episodes.capacity() * std::mem::size_of::<Episode>()
            + self
                .cpu
                .as_ref()
                .map_or(0, |_| std::mem::size_of::<crate::cpu_time::CpuBins>())
            + self
                .lost
                .as_ref()
                .map_or(0, |_| std::mem::size_of::<LostBins>())
    }

    /// Adds `share` of a bin's time lost to an outlier in `bin`.
    pub fn add_lost(&mut self, bin: u64, share: f32) {
        self.lost.get_or_insert_with(Box::default).add(bin, share);
    }

    /// Bins' worth of time lost to outliers in bins `[lo, hi]`.
    pub fn lost(&self, lo: u64, hi: u64) -> f64 {
        self.lost.as_ref().map_or(0.0, |l| l.sum(lo, hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_time_is_summed_per_bin_and_forgotten_with_the_ring() {
        let mut t = Thread::default();
        let part = 1.0 / f64::from(LOST_PARTS);
        assert_eq!(t.lost(0, 1000), 0.0);
        t.add_lost(10, 0.25);
        t.add_lost(10, 0.125);
        t.add_lost(12, 0.5);
        let near = |x: f64, want: f64| (x - want).abs() <= 2.0 * part;
        assert!(near(t.lost(10, 10), 0.375), "{}", t.lost(10, 10));
        assert!(near(t.lost(10, 12), 0.875));
        assert_eq!(t.lost(11, 11), 0.0);
        // A bin holds at most its own time; a negative excess adds nothing.
        t.add_lost(20, 0.75);
        t.add_lost(20, 0.75);
        t.add_lost(20, -3.0);
        assert_eq!(t.lost(20, 20), 1.0);
        // A bin a whole ring later clears what it passes; older bins are not counted.
        t.add_lost(20 + RING_BINS, 0.5);
        assert!(near(t.lost(0, 20 + RING_BINS), 0.5));
        t.add_lost(20, 0.25);
        assert!(near(t.lost(0, 20 + RING_BINS), 0.5));
        assert!(t.bytes() >= std::mem::size_of::<Thread>() + std::mem::size_of::<LostBins>());
    }

    proptest::proptest! {
        /// Marks of the latest bin are deferred flags (`latest_marks`); the sets read
        /// through `tested()`/`tested_io()` must equal sets marked at once, whatever the
        /// order of calls counted and bins marked (older, same, newer, out of range).
        #[test]
        fn deferred_latest_marks_read_as_marks_made_at_once(
            ops in proptest::collection::vec((0u8..3, 0u64..600), 0..400),
        ) {
            let mut t = Thread::new(1, 1, 0);
            let (mut tested, mut tested_io) = (BinSet::default(), BinSet::default());
            for (op, bin) in ops {
                match op {
                    0 => t.add_call(bin),
                    1 => {
                        t.mark_tested(bin);
                        tested.mark(bin);
                    }
                    _ => {
                        t.mark_tested_io(bin);
                        tested_io.mark(bin);
                    }
                }
                for (got, want) in [(t.tested(), tested), (t.tested_io(), tested_io)] {
                    proptest::prop_assert_eq!(got.count(0, 1_000), want.count(0, 1_000));
                    for lo in (0..600).step_by(37) {
                        proptest::prop_assert_eq!(got.count(lo, lo + 40), want.count(lo, lo + 40));
                    }
                }
            }
        }
    }

    #[test]
    fn series_moving_average() {
        let mut s = Series::default();
        let mut ring = [0f32; 3];
        assert_eq!(s.push(&mut ring, 1.0), None);
        assert_eq!(s.push(&mut ring, 2.0), None);
        assert_eq!(s.push(&mut ring, 3.0), Some(2.0));
        assert_eq!(s.push(&mut ring, 7.0), Some(4.0));
    }

    #[test]
    fn find_chan_sees_only_live_channels_first_match_first() {
        let mut t = Thread::new(1, 1, 0);
        // Unused inline key slots hold 0, which is also a real syscall key.
        assert_eq!(t.find_chan(0), None);
        for key in [7u16, 0, GAP_KEY] {
            t.chan_index(key, 5, 64);
        }
        assert_eq!(
            (t.find_chan(7), t.find_chan(0), t.find_chan(GAP_KEY)),
            (Some(0), Some(1), Some(2))
        );
        assert_eq!(t.find_chan(8), None);
        // Beyond the inline keys (a larger cap): the overflow list is searched.
        for key in 100..120u16 {
            t.chan_index(key, 5, 64);
        }
        assert_eq!((t.find_chan(112), t.find_chan(119)), (Some(15), Some(22)));
        assert_eq!(t.find_chan(120), None);
    }

    #[test]
    fn idle_channels_go_to_new_syscalls_longest_idle_first() {
        const S: u64 = 1_000_000_000;
        let mut t = Thread::new(1, 1, 0);
        // A full thread: the gap channel and syscalls 1..=3, last used at 1, 2, 3 s.
        for (key, at) in [(GAP_KEY, 0), (1, S), (2, 2 * S), (3, 3 * S)] {
            let i = t.chan_index(key, 5, 4).expect("room");
            t.chans[i].last_enter_ns = at;
        }
        assert_eq!(t.chan_index(9, 5, 4), None, "full");
        // At 3.5 s only syscall 1 has been idle for 2 s: none for 3 s.
        assert_eq!(t.recycle_chan(9, 5, 3 * S + S / 2, 3 * S, 60 * S), None);
        // Syscall 1 frees at 4 s, but a full thread rescans a quarter of 3 s later at
        // the earliest.
        assert_eq!(t.recycle_after_ns, 4 * S + S / 4);
        // Before then no scan; from then on the longest idle goes first.
        t.chans[1].last_enter_ns = 0;
        assert_eq!(t.recycle_chan(9, 5, 4 * S, 3 * S, 60 * S), None);
        t.chans[1].last_enter_ns = S;
        for c in &mut t.chans {
            (c.dur_ring, c.ia_ring) = ([7.0; INLINE_RING], [7.0; INLINE_RING]);
        }
        assert_eq!(t.recycle_chan(9, 5, 10 * S, 3 * S, 60 * S), Some(1));
        assert_eq!((t.find_chan(9), t.find_chan(1)), (Some(1), None));
        assert_eq!(t.chans[1].key, 9);
        let c = &t.chans[1];
        assert!(
            c.dur_ring.iter().chain(&c.ia_ring).all(|&x| x == 0.0),
            "its rings restart"
        );
        assert_eq!(t.recycle_chan(8, 5, 10 * S, 3 * S, 60 * S), Some(2));
        // A channel that learned a baseline is kept for the longer time.
        t.chans[3].dur.baseline.learn.w.n = 1.0;
        assert_eq!(t.recycle_chan(7, 5, 10 * S, 3 * S, 60 * S), None);
        assert_eq!(t.recycle_chan(7, 5, 63 * S, 3 * S, 60 * S), Some(3));
        // The gap channel is never handed over.
        assert_eq!(t.find_chan(GAP_KEY), Some(0));
    }

    #[test]
    fn rings_live_in_the_record_up_to_inline_ring_and_in_the_slab_beyond() {
        for k in [3, INLINE_RING, INLINE_RING + 2] {
            let mut t = Thread::new(1, 1, 0);
            let (a, b) = (
                t.chan_index(4, k, 64).unwrap(),
                t.chan_index(5, k, 64).unwrap(),
            );
            let slab = k > INLINE_RING;
            assert_eq!(t.rings.len(), if slab { 2 * 2 * k } else { 0 }, "k = {k}");
            // Fills both series of channel `a`: channel `b`'s stay untouched.
            let mut last = None;
            for x in 1..=k + 1 {
                let p = t.chan_mut(a, k).unwrap();
                assert_eq!((p.dur_ring.len(), p.ia_ring.len()), (k, k));
                last = p.dur.push(p.dur_ring, x as f32);
                p.ia.push(p.ia_ring, 10.0 * x as f32);
            }
            // The average of 2..=k+1.
            assert_eq!(last, Some((k as f32 + 3.0) / 2.0), "k = {k}");
            let p = t.chan_mut(b, k).unwrap();
            assert!(p.dur_ring.iter().chain(p.ia_ring.iter()).all(|&x| x == 0.0));
            assert_eq!(p.dur.current(k), None);
            let p = t.chan_mut(a, k).unwrap();
            assert_eq!(p.ia.current(k), Some(10.0 * (k as f32 + 3.0) / 2.0));
        }
    }

    #[test]
    fn cold_records_appear_on_first_write_then_follow_the_channels() {
        let mut t = Thread::new(1, 1, 0);
        for key in [3u16, 4, 5] {
            t.chan_index(key, 5, 64);
        }
        assert!(t.cold.is_empty(), "no cold record before one is written");
        let (n, cap) = (t.chans.len(), t.chans.capacity());
        let mut slot = ColdSlot::new(&mut t.cold, 1, n, cap);
        assert!(slot.peek().is_none());
        assert!(slot.get().is_some());
        assert_eq!(
            (t.cold.len(), t.cold.capacity()),
            (3, t.chans.capacity()),
            "one per channel, exactly the channels' capacity"
        );
        for key in [6u16, 7] {
            t.chan_index(key, 5, 64);
        }
        assert_eq!((t.cold.len(), t.cold.capacity()), (5, t.chans.capacity()));
    }

    #[test]
    fn call_bins_count_and_slide() {
        let mut c = CallBins::default();
        c.add(10);
        c.add(10);
        c.add(12);
        assert_eq!((c.sum(10, 12), c.sum(11, 11)), (3, 0));
        c.add(10 + 256); // bin 10 falls out of the ring, bin 12 is still in it
        assert_eq!(c.sum(0, 300), 2);
        c.add(5); // too old: ignored
        assert_eq!(c.sum(0, 300), 2);
    }

    #[test]
    fn call_bins_pending_calls_count_and_saturate_like_the_array() {
        let mut c = CallBins::default();
        (0..3).for_each(|_| c.add(0)); // bin 0 = the initial `latest`
        (0..70_000).for_each(|_| c.add(7));
        assert_eq!((c.sum(0, 0), c.sum(7, 7)), (3, u64::from(u16::MAX)));
        c.add(9); // folds bin 7's pending calls into the array
        c.add(7); // an older bin: counted directly, saturated
        assert_eq!((c.sum(7, 7), c.sum(8, 9), c.sum(0, 9)), (65_535, 1, 65_539));
    }

    #[test]
    fn binset_marks_and_slides() {
        let mut b = BinSet::default();
        b.mark(1000);
        b.mark(1010);
        assert!(b.any(1005, 1010) && !b.any(1001, 1009));
        b.mark(1000 + 300); // slides: 1000 and 1010 fall out
        assert!(b.any(1300, 1300) && !b.any(1000, 1010));
        b.mark(1200);
        assert!(b.any(1200, 1200));
        let mut c = BinSet::default();
        c.mark(500);
        c.mark(450);
        assert!(c.any(450, 450) && c.any(500, 500) && !c.any(451, 499));
    }
}
