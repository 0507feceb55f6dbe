//! Outlier detection on k-moving averages against a learned baseline, with a
//! confirmation step that controls multiple testing.
//!
//! # Orientation
//!
//! Every series is oriented so that *larger is worse*: execution times (and the off-CPU
//! gap) are fed as nanoseconds, and the frequency channel is fed as the *negated*
//! inter-arrival time of the same syscall (a higher rate = a less negative value).
//! The relative increase of a moving average `ma` over the baseline mean `m` is then
//! `ma / m − 1` for both (for negated inter-arrivals, `m / ma` flips sign twice).
//!
//! # The baseline
//!
//! For every (thread, syscall) — and for every syscall pooled over the target's threads,
//! the fallback for threads without enough history (new threads) — the baseline is the
//! distribution of the *k-moving averages themselves*, kept as a streaming mean and
//! standard deviation ([`Welford`]) plus the **largest moving average seen** (`hi`).
//! Choices and why (measured on the real MariaDB traces, see EVALUATION.md):
//!
//! * **Statistics of the moving averages, not of single calls**, so the correlation of
//!   overlapping windows is accounted for.
//! * **An outlier must exceed both mean + Θσ and the baseline's own maximum** (and be at
//!   least `min_time_increase` above the mean). Syscall times are heavy-tailed: a healthy
//!   thread exceeds its mean + 2σ hundreds of times a minute, so that test alone flags
//!   every thread. Exceeding the largest moving average of the clean history is what a
//!   healthy thread rarely does (≈ once per baseline length, by exchangeability), while
//!   a CPU cap makes connection threads exceed it 5×/s through throttled gaps.
//! * **Learned from earlier epochs, double-buffered (ChopStix §4.1.5).** Each baseline
//!   keeps `learn` (the current epoch), `prev` (the last finished epoch, awaiting
//!   approval) and `base` (approved, used for testing). At each epoch boundary (the
//!   cadence), if the epoch was clean, `prev` is folded into `base` and `learn` becomes
//!   `prev`; if any outlier was confirmed, both are discarded. A fault therefore never
//!   leaks into the baseline, even when it began in the epoch before it was detected.
//! * **Robust and bounded.** Values entering the mean/σ are winsorized at `base` ± 4σ;
//!   `base` keeps at most `baseline_max_samples` samples' worth of history (older epochs
//!   down-weighted) and `hi` decays 1 % towards the mean per approved epoch, so memory is
//!   constant and the baseline follows slow drifts of a healthy workload.
//!
//! # Multiple testing: confirmation
//!
//! A maximal sequence of consecutive outlier moving averages is an *exceedance run*
//! (one extreme call makes a run of up to k averages). An outlier is **confirmed** when
//! `confirm_runs` runs of the same series start within `confirm_window_seconds`, or when
//! one run lasts 2k moving averages (a sustained shift, not one extreme call). The onset
//! is the start of the first run of the confirming set: when the shift began, not when
//! the evidence became sufficient. With a clean-history exceedance rate of about one run
//! per baseline length per series, the chance of three within a second is negligible,
//! while faults produce runs several times per second or sustained runs.

use crate::stats::Welford;

/// Share of the baseline maximum's excess over the mean kept per approved epoch: the
/// maximum forgets very slowly (≈ 10 % per 100 s at a 10 s cadence), so a rare healthy
/// extreme is remembered long enough not to alarm again soon.
pub const HI_DECAY: f32 = 0.99;

/// Runs remembered per series for confirmation (≥ the largest `confirm_runs`).
pub const MAX_RUNS: usize = 4;

/// One epoch's statistics: mean/σ and the largest value.
#[derive(Clone, Copy, Debug)]
pub struct Epoch {
    pub w: Welford,
    /// Largest value (−∞ when empty; a plain `f32` keeps per-series state small).
    pub hi: f32,
}

impl Default for Epoch {
    fn default() -> Self {
        Self {
            w: Welford::default(),
            hi: f32::NEG_INFINITY,
        }
    }
}

/// The three epochs of one baseline (see the module docs), plus what the approved
/// epoch implies for the next moving averages (`Gate`), in two parts kept apart by
/// the per-thread channels: what every moving average touches ([`BaselineHot`]) and
/// what only a possible outlier, an epoch boundary or an evaluation reads
/// ([`BaselineCold`]). The pooled baselines keep both together.
#[derive(Clone, Copy, Debug, Default)]
pub struct Baseline {
    pub hot: BaselineHot,
    pub cold: BaselineCold,
}

/// The part of a [`Baseline`] every moving average reads or writes: the current epoch
/// and the gate (32 bytes: with the ring state, a series' per-call bytes).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct BaselineHot {
    pub learn: Epoch,
    gate: Gate,
}

