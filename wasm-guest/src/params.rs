//! Tunable parameters of the analysis, with the paper's defaults and validation.
//!
//! Durations are in seconds (`f64`) because these values are written by operators in
//! config files and echoed in every report; the engine converts them to nanoseconds once.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A parameter that cannot be used, with the key name an operator would write.
#[derive(Debug, Error, PartialEq)]
#[error("invalid parameter `{key}`: {reason}")]
pub struct ParamError {
    pub key: &'static str,
    pub reason: String,
}

/// Every knob of the PerfCompass analysis and of the engine's bounded state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// α: fault onset time threshold; a thread whose onset is below it is *directly* affected.
    /// 2 s by default: a thread can only show a fault after k × `confirm_runs` moving
    /// averages plus a lasting outlier, which on the real PostgreSQL/MariaDB/Apache
    /// recordings takes busy threads (100–600 calls/s) up to ~1.9 s under CPU, disk and
    /// memory faults (1 s made those threads indirect: see integration-tests/RESULTS.md).
    pub alpha_seconds: f64,
    /// β: onset dispersion threshold for borderline τ (Ω > β → internal).
    pub beta_seconds: f64,
    /// δ: τ above it → external.
    pub external_threshold: f64,
    /// Δ: τ below it → internal.
    pub internal_threshold: f64,
    /// k: length of the moving average that de-noises execution time and frequency.
    pub moving_average_k: usize,
    /// Θ: outlier multiplier (mean + Θ·σ of the baseline).
    pub outlier_sigma: f64,
    /// W: how much recent history a target keeps and a report covers.
    pub window_seconds: f64,
    /// Gap that splits a thread's stream into execution units, and the least time a call
    /// must stay in flight to count as stuck; `None` means α (as in the paper). 1 s by
    /// default, independent of α: a longer gap merges units and delays stuck calls
    /// (measured: with 2 s a PostgreSQL table lock's waiters read as external).
    pub gap_threshold_seconds: Option<f64>,
    /// How often continuous mode evaluates each target (in event time).
    pub cadence_seconds: f64,
    /// Ranked syscalls kept per list in a report (and exported as metrics).
    pub top_n: usize,
    /// Upper bound on threads tracked per target; beyond it the least recently seen is evicted (counted).
    pub max_threads: usize,
    /// Upper bound on targets one engine tracks.
    pub max_targets: usize,
    /// Counters per row of the per-(thread, syscall) sketch (a power of two).
    pub sketch_width: usize,
    /// Rows (independent hashes) of that sketch.
    pub sketch_depth: usize,
    /// Moving averages a baseline needs before it is trusted for testing (per thread and
    /// syscall; the per-syscall pooled baseline needs 4× this).
    pub min_baseline_samples: u32,
    /// Clean epochs (cadence periods) a baseline must have learned before it is trusted:
    /// its maximum must have seen enough normal variation.
    pub min_baseline_epochs: u32,
    /// Samples' worth of history a baseline keeps; older epochs are down-weighted so a
    /// slowly drifting healthy workload keeps being learned.
    pub baseline_max_samples: u32,
    /// Exceedance runs of one series needed within `confirm_window_seconds` to confirm an
    /// outlier (a run that lasts 2k moving averages confirms on its own): controls the
    /// multiple-testing false alarms of testing every moving average.
    pub confirm_runs: usize,
    /// Time span within which `confirm_runs` exceedance runs confirm an outlier.
    pub confirm_window_seconds: f64,
    /// Smallest relative increase of execution time that can count as an outlier (0.5 = +50 %),
    /// so very stable calls (tiny σ) do not alarm on harmless jitter.
    pub min_time_increase: f64,
    /// Smallest relative increase of call frequency that can count as an outlier (1.0 = 2×),
    /// so ordinary bursts do not alarm while runaway loops do.
    pub min_frequency_increase: f64,
    /// Smallest absolute increase of a syscall's moving-average execution time over its
    /// baseline mean that can count as an outlier: a call 15 µs slower does not make a
    /// request slow (measured: a fault-free PostgreSQL run in CI, whose `sendto` went from
    /// 20 to 35 µs on four backends for seconds, read external in continuous mode, with the
    /// client's p99 unchanged). CPU, memory, disk and network faults add milliseconds.
    pub min_time_increase_seconds: f64,
    /// Smallest moving average of the time between a thread's calls (its CPU time or wait
    /// outside calls) that can count as a gap outlier. A pool worker parked in 1-s waits
    /// leaves microseconds between them, so the first 0.3 ms of real work it picks up is
    /// "+10,000 %" of that baseline: not a slowdown of anything (measured on MariaDB: an
    /// InnoDB I/O thread taking over from another made a fault-free run read internal).
    /// A CPU cap, a hog or a runaway loop stretch gaps to milliseconds.
    pub min_gap_seconds: f64,
    /// An execution-time increase smaller than this (over the baseline mean) counts only
    /// when it is also at least `min_small_time_increase`: disks and networks drift by tens
    /// of percent under a neighbour's ordinary load, and nobody notices (measured: a
    /// fault-free PostgreSQL run in CI whose `fdatasync` went from 0.22 to 0.31 ms on two
    /// backends read internal), while a memory cap makes page-cache reads ten times slower
    /// and a disk writer adds milliseconds.
    pub small_time_increase_seconds: f64,
    /// Smallest relative increase of execution time that counts when the increase is under
    /// `small_time_increase_seconds` (1.0 = twice as slow).
    pub min_small_time_increase: f64,
    /// Distinct syscalls tracked per thread at once (beyond it, calls are counted but not
    /// tested; a syscall that recurs takes a channel left idle).
    pub max_syscalls_per_thread: usize,
    /// Calls a thread must make between the onset and onset + α to count as active (τ's
    /// denominator): a thread parked in timed waits makes a handful and could not have
    /// shown a direct impact; one extreme call in ~100 is what a CPU cap produces. The
    /// default (400 with α = 2 s) is a rate of 200 calls/s: scale it with α.
    pub min_active_calls: u32,
    /// Threads that must be affected before a target is declared anomalous (2: a single
    /// thread's outlier is too weak evidence to page anyone; see EVALUATION.md).
    pub min_affected_threads: usize,
    /// Span within which `min_affected_threads` lasting outliers must fall to make one
    /// anomaly (corroboration). 1 s, deliberately not α: a healthy server has unrelated
    /// lasting outliers a second or two apart (measured on an Apache control), while a
    /// fault's first victims confirm within a second of each other. Threads all still
    /// stuck in a call corroborate each other whatever the span (they are stopped at once).
    pub corroboration_seconds: f64,
    /// How long after a thread's first confirmed outlier its persistence is measured.
    /// A fault lasts; a healthy server's bursts (a checkpoint's fsyncs, a cache refill)
    /// are over within a second or two and nobody feels them.
    pub persistence_seconds: f64,
    /// Share of a thread's tested time bins in the `persistence_seconds` after its onset
    /// that must hold an outlier for the thread to count as affected (0.7 over 3 s: on
    /// real PostgreSQL, MariaDB and Apache traces faults keep most victims at 0.8–1.0
    /// while fault-free bursts reach 0.3–0.67; the shortest window and lowest share that
    /// kept every control clean, see integration-tests/RESULTS.md). 0 counts every outlier.
    pub min_persistence: f64,
    /// Share of the `persistence_seconds` after its onset that a thread must have lost to
    /// slower calls and longer gaps (their excess over the baseline means) for an outlier
    /// of execution time or of the gap between calls to count: a few calls of 1–2 ms
    /// among calls of 30 µs can keep a thread's moving averages outlying for seconds while
    /// it loses 0.2 % of its time (measured: a fault-free PostgreSQL run in CI whose
    /// `sendto` blipped on two backends read internal; the victims of real faults lost
    /// 0.6–100 %, but for one MariaDB thread under a memory cap at 0.3 %). Outliers of call
    /// frequency and stopped threads are not held to it. 0 switches it off.
    pub min_lost_share: f64,
    /// A thread that was not busy right after the onset (not in τ's population by
    /// `min_active_calls`) but shows a lasting outlier within its first this-many calls
    /// after the onset is *directly* affected, whatever its σ, and joins the population:
    /// an idle worker cannot show a fault before it runs, and one that shows it as soon
    /// as it runs was hit as directly as the busy ones (packet loss and CPU faults on
    /// Apache's mostly idle workers: onsets 2–20 s, yet within their first 5–500 calls).
    /// 400 by default, the calls a busy thread makes within α at the activity floor;
    /// 0 switches it off (wall-clock σ only, as in the paper). Threads stuck in one call
    /// are left to the wall-clock rule: a lock's waiters block at their first call too.
    pub direct_within_calls: u32,
    /// A thread that made at least this many calls in the second before a pause longer
    /// than the unit gap, and was in no call during it, *stalled* (see
    /// `target::stall_episode`): page-fault reclaim under a memory cap stops busy threads
    /// for seconds between calls, where no call duration shows it. 20 by default: no
    /// thread that busy paused over 1 s outside a call in 29 fault-free recordings, while
    /// 9–10 PostgreSQL backends (95–290 calls in the second before) did under a memory
    /// cap. It is also the call rate under which a stopped thread *stayed* stopped (the
    /// on-demand lone-stop rule, see `Target::evaluate`), and the burst a thread must have
    /// made before falling silent outside any call to count as spinning (see
    /// `target::spin_episode`). 0 switches stalls, blocks (see `target::blocked_episode`),
    /// spins and that rule off (the paper's detector: a unit gap is just a boundary).
    pub stall_min_calls: u32,
    /// A thread of the target that ran on a CPU at least this share of the wall-clock
    /// time after the onset (and `burner_rise` times its share before) is a *CPU burner*,
    /// and an anomaly with one is internal whatever τ says: no environment fault makes the
    /// service's own threads run more (see `cpu_time`). Needs scheduler records
    /// (`EventKind::OnCpu`; the perf sources' `sched:sched_stat_runtime`); without them
    /// the rule abstains. 0 switches it off.
    pub burner_share: f64,
    /// The rise over the thread's own share before the onset that a burner needs (a
    /// thread that always runs that much is the workload, not a fault).
    pub burner_rise: f64,
    /// A thread whose share rose `burner_rise` times to at least this much, under
    /// `burner_share`, is a burner too when at least `spinner_preempted` of its switches
    /// away from the CPU after the onset were preemptions: a runaway split over more
    /// threads than CPUs gives each only a part of one, but it never blocks, while a
    /// thread that runs more under memory thrashing blocks in page-in I/O (see
    /// `cpu_time`). Needs switch records (`EventKind::OffCpu`; the perf sources'
    /// `sched:sched_switch`). 0 switches it off.
    pub spinner_share: f64,
    /// The share of a spinner's switches away from the CPU that were preemptions. 0.98:
    /// spinners measured 0.99–1.0, while paging PostgreSQL backends under a memory cap
    /// measured 0.92–0.95 (direct reclaim reschedules a runnable thread, which counts as
    /// a preemption), yet still blocked dozens of times a second.
    pub spinner_preempted: f64,
    /// When at least this share of the target's switches away from the CPU after the
    /// onset handed it to *another process's* task (and `neighbour_rise` times the share
    /// before), another process took the target's CPU, and an anomaly without a CPU burner
    /// is external whatever τ says (see `cpu_time`). Co-located CPU hogs measured
    /// 0.19–0.32 against 0.04–0.07 before (Apache, MariaDB, PostgreSQL); the 9 internal
    /// faults stayed at or under 0.08. Needs switch records that name the task switched
    /// in (perf's `sched:sched_switch`, LTTng's `sched_switch`). Also the share other
    /// processes must get of a CPU that stopped going idle for an external anomaly's
    /// subsystem to be CPU scheduling (`cpu_taken.saturated`). 0 switches both off.
    pub neighbour_share: f64,
    /// The rise over the share before the onset that `neighbour_share` needs (a service
    /// that always shares its CPU with others has that share as its normal). Hogs rose
    /// 3.4–8.6 times; internal faults at most 2.5 times, at shares under 0.05.
    pub neighbour_rise: f64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            alpha_seconds: 2.0,
            beta_seconds: 0.25,
            external_threshold: 0.9,
            internal_threshold: 0.8,
            moving_average_k: 5,
            outlier_sigma: 2.0,
            window_seconds: 90.0,
            gap_threshold_seconds: Some(1.0),
            cadence_seconds: 10.0,
            top_n: 5,
            max_threads: 16_384,
            max_targets: 64,
            sketch_width: 1 << 14,
            sketch_depth: 4,
            min_baseline_samples: 20,
            min_baseline_epochs: 3,
            baseline_max_samples: 4096,
            confirm_runs: 3,
            confirm_window_seconds: 1.0,
            min_time_increase: 0.5,
            min_frequency_increase: 1.0,
            min_time_increase_seconds: 0.000_05,
            min_gap_seconds: 0.000_5,
            small_time_increase_seconds: 0.000_5,
            min_small_time_increase: 1.0,
            max_syscalls_per_thread: 16,
            min_affected_threads: 2,
            corroboration_seconds: 1.0,
            min_active_calls: 400,
            persistence_seconds: 3.0,
            min_persistence: 0.7,
            min_lost_share: 0.004,
            direct_within_calls: 400,
            stall_min_calls: 20,
            burner_share: 0.5,
            burner_rise: 3.0,
            spinner_share: 0.05,
            spinner_preempted: 0.98,
            neighbour_share: 0.15,
            neighbour_rise: 2.5,
        }
    }
}

