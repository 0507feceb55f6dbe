//! On-CPU time per thread, from the scheduler's own accounting ([`EventKind::OnCpu`]
//! records, such as perf's `sched:sched_stat_runtime`), and the *CPU burner* test.
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
//! Memory: [`CpuBins`] is 520 bytes, allocated only for threads that have such records.
//!
//! [`EventKind::OnCpu`]: crate::event::EventKind::OnCpu

use serde::{Deserialize, Serialize};

use crate::thread::{ring_seek, ring_sum, RING_BINS};

/// On-CPU share per bin over the last [`RING_BINS`] bins (the engine's activity bins),
/// in constant memory.
///
/// A bin holds the share of its wall-clock time the thread ran, in units of
/// 1/[`CpuBins::FULL`]: a thread runs on one CPU at a time, so a bin is full at most
/// (more only when records overlap, and then it saturates).
#[derive(Clone, Copy, Debug)]
pub struct CpuBins {
    latest: u64,
    units: [u16; 256],
}

impl Default for CpuBins {
    fn default() -> Self {
        Self {
            latest: 0,
            units: [0; 256],
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
            self.add_units(bin, units);
        }
    }

    fn add_units(&mut self, bin: u64, units: u64) {
        if !ring_seek(&mut self.units, &mut self.latest, bin) {
            return;
        }
        if let Some(u) = self.units.get_mut((bin % RING_BINS) as usize) {
            *u = u64::from(*u).saturating_add(units).min(u64::from(u16::MAX)) as u16;
        }
    }

    /// Share of the wall-clock time of bins `[lo, hi]` the thread ran (0 for bins older
    /// than the ring or after the latest record).
    pub fn share(&self, lo: u64, hi: u64) -> f64 {
        if hi < lo {
            return 0.0;
        }
        let bins = (hi - lo + 1) as f64;
        ring_sum(&self.units, self.latest, lo, hi, 0) as f64 / (bins * Self::FULL as f64)
    }
}

/// A thread that ran most of the time after the onset, far more than before.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Burner {
    pub tid: u32,
    /// On-CPU share of the wall-clock time before the onset (the baseline span).
    pub share_before: f64,
    /// On-CPU share after the onset.
    pub share_after: f64,
}

/// Thresholds of the burner test (see [`crate::params::Params::burner_share`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BurnerTest {
    /// Minimum on-CPU share after the onset.
    pub share: f64,
    /// Minimum ratio of the share after to the share before.
    pub rise: f64,
}

impl BurnerTest {
    /// Whether shares `before` → `after` make a burner.
    pub fn burns(&self, before: f64, after: f64) -> bool {
        after >= self.share && after >= self.rise * before
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

    #[test]
    fn the_burner_test_needs_a_high_share_and_a_rise() {
        let t = BurnerTest {
            share: 0.5,
            rise: 3.0,
        };
        assert!(t.burns(0.05, 0.9));
        assert!(!t.burns(0.05, 0.3), "not most of the time");
        assert!(!t.burns(0.4, 0.9), "it already ran that much");
    }
}