/// The part of a [`Baseline`] read only on a possible outlier, at epoch boundaries and
/// by evaluations: the approved and pending epochs.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct BaselineCold {
    /// Approved epochs folded into `base`.
    pub epochs: u16,
    pub base: Epoch,
    pub prev: Epoch,
}

/// The approved epoch's consequences, derived once per epoch ([`BaselineHot::refresh`])
/// instead of once per moving average: the winsorizing bounds and a lower bound of the
/// outlier test, so the per-average work is comparisons plus one Welford step (the
/// σ behind them costs a division and a square root).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Gate {
    /// `base` mean ∓ 4σ once trained (else ∓∞: nothing is winsorized).
    lo: f32,
    hi: f32,
    /// Moving averages at or below this are not outliers: max(mean + Θσ, the reference
    /// maximum), both of which an outlier must exceed ([`is_outlier`]). NaN when the
    /// baseline is not usable for testing ([`BaselineCold::usable`] is `None`): no value
    /// exceeds it, as none exceeds +∞, and a usable baseline's is never NaN (its maximum
    /// is not). The flag costs no byte of its own: with it the gate took 16 bytes and a
    /// channel record three cache lines instead of two.
    reject: f32,
}

impl Default for Gate {
    /// The gate of an empty baseline (never trained nor usable: `min_n`, `min_epochs` ≥ 1).
    fn default() -> Self {
        Self {
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
            reject: f32::NAN,
        }
    }
}

/// What a usable baseline says.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reference {
    pub mean: f32,
    pub sd: f32,
    pub hi: f32,
}

impl Baseline {
    /// Adds one moving average to the current epoch.
    pub fn learn(&mut self, x: f32, min_n: f32) {
        let sd = self.cold.trained_sd(min_n);
        self.learn_with(x, sd);
    }

    /// [`Baseline::learn`] with `sd = self.cold.trained_sd(min_n)` already computed.
    #[inline]
    pub fn learn_with(&mut self, x: f32, sd: Option<f32>) {
        if !x.is_finite() {
            return;
        }
        let learn = &mut self.hot.learn;
        // Comparisons rather than `f32::max`/`clamp`: on wasm32 `max` is a call to libm's
        // `fmaxf` (the `f32.max` instruction propagates NaN, Rust's `max` does not), a
        // measurable share of the guest's time. `x` is finite here and the bounds are
        // ordered (σ ≥ 0), so the results are the same.
        if learn.hi < x || learn.hi.is_nan() {
            learn.hi = x;
        }
        let w = match sd {
            Some(sd) => {
                let mean = self.cold.base.w.mean;
                let (lo, hi) = (mean - 4.0 * sd, mean + 4.0 * sd);
                if x < lo {
                    lo
                } else if x > hi {
                    hi
                } else {
                    x
                }
            }
            None => x,
        };
        learn.w.push(w);
    }

    /// See [`BaselineHot::refresh`].
    pub fn refresh(&mut self, min_n: f32, min_epochs: u16, sigma: f32) {
        self.hot.refresh(&self.cold, min_n, min_epochs, sigma);
    }

    /// See [`BaselineCold::rotate`].
    pub fn rotate(&mut self, clean: bool, max_n: f32) {
        self.cold.rotate(&mut self.hot, clean, max_n);
    }

    /// See [`BaselineHot::gate_usable`].
    #[inline]
    pub fn gate_usable(&self) -> bool {
        self.hot.gate_usable()
    }

    /// See [`BaselineHot::may_exceed`].
    #[inline]
    pub fn may_exceed(&self, x: f32) -> bool {
        self.hot.may_exceed(x)
    }

    /// See [`BaselineHot::learn_gated`].
    #[inline(always)]
    pub fn learn_gated(&mut self, x: f32) {
        self.hot.learn_gated(x);
    }

    /// See [`BaselineCold::usable`].
    pub fn usable(&self, min_n: f32, min_epochs: u16) -> Option<Reference> {
        self.cold.usable(min_n, min_epochs)
    }
}

