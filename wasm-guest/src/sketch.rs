//! ChopStix-style sketches: bounded-memory weighted counters with logarithmic sampling.
//!
//! The engine must keep per-(thread, syscall) or per-site statistics whatever the thread
//! count; exact maps grow with the workload, a sketch does not. This follows ChopStix §4.1:
//!
//! - **Hashed counter array (HCA)**: an array of counters indexed by a hash of the event
//!   label, incremented by the event's *weight* (e.g. a duration in ns), with no collision
//!   handling. [`Sketch`] generalises it count-min style to `depth` rows with independent
//!   indices and answers the minimum over the rows; `depth = 1` is exactly the HCA.
//! - **Logarithmic sampling**: an event is *selected* (e.g. to record a detailed sample)
//!   when its estimated count crosses an integral power of the threshold `t`, so samples
//!   per key grow as `log_t(count)`; `t` is a power of two, so the test is integer `ilog2`.
//! - **Adaptive threshold**: `t` doubles when the samples taken in an epoch reach a high
//!   watermark and halves at an epoch boundary when they stayed below a low watermark.
//! - **Double-buffered epochs**: [`EpochSketch`] keeps two sketches; [`EpochSketch::rotate`]
//!   swaps them, so the previous epoch stays readable while the new one starts at zero.
//!
//! # Error bound
//!
//! With width `w`, depth `d` and `N` the total weight added since the last clear, every
//! estimate is at least the key's true weight (collisions only add), and
//! `estimate ≤ true + e·N/w` with probability at least `1 − e^{−d}` per key (Cormode &
//! Muthukrishnan's count-min bound; [`Sketch::error_bound`] computes `e·N/w`). The rows
//! use double hashing (one 64-bit mix per add, row `r` at `h1 + r·h2`), which keeps the
//! bound in practice; `tests/sketch_accuracy.rs` measures it against exact counts.
//!
//! All hashing is on `u64`, so native and wasm32 builds give identical estimates.

use thiserror::Error;

/// Why a sketch or sampler configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SketchError {
    /// The width must be a power of two (indices are masked, not divided).
    #[error("sketch width {0} must be a power of two between 1 and {MAX_WIDTH}")]
    Width(usize),
    /// The depth bounds the hashing cost per add.
    #[error("sketch depth {0} must be between 1 and {MAX_DEPTH}")]
    Depth(usize),
    /// The threshold must be a power of two ≥ 2 so sampling is integer arithmetic.
    #[error("sampling threshold {0} must be a power of two between 2 and 2^62")]
    Threshold(u64),
    /// The watermarks must be ordered and the high one positive.
    #[error("watermarks must satisfy 0 <= low ({low}) <= high ({high}) and high > 0")]
    Watermarks { low: u64, high: u64 },
}

/// Largest accepted width: 2^24 counters per row (128 MiB at depth 1) is already far
/// beyond what an engine needs, and keeps `row * width + index` inside a wasm32 `usize`.
pub const MAX_WIDTH: usize = 1 << 24;

/// Largest accepted depth; beyond 8 rows the error probability `e^{−d}` is already < 0.04 %.
pub const MAX_DEPTH: usize = 8;

/// Largest threshold the sampler reaches; doubling stops here.
const MAX_THRESHOLD_LOG2: u32 = 62;

/// A count-min sketch of weighted counts: `depth` rows of `width` `u64` counters.
///
/// Memory is fixed at construction ([`Sketch::bytes`]); adds never allocate.
#[derive(Debug, Clone)]
pub struct Sketch {
    width: usize,
    mask: u64,
    depth: usize,
    /// Row-major: row `r` is `counters[r * width .. (r + 1) * width]`.
    counters: Vec<u64>,
    /// `N`: total weight added since the last clear, for the error bound.
    total: u64,
}

impl Sketch {
    /// An empty sketch; `width` must be a power of two in `1..=MAX_WIDTH`, `depth` in
    /// `1..=MAX_DEPTH`. See the module docs for the error bound these imply.
    pub fn new(width: usize, depth: usize) -> Result<Self, SketchError> {
        if !width.is_power_of_two() || width > MAX_WIDTH {
            return Err(SketchError::Width(width));
        }
        if depth == 0 || depth > MAX_DEPTH {
            return Err(SketchError::Depth(depth));
        }
        Ok(Self {
            width,
            mask: (width as u64) - 1,
            depth,
            counters: vec![0; width * depth],
            total: 0,
        })
    }