/// Most cadence ticks per window ([`Params::validate`]).
pub const MAX_WINDOW_EPOCHS: usize = 512;
/// Most cells (`sketch_width × sketch_depth`) of a target's overflow sketch.
pub const MAX_SKETCH_CELLS: usize = 1 << 21;

fn err(key: &'static str, reason: impl Into<String>) -> ParamError {
    ParamError {
        key,
        reason: reason.into(),
    }
}

/// The shortest duration any parameter may have: shorter ones round to 0 ns, and a
/// duration of 0 divides rates by zero (a NaN in a report fails the host's decode of
/// every report of the call).
pub const MIN_SECONDS: f64 = 1e-6;

fn positive_seconds(key: &'static str, v: f64) -> Result<(), ParamError> {
    seconds_at_least(key, v, MIN_SECONDS)
}

fn seconds_at_least(key: &'static str, v: f64, min: f64) -> Result<(), ParamError> {
    if !v.is_finite() || v <= 0.0 {
        return Err(err(
            key,
            format!("must be a positive number of seconds, got {v}"),
        ));
    }
    if v < min {
        return Err(err(key, format!("must be at least {min} s, got {v}")));
    }
    if v > 86_400.0 {
        return Err(err(
            key,
            format!("must be at most one day (86400 s), got {v}"),
        ));
    }
    Ok(())
}