impl BaselineHot {
    /// Re-derives the gate from the approved epoch (`cold`); needed after anything that
    /// changes `base`/`epochs` ([`BaselineCold::rotate`]) or the parameters the gate
    /// depends on.
    pub fn refresh(&mut self, cold: &BaselineCold, min_n: f32, min_epochs: u16, sigma: f32) {
        let sd = cold.trained_sd(min_n);
        let (lo, hi) = match sd {
            // The same expressions as `Baseline::learn_with`, so the bounds are bit-identical.
            Some(sd) => (cold.base.w.mean - 4.0 * sd, cold.base.w.mean + 4.0 * sd),
            None => (f32::NEG_INFINITY, f32::INFINITY),
        };
        let reject = match cold.usable_with(sd, min_epochs) {
            Some(r) => {
                let over = r.mean + sigma * r.sd;
                // Comparison, not `f32::max` (a libm call on wasm32). A NaN side only
                // lowers the bound, so the gate never rejects an average the full test
                // would accept.
                if over > r.hi {
                    over
                } else {
                    r.hi
                }
            }
            None => f32::NAN,
        };
        self.gate = Gate { lo, hi, reject };
    }

    /// Whether the baseline can test, per the last [`BaselineHot::refresh`].
    #[inline]
    pub fn gate_usable(&self) -> bool {
        !self.gate.reject.is_nan()
    }

    /// Whether `x` may be an outlier: `false` means [`is_outlier`] is surely false for
    /// this baseline's reference (as of the last [`BaselineHot::refresh`]), so the full
    /// test is skipped for almost every moving average.
    #[inline]
    pub fn may_exceed(&self, x: f32) -> bool {
        x > self.gate.reject
    }

    /// [`Baseline::learn`] with the bounds of the last [`BaselineHot::refresh`]: the
    /// same result without recomputing σ, and without reading the cold part.
    #[inline(always)]
    pub fn learn_gated(&mut self, x: f32) {
        if !x.is_finite() {
            return;
        }
        // `learn.hi` is only ever −∞ or a finite sample (never NaN, unlike in
        // `learn_with`, which guards against it), so a plain comparison suffices.
        if self.learn.hi < x {
            self.learn.hi = x;
        }
        let g = &self.gate;
        let w = if x < g.lo {
            g.lo
        } else if x > g.hi {
            g.hi
        } else {
            x
        };
        // `w` is finite: `x` is, and a bound replaces it only when it is a finite bound
        // beyond `x` (NaN and infinite bounds never compare so).
        self.learn.w.push_finite(w);
    }
}

impl BaselineCold {
    /// The approved epoch's σ once it has `min_n` samples: computed once and shared by
    /// [`BaselineCold::usable_with`] and [`Baseline::learn_with`] (the approved epoch
    /// does not change in between), saving a square root and a division per call of each.
    #[inline]
    pub fn trained_sd(&self, min_n: f32) -> Option<f32> {
        (self.base.w.n >= min_n).then(|| self.base.w.std_dev())
    }

    /// Epoch boundary: approve the previous epoch if this one (`hot.learn`) was clean,
    /// else drop both. Call [`BaselineHot::refresh`] afterwards.
    pub fn rotate(&mut self, hot: &mut BaselineHot, clean: bool, max_n: f32) {
        if clean {
            let prev = self.prev;
            if prev.w.n > 0.0 {
                let mean = self.base.w.mean;
                let decayed = if self.base.hi.is_finite() {
                    mean + (self.base.hi - mean) * HI_DECAY
                } else {
                    f32::NEG_INFINITY
                };
                self.base.w.merge(&prev.w);
                self.base.w.cap(max_n);
                self.base.hi = decayed.max(prev.hi);
                self.epochs = self.epochs.saturating_add(1);
            }
            self.prev = hot.learn;
        } else {
            self.prev = Epoch::default();
        }
        hot.learn = Epoch::default();
    }

    /// The approved baseline, when it has enough samples to test against.
    pub fn usable(&self, min_n: f32, min_epochs: u16) -> Option<Reference> {
        self.usable_with(self.trained_sd(min_n), min_epochs)
    }

    /// [`BaselineCold::usable`] with `sd = self.trained_sd(min_n)` already computed.
    #[inline]
    pub fn usable_with(&self, sd: Option<f32>, min_epochs: u16) -> Option<Reference> {
        let sd = sd?;
        if self.epochs < min_epochs {
            return None;
        }
        Some(Reference {
            mean: self.base.w.mean,
            sd,
            hi: if self.base.hi.is_finite() {
                self.base.hi
            } else {
                self.base.w.mean
            },
        })
    }
}