    /// Adds `weight` to `key` and returns the key's new estimate.
    ///
    /// The estimate rises by exactly `weight` (every row does), which is what makes the
    /// sampler's "crossed a power of t" test exact. Counters saturate instead of wrapping.
    #[inline]
    pub fn add(&mut self, key: u64, weight: u64) -> u64 {
        self.total = self.total.saturating_add(weight);
        let (h1, h2) = row_hashes(key);
        let mut estimate = u64::MAX;
        for (r, row) in self.counters.chunks_exact_mut(self.width).enumerate() {
            let index = row_index(h1, h2, r, self.mask);
            if let Some(counter) = row.get_mut(index) {
                *counter = counter.saturating_add(weight);
                estimate = estimate.min(*counter);
            }
        }
        estimate
    }

    /// The key's estimated total weight: never below the truth, above it by at most
    /// [`Sketch::error_bound`] with probability `1 − e^{−depth}`.
    #[inline]
    pub fn estimate(&self, key: u64) -> u64 {
        let (h1, h2) = row_hashes(key);
        let mut estimate = u64::MAX;
        for (r, row) in self.counters.chunks_exact(self.width).enumerate() {
            let index = row_index(h1, h2, r, self.mask);
            if let Some(counter) = row.get(index) {
                estimate = estimate.min(*counter);
            }
        }
        estimate
    }

    /// Hints the counters an add of `key` will touch (see [`crate::prefetch`]): a sketch
    /// larger than the caches costs a miss per row otherwise.
    #[inline(always)]
    pub fn prefetch(&self, key: u64) {
        let (h1, h2) = row_hashes(key);
        for (r, row) in self.counters.chunks_exact(self.width).enumerate() {
            if let Some(counter) = row.get(row_index(h1, h2, r, self.mask)) {
                crate::prefetch::line(counter);
            }
        }
    }

    /// Zeroes every counter (keeps the memory).
    pub fn clear(&mut self) {
        self.counters.fill(0);
        self.total = 0;
    }

    /// `N`: the total weight added since the last clear.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// `⌈e·N/w⌉`: the overestimate that any one key exceeds with probability ≤ `e^{−depth}`.
    pub fn error_bound(&self) -> u64 {
        let bound = std::f64::consts::E * self.total as f64 / self.width as f64;
        bound.ceil() as u64
    }

    /// Counters per row.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Number of rows.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Memory held, in bytes (the struct plus its counters), for `state_bytes()` accounting.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.counters.capacity() * std::mem::size_of::<u64>()
    }
}

/// Configuration of the logarithmic sampler (ChopStix §4.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Starting threshold `t`, a power of two ≥ 2: a key is selected when its estimate
    /// crosses `t^0 = 1`, `t`, `t²`, ….
    pub initial_t: u64,
    /// Samples per epoch at which `t` starts doubling; sampling stops for the rest of the
    /// epoch at twice this (the hard budget), and refused samples are counted.
    pub high_watermark: u64,
    /// At an epoch boundary, `t` halves (down to 2) if the epoch took fewer samples.
    pub low_watermark: u64,
}

impl Default for SamplerConfig {
    /// `t = 2`, doubling from 1,024 samples per epoch, halving below 128.
    fn default() -> Self {
        Self {
            initial_t: 2,
            high_watermark: 1024,
            low_watermark: 128,
        }
    }
}

/// The adaptive logarithmic sampler: decides which adds become samples.
///
/// Within an epoch, `t` doubles when the samples reach the high watermark and again each
/// time they grow by another quarter of it (at most five doublings per epoch, so a burst
/// cannot push `t` so high that quiet epochs take long to bring it back); at twice the
/// high watermark the epoch's budget is spent and further selections are refused and
/// counted in [`EpochSketch::suppressed_this_epoch`].
#[derive(Debug, Clone)]
struct LogSampler {
    config: SamplerConfig,
    /// `log2(t)`; the level of a count `c` is `ilog2(c) / t_log2`.
    t_log2: u32,
    samples: u64,
    suppressed: u64,
    suppressed_total: u64,
    next_doubling_at: u64,
}

impl LogSampler {
    fn new(config: SamplerConfig) -> Result<Self, SketchError> {
        let t = config.initial_t;
        if !t.is_power_of_two() || t < 2 || t.ilog2() > MAX_THRESHOLD_LOG2 {
            return Err(SketchError::Threshold(t));
        }
        if config.high_watermark == 0 || config.low_watermark > config.high_watermark {
            return Err(SketchError::Watermarks {
                low: config.low_watermark,
                high: config.high_watermark,
            });
        }
        Ok(Self {
            config,
            t_log2: t.ilog2(),
            samples: 0,
            suppressed: 0,
            suppressed_total: 0,
            next_doubling_at: config.high_watermark,
        })
    }