fn fraction(key: &'static str, v: f64) -> Result<(), ParamError> {
    if !(v.is_finite() && v > 0.0 && v <= 1.0) {
        return Err(err(key, format!("must be a ratio in (0, 1], got {v}")));
    }
    Ok(())
}

fn in_range(key: &'static str, v: usize, lo: usize, hi: usize) -> Result<(), ParamError> {
    if v < lo || v > hi {
        return Err(err(key, format!("must be between {lo} and {hi}, got {v}")));
    }
    Ok(())
}

impl Params {
    /// Checks every value and the relations between them, naming the first bad key.
    pub fn validate(&self) -> Result<(), ParamError> {
        positive_seconds("alpha_seconds", self.alpha_seconds)?;
        positive_seconds("beta_seconds", self.beta_seconds)?;
        fraction("external_threshold", self.external_threshold)?;
        fraction("internal_threshold", self.internal_threshold)?;
        if self.internal_threshold > self.external_threshold {
            return Err(err(
                "internal_threshold",
                format!(
                    "Δ ({}) must not exceed δ = external_threshold ({})",
                    self.internal_threshold, self.external_threshold
                ),
            ));
        }
        in_range("moving_average_k", self.moving_average_k, 1, 64)?;
        if !(self.outlier_sigma.is_finite()
            && self.outlier_sigma > 0.0
            && self.outlier_sigma <= 100.0)
        {
            return Err(err(
                "outlier_sigma",
                format!("must be in (0, 100], got {}", self.outlier_sigma),
            ));
        }
        // A window is binned in 512 parts: under a second the bins reach single
        // nanoseconds, and a cadence under 100 ms evaluates every target's every thread
        // ten times a second of event time (a replayed trace: per record).
        seconds_at_least("window_seconds", self.window_seconds, 1.0)?;
        if let Some(g) = self.gap_threshold_seconds {
            positive_seconds("gap_threshold_seconds", g)?;
        }
        seconds_at_least("cadence_seconds", self.cadence_seconds, 0.1)?;
        // Each cadence tick of the window keeps a per-syscall activity row, allocated
        // up front per target (~6 KiB a row).
        let epochs = self.window_seconds / self.cadence_seconds;
        if epochs > MAX_WINDOW_EPOCHS as f64 {
            return Err(err(
                "cadence_seconds",
                format!(
                    "window_seconds / cadence_seconds must not exceed {MAX_WINDOW_EPOCHS} \
                     (per-target state grows with it), got {} / {} = {epochs:.0}",
                    self.window_seconds, self.cadence_seconds
                ),
            ));
        }
        if self.cadence_seconds > self.window_seconds {
            return Err(err(
                "cadence_seconds",
                format!(
                    "must not exceed window_seconds ({}), got {}",
                    self.window_seconds, self.cadence_seconds
                ),
            ));
        }
        in_range("top_n", self.top_n, 1, 100)?;
        in_range("max_threads", self.max_threads, 1, 1 << 20)?;
        in_range("max_targets", self.max_targets, 1, 4096)?;
        in_range("sketch_width", self.sketch_width, 64, 1 << 24)?;
        if !self.sketch_width.is_power_of_two() {
            return Err(err(
                "sketch_width",
                format!("must be a power of two, got {}", self.sketch_width),
            ));
        }
        in_range(
            "sketch_depth",
            self.sketch_depth,
            1,
            crate::sketch::MAX_DEPTH,
        )?;
        // Both epochs of a target's overflow sketch are allocated at once, at its first
        // untracked call: a bound on the product keeps that at most 32 MiB, where the
        // separate bounds allowed 2 GiB, an allocation that fails in the guest.
        let cells = self.sketch_width.saturating_mul(self.sketch_depth);
        if cells > MAX_SKETCH_CELLS {
            return Err(err(
                "sketch_width",
                format!(
                    "sketch_width × sketch_depth must not exceed {MAX_SKETCH_CELLS} \
                     (2 epochs × 8 bytes per cell per target), got {} × {} = {cells}",
                    self.sketch_width, self.sketch_depth
                ),
            ));
        }
        in_range(
            "min_baseline_samples",
            self.min_baseline_samples as usize,
            1,
            1 << 20,
        )?;
        in_range(
            "baseline_max_samples",
            self.baseline_max_samples as usize,
            self.min_baseline_samples as usize,
            1 << 24,
        )?;
        in_range(
            "min_baseline_epochs",
            self.min_baseline_epochs as usize,
            1,
            1000,
        )?;
        in_range("confirm_runs", self.confirm_runs, 1, 4)?;
        positive_seconds("confirm_window_seconds", self.confirm_window_seconds)?;
        for (key, v) in [
            ("min_time_increase", self.min_time_increase),
            ("min_frequency_increase", self.min_frequency_increase),
            ("min_small_time_increase", self.min_small_time_increase),
        ] {
            if !(v.is_finite() && (0.0..=1000.0).contains(&v)) {
                return Err(err(key, format!("must be in [0, 1000], got {v}")));
            }
        }
        for (key, v) in [
            ("min_time_increase_seconds", self.min_time_increase_seconds),
            ("min_gap_seconds", self.min_gap_seconds),
            (
                "small_time_increase_seconds",
                self.small_time_increase_seconds,
            ),
        ] {
            if !(v.is_finite() && (0.0..=60.0).contains(&v)) {
                return Err(err(key, format!("must be in [0, 60], got {v}")));
            }
        }
        in_range(
            "max_syscalls_per_thread",
            self.max_syscalls_per_thread,
            1,
            1024,
        )?;
        in_range(
            "min_active_calls",
            self.min_active_calls as usize,
            1,
            1 << 24,
        )?;
        in_range(
            "min_affected_threads",
            self.min_affected_threads,
            1,
            1 << 20,
        )?;
        positive_seconds("persistence_seconds", self.persistence_seconds)?;
        positive_seconds("corroboration_seconds", self.corroboration_seconds)?;
        in_range(
            "direct_within_calls",
            self.direct_within_calls as usize,
            0,
            1 << 24,
        )?;
        in_range("stall_min_calls", self.stall_min_calls as usize, 0, 1 << 24)?;
        if !(self.burner_share.is_finite() && (0.0..=1.0).contains(&self.burner_share)) {
            return Err(err(
                "burner_share",
                format!("must be in [0, 1], got {}", self.burner_share),
            ));
        }
        for (key, v) in [
            ("burner_rise", self.burner_rise),
            ("neighbour_rise", self.neighbour_rise),
        ] {
            if !(v.is_finite() && (1.0..=1000.0).contains(&v)) {
                return Err(err(key, format!("must be in [1, 1000], got {v}")));
            }
        }
        for (key, v) in [
            ("spinner_share", self.spinner_share),
            ("spinner_preempted", self.spinner_preempted),
            ("neighbour_share", self.neighbour_share),
        ] {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(err(key, format!("must be in [0, 1], got {v}")));
            }
        }
        for (key, v) in [
            ("min_persistence", self.min_persistence),
            ("min_lost_share", self.min_lost_share),
        ] {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(err(key, format!("must be in [0, 1], got {v}")));
            }
        }
        Ok(())
    }

    /// The execution-unit gap threshold actually in force (α unless set).
    pub fn gap_threshold(&self) -> f64 {
        self.gap_threshold_seconds.unwrap_or(self.alpha_seconds)
    }
}