/// Thresholds of one test, derived once from `Params`.
#[derive(Clone, Copy, Debug)]
pub struct Thresholds {
    /// Θ.
    pub sigma: f32,
    /// Smallest relative increase that can count (0.5 = +50 %).
    pub min_increase: f32,
    /// Smallest absolute increase over the mean that can count (execution times: a call
    /// some µs slower makes no request slow; 0 = none).
    pub min_abs_increase: f32,
    /// Smallest value that can count at all (gaps: microseconds between a sleeping
    /// thread's waits grown to a fraction of a millisecond are no slowdown;
    /// `f32::NEG_INFINITY` = none, as frequencies are negative intervals).
    pub min_level: f32,
    /// An increase over the mean smaller than this must also be `min_small_increase`
    /// (execution times: a drift of tens of percent in a sub-millisecond call is no fault;
    /// 0 = no such tier).
    pub small_abs_increase: f32,
    /// Smallest relative increase that counts under `small_abs_increase` (1.0 = twice the
    /// mean).
    pub min_small_increase: f32,
    /// Runs needed within `window_ns`.
    pub runs: usize,
    pub window_ns: u64,
    /// Moving averages a single run must last to confirm alone (2k).
    pub sustained: u16,
}

/// Relative increase of `x` over `mean` in the oriented domain (see module docs).
pub fn increase(x: f32, mean: f32) -> f32 {
    if mean > 0.0 {
        x / mean - 1.0
    } else if mean < 0.0 && x < 0.0 {
        mean / x - 1.0
    } else {
        0.0
    }
}

/// Whether moving average `x` is an outlier against `r`.
pub fn is_outlier(x: f32, r: &Reference, th: &Thresholds) -> bool {
    if !(x > r.mean + th.sigma * r.sd && x > r.hi && x >= th.min_level) {
        return false;
    }
    let (rel, abs) = (increase(x, r.mean), x - r.mean);
    rel >= th.min_increase
        && abs >= th.min_abs_increase
        && (abs >= th.small_abs_increase || rel >= th.min_small_increase)
}

/// Confirmation state of one series.
///
/// Packed to 4-byte alignment: there are two per (thread, syscall), so the padding an
/// 8-aligned layout would add is ~8 % of the engine's state at 10,000 threads. The
/// current run's start is the most recent entry of `starts` (not stored twice).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, packed(4))]
pub struct Confirm {
    starts: [u64; MAX_RUNS],
    run_len: u16,
    in_run: bool,
    pos: u8,
    count: u8,
}

impl Confirm {
    /// Feeds one test result; returns the onset when an outlier is confirmed.
    pub fn step(&mut self, outlier: bool, ts_ns: u64, th: &Thresholds) -> Option<u64> {
        if !outlier {
            self.in_run = false;
            return None;
        }
        if self.in_run {
            self.run_len = self.run_len.saturating_add(1);
            if self.run_len == th.sustained {
                // The current run started at the most recent recorded start.
                let starts = self.starts;
                let last = (self.pos as usize + MAX_RUNS - 1) % MAX_RUNS;
                let onset = starts.get(last).copied().unwrap_or(0);
                self.count = 0;
                return Some(onset);
            }
            return None;
        }
        self.in_run = true;
        self.run_len = 1;
        let i = self.pos as usize % MAX_RUNS;
        // Copy out and back: fields of a packed struct cannot be borrowed.
        let mut starts = self.starts;
        if let Some(s) = starts.get_mut(i) {
            *s = ts_ns;
        }
        self.starts = starts;
        self.pos = ((i + 1) % MAX_RUNS) as u8;
        self.count = (self.count + 1).min(MAX_RUNS as u8);
        let need = th.runs.clamp(1, MAX_RUNS);
        if (self.count as usize) < need {
            return None;
        }
        // The oldest of the last `need` run starts.
        let oldest_i = (self.pos as usize + MAX_RUNS - need) % MAX_RUNS;
        let oldest = starts.get(oldest_i).copied().unwrap_or(ts_ns);
        if ts_ns.saturating_sub(oldest) <= th.window_ns {
            self.count = 0;
            Some(oldest)
        } else {
            None
        }
    }