    /// Whether an estimate moving from `before` to `after` crosses a power of `t`.
    #[inline]
    fn crosses(&self, before: u64, after: u64) -> bool {
        if after == 0 {
            return false;
        }
        if before == 0 {
            return true;
        }
        let (a, b) = (after.ilog2(), before.ilog2());
        // Most adds stay within one power of two: skip the divisions.
        a != b && a / self.t_log2 > b / self.t_log2
    }

    /// Takes a selected event as a sample if the epoch's budget allows.
    fn take(&mut self) -> bool {
        if self.samples >= self.config.high_watermark.saturating_mul(2) {
            self.suppressed += 1;
            self.suppressed_total = self.suppressed_total.saturating_add(1);
            return false;
        }
        self.samples += 1;
        if self.samples >= self.next_doubling_at {
            self.t_log2 = (self.t_log2 + 1).min(MAX_THRESHOLD_LOG2);
            self.next_doubling_at += (self.config.high_watermark / 4).max(1);
        }
        true
    }

    /// Epoch boundary: halve `t` after a quiet epoch, then reset the epoch's counts.
    fn end_epoch(&mut self) {
        if self.samples < self.config.low_watermark {
            self.t_log2 = (self.t_log2 - 1).max(1);
        }
        self.samples = 0;
        self.suppressed = 0;
        self.next_doubling_at = self.config.high_watermark;
    }
}

/// A double-buffered [`Sketch`] with a logarithmic sampler: ChopStix's per-vital-sign
/// collector. The current epoch takes adds; the previous one stays readable until the
/// next [`EpochSketch::rotate`].
#[derive(Debug, Clone)]
pub struct EpochSketch {
    current: Sketch,
    previous: Sketch,
    sampler: LogSampler,
}

impl EpochSketch {
    /// Two `width × depth` sketches and a sampler; see [`Sketch::new`] and [`SamplerConfig`].
    pub fn new(width: usize, depth: usize, config: SamplerConfig) -> Result<Self, SketchError> {
        let current = Sketch::new(width, depth)?;
        let previous = current.clone();
        Ok(Self {
            current,
            previous,
            sampler: LogSampler::new(config)?,
        })
    }

    /// Adds `weight` to `key` in the current epoch; `Some(estimate)` when this event is
    /// selected as a sample (its estimate crossed a power of `t` and the budget allowed).
    #[inline]
    pub fn add(&mut self, key: u64, weight: u64) -> Option<u64> {
        self.add_estimate(key, weight).1
    }

    /// [`EpochSketch::add`], also returning the key's current-epoch estimate after the
    /// add: a caller that needs the count reads no counter a second time.
    #[inline]
    pub fn add_estimate(&mut self, key: u64, weight: u64) -> (u64, Option<u64>) {
        let after = self.current.add(key, weight);
        let before = after.saturating_sub(weight);
        let sample = (self.sampler.crosses(before, after) && self.sampler.take()).then_some(after);
        (after, sample)
    }

    /// Hints the counters [`EpochSketch::add`] of `key` will touch ([`Sketch::prefetch`]).
    #[inline(always)]
    pub fn prefetch_add(&self, key: u64) {
        self.current.prefetch(key);
    }

    /// The key's estimate in the epoch being filled.
    pub fn estimate_current(&self, key: u64) -> u64 {
        self.current.estimate(key)
    }

    /// The key's estimate in the last completed epoch (zero before the first rotate).
    pub fn estimate_previous(&self, key: u64) -> u64 {
        self.previous.estimate(key)
    }

    /// The sketch being filled, e.g. for [`Sketch::total`] or [`Sketch::error_bound`].
    pub fn current(&self) -> &Sketch {
        &self.current
    }

    /// The last completed epoch's sketch.
    pub fn previous(&self) -> &Sketch {
        &self.previous
    }

    /// Epoch boundary: adapt `t`, make the current epoch the previous one, start a zeroed one.
    pub fn rotate(&mut self) {
        self.sampler.end_epoch();
        std::mem::swap(&mut self.current, &mut self.previous);
        self.current.clear();
    }

    /// The sampling threshold `t` now in force.
    pub fn threshold(&self) -> u64 {
        1u64 << self.sampler.t_log2
    }

    /// Samples taken in the current epoch.
    pub fn samples_this_epoch(&self) -> u64 {
        self.sampler.samples
    }

    /// Selections refused in the current epoch because its budget (2 × high watermark) was spent.
    pub fn suppressed_this_epoch(&self) -> u64 {
        self.sampler.suppressed
    }