/// Seconds to nanoseconds, saturating: parameters are validated to be at most a day.
pub fn seconds_to_ns(s: f64) -> u64 {
    (s * 1e9).round().clamp(0.0, u64::MAX as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_sizing_knobs_are_bounded_together() {
        let bad = |p: Params| p.validate().expect_err("invalid").key;
        let d = Params::default();
        // The sketch supports 8 rows, so 9–16 would validate and then build no sketch.
        assert_eq!(
            bad(Params {
                sketch_depth: 12,
                ..d.clone()
            }),
            "sketch_depth"
        );
        // Each bound alone allowed 2^24 × 8 cells: 2 GiB at the first untracked call.
        let wide = Params {
            sketch_width: 1 << 24,
            sketch_depth: 4,
            ..d.clone()
        };
        assert_eq!(bad(wide), "sketch_width");
        let widest = Params {
            sketch_width: 1 << 19,
            sketch_depth: 4,
            ..d.clone()
        };
        assert_eq!(widest.validate(), Ok(()));
        // 90 s in ticks of 20 ms: 4,500 activity rows per target.
        let fine = Params {
            cadence_seconds: 0.02,
            ..d.clone()
        };
        assert_eq!(bad(fine), "cadence_seconds");
        let hourly = Params {
            window_seconds: 3_600.0,
            cadence_seconds: 10.0,
            ..d
        };
        assert_eq!(hourly.validate(), Ok(()));
    }

    #[test]
    fn defaults_are_the_papers_and_valid() {
        let p = Params::default();
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(
            (
                p.external_threshold,
                p.internal_threshold,
                p.moving_average_k
            ),
            (0.9, 0.8, 5)
        );
        // The unit gap no longer follows the default α; unset, it still does.
        assert!(p.gap_threshold() < p.alpha_seconds);
        let paper = Params {
            gap_threshold_seconds: None,
            ..Params::default()
        };
        assert_eq!(paper.gap_threshold(), paper.alpha_seconds);
    }

    #[test]
    fn bad_values_name_their_key() {
        let p = Params {
            internal_threshold: 0.95,
            ..Params::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "internal_threshold");
        let p = Params {
            alpha_seconds: f64::NAN,
            ..Params::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "alpha_seconds");
        let p = Params {
            sketch_width: 1000,
            ..Params::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "sketch_width");
        let p = Params {
            min_persistence: 1.5,
            ..Params::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "min_persistence");
        let p = Params {
            persistence_seconds: 0.0,
            ..Params::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "persistence_seconds");
        for bad in [0.0, -1.0, f64::INFINITY] {
            let p = Params {
                corroboration_seconds: bad,
                ..Params::default()
            };
            assert_eq!(p.validate().unwrap_err().key, "corroboration_seconds");
        }
        let p = Params {
            direct_within_calls: 1 << 25,
            ..Params::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "direct_within_calls");
    }

    /// Durations that passed as "positive" but broke the engine: a persistence that
    /// rounds to 0 ns (rates of 0/0 = NaN in a report), a 100-tick window of
    /// microseconds (an evaluation per record), bins of single nanoseconds.
    #[test]
    fn durations_too_short_to_work_are_refused() {
        let d = Params::default();
        let cases = [
            (
                "persistence_seconds",
                Params {
                    persistence_seconds: 1e-10,
                    ..d.clone()
                },
            ),
            (
                "window_seconds",
                Params {
                    window_seconds: 1e-4,
                    cadence_seconds: 1e-6,
                    ..d.clone()
                },
            ),
            (
                "cadence_seconds",
                Params {
                    cadence_seconds: 0.05,
                    ..d.clone()
                },
            ),
            (
                "alpha_seconds",
                Params {
                    alpha_seconds: 1e-9,
                    ..d.clone()
                },
            ),
        ];
        for (key, p) in cases {
            let e = p.validate().unwrap_err();
            assert_eq!(e.key, key, "{e}");
            assert!(e.reason.contains("at least"), "{e}");
        }
        let shortest = Params {
            window_seconds: 1.0,
            cadence_seconds: 0.1,
            persistence_seconds: MIN_SECONDS,
            ..d
        };
        assert_eq!(shortest.validate(), Ok(()));
    }
}