    /// A new execution unit: runs restart (the baseline stays).
    pub fn reset(&mut self) {
        *self = Confirm::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TH: Thresholds = Thresholds {
        sigma: 2.0,
        min_increase: 0.5,
        min_abs_increase: 0.0,
        min_level: f32::NEG_INFINITY,
        small_abs_increase: 0.0,
        min_small_increase: 0.0,
        runs: 3,
        window_ns: 1000,
        sustained: 10,
    };

    #[test]
    fn sparse_runs_do_not_confirm_dense_ones_do() {
        let mut c = Confirm::default();
        for i in 0..100u64 {
            // one single-average run every 2000 ns: never 3 within 1000
            assert_eq!(c.step(i % 2 == 0, i * 1000, &TH), None);
        }
        let mut c = Confirm::default();
        assert_eq!(c.step(true, 100, &TH), None);
        assert_eq!(c.step(false, 200, &TH), None);
        assert_eq!(c.step(true, 300, &TH), None);
        assert_eq!(c.step(false, 400, &TH), None);
        assert_eq!(c.step(true, 500, &TH), Some(100));
    }

    #[test]
    fn sustained_run_confirms_at_its_start() {
        let mut c = Confirm::default();
        let mut got = None;
        for i in 0..20u64 {
            if let Some(o) = c.step(i >= 5, i, &TH) {
                got = Some((i, o));
                break;
            }
        }
        assert_eq!(got, Some((14, 5)));
    }

    #[test]
    fn outlier_needs_sigma_max_and_min_increase() {
        let r = Reference {
            mean: 100.0,
            sd: 10.0,
            hi: 200.0,
        };
        assert!(!is_outlier(150.0, &r, &TH), "below the baseline max");
        assert!(is_outlier(210.0, &r, &TH));
        let tight = Reference {
            mean: 100.0,
            sd: 1.0,
            hi: 101.0,
        };
        assert!(!is_outlier(120.0, &tight, &TH), "+20 % is below the floor");
        // The absolute floors: 210 is an outlier by Θ, the max and +110 %, yet 110 over the
        // mean is under an increase floor of 150 and 210 under a level floor of 250.
        let abs = Thresholds {
            min_abs_increase: 150.0,
            ..TH
        };
        assert!(!is_outlier(210.0, &r, &abs) && is_outlier(260.0, &r, &abs));
        let level = Thresholds {
            min_level: 250.0,
            ..TH
        };
        assert!(!is_outlier(210.0, &r, &level) && is_outlier(260.0, &r, &level));
        // The small-increase tier: +110 % (110 over the mean) is below a 150 tier and so
        // needs +120 % (230 has +130 %); 260 (+160) clears the tier itself.
        let small = Thresholds {
            small_abs_increase: 150.0,
            min_small_increase: 1.2,
            ..TH
        };
        assert!(!is_outlier(210.0, &r, &small) && is_outlier(230.0, &r, &small));
        assert!(is_outlier(260.0, &r, &small));
        // negated inter-arrivals: mean −100 ns; −40 ns means 2.5× the rate
        let f = Reference {
            mean: -100.0,
            sd: 10.0,
            hi: -60.0,
        };
        assert!(is_outlier(-40.0, &f, &TH));
        assert!((increase(-40.0, -100.0) - 1.5).abs() < 1e-6);
    }

    #[test]
    fn gated_learning_and_test_agree_with_the_full_computation() {
        let (min_n, min_epochs) = (10.0, 2);
        let (mut full, mut gated) = (Baseline::default(), Baseline::default());
        let mut outliers = 0;
        for epoch in 0..6u32 {
            for i in 0..40u32 {
                // Mostly 50..100, with extremes beyond ±4σ once trained (winsorized).
                let x = match (i * 37 + epoch * 11) % 23 {
                    0 => 400.0,
                    1 => -300.0,
                    v => 50.0 + v as f32 * 2.5,
                };
                full.learn(x, min_n);
                gated.learn_gated(x);
            }
            assert_eq!(full.hot.learn.w, gated.hot.learn.w, "epoch {epoch}");
            full.rotate(epoch != 3, 1e6);
            gated.rotate(epoch != 3, 1e6);
            gated.refresh(min_n, min_epochs, TH.sigma);
            let r = full.usable(min_n, min_epochs);
            assert_eq!(gated.gate_usable(), r.is_some(), "epoch {epoch}");
            if let Some(r) = r {
                for x in (0..2000).map(|i| i as f32 * 0.5) {
                    if is_outlier(x, &r, &TH) {
                        outliers += 1;
                        assert!(gated.may_exceed(x), "gate rejected outlier {x}");
                    }
                }
            }
        }
        assert!(
            outliers > 0 && gated.gate_usable(),
            "the test was exercised"
        );
    }

    #[test]
    fn baseline_rotation_discards_dirty_epochs() {
        let mut b = Baseline::default();
        (0..50).for_each(|_| b.learn(1.0, 10.0));
        b.rotate(true, 1e6);
        assert!(
            b.usable(10.0, 1).is_none(),
            "one epoch is still pending approval"
        );
        (0..50).for_each(|_| b.learn(1.0, 10.0));
        b.rotate(true, 1e6);
        assert_eq!(b.usable(10.0, 1).map(|x| x.mean), Some(1.0));
        (0..50).for_each(|_| b.learn(9.0, 10.0));
        b.rotate(false, 1e6); // fault detected in this epoch: it and the pending one go
        b.rotate(true, 1e6);
        assert_eq!(b.cold.base.w.n, 50.0);
        assert_eq!(b.usable(10.0, 1).map(|x| x.hi), Some(1.0));
    }
}