    /// Selections refused over the sketch's lifetime, for the engine's counters.
    pub fn suppressed_total(&self) -> u64 {
        self.sampler.suppressed_total
    }

    /// Memory held by both epochs, in bytes.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() - 2 * std::mem::size_of::<Sketch>()
            + self.current.bytes()
            + self.previous.bytes()
    }
}

/// A cheap, well-mixed key for a pair such as `(tid, syscall)` or `(pid, site)`.
///
/// Two splitmix64 finalizer rounds (a few ns); distinct pairs collide with probability
/// about 2^-64, so pairs can share one sketch without a composite-key map.
#[inline]
pub fn key2(a: u64, b: u64) -> u64 {
    mix64(a.wrapping_add(mix64(b)))
}

/// The splitmix64 finalizer, preceded by its golden-ratio increment so key 0 mixes too.
#[inline]
fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Two hashes of a key for double hashing, from one mix: the low half indexes, the high
/// half (rotated down) steps between rows. Widths are at most 2^24, so the two use
/// disjoint bits of a well-mixed word; `h2` is odd so a key's rows never coincide.
#[inline]
fn row_hashes(key: u64) -> (u64, u64) {
    let h = mix64(key);
    (h, h.rotate_right(32) | 1)
}

/// Column of row `r`: `(h1 + r·h2) mod width` (Kirsch–Mitzenmacher double hashing).
#[inline]
fn row_index(h1: u64, h2: u64, r: usize, mask: u64) -> usize {
    (h1.wrapping_add((r as u64).wrapping_mul(h2)) & mask) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_shapes_and_configs() {
        assert_eq!(Sketch::new(0, 1).unwrap_err(), SketchError::Width(0));
        assert_eq!(Sketch::new(100, 1).unwrap_err(), SketchError::Width(100));
        assert_eq!(Sketch::new(64, 0).unwrap_err(), SketchError::Depth(0));
        assert_eq!(
            Sketch::new(64, MAX_DEPTH + 1).unwrap_err(),
            SketchError::Depth(MAX_DEPTH + 1)
        );
        let bad_t = SamplerConfig {
            initial_t: 3,
            ..SamplerConfig::default()
        };
        assert_eq!(
            EpochSketch::new(64, 2, bad_t).unwrap_err(),
            SketchError::Threshold(3)
        );
        let bad_marks = SamplerConfig {
            low_watermark: 10,
            high_watermark: 5,
            ..SamplerConfig::default()
        };
        assert!(matches!(
            EpochSketch::new(64, 2, bad_marks),
            Err(SketchError::Watermarks { .. })
        ));
    }

    #[test]
    fn a_lone_key_is_counted_exactly() {
        let mut s = Sketch::new(1024, 4).unwrap();
        assert_eq!(s.add(7, 5), 5);
        assert_eq!(s.add(7, 10), 15);
        assert_eq!(s.estimate(7), 15);
        assert_eq!(s.total(), 15);
        s.clear();
        assert_eq!(s.estimate(7), 0);
        assert_eq!(s.total(), 0);
    }

    #[test]
    fn counters_saturate_instead_of_wrapping() {
        let mut s = Sketch::new(8, 1).unwrap();
        s.add(1, u64::MAX - 1);
        assert_eq!(s.add(1, 10), u64::MAX);
        assert_eq!(s.total(), u64::MAX);
    }

    #[test]
    fn crossing_is_by_powers_of_t() {
        let sampler = LogSampler::new(SamplerConfig {
            initial_t: 4,
            ..SamplerConfig::default()
        })
        .unwrap();
        assert!(sampler.crosses(0, 1));
        assert!(!sampler.crosses(1, 3));
        assert!(sampler.crosses(3, 4));
        assert!(!sampler.crosses(4, 15));
        assert!(sampler.crosses(15, 16));
        // A heavy event can jump several powers at once; it is still one sample.
        assert!(sampler.crosses(16, 10_000));
    }

    #[test]
    fn key2_separates_swapped_and_nearby_pairs() {
        assert_ne!(key2(1, 2), key2(2, 1));
        assert_ne!(key2(0, 0), key2(0, 1));
        assert_ne!(key2(1000, 3), key2(1001, 3));
    }

    #[test]
    fn bytes_counts_both_epochs() {
        let e = EpochSketch::new(1024, 4, SamplerConfig::default()).unwrap();
        assert!(e.bytes() >= 2 * 1024 * 4 * 8);
        assert!(e.bytes() < 2 * 1024 * 4 * 8 + 1024);
    }
}
